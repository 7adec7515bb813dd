"""Did a segment-trained run beat uniform picks from its own root states? (training seeds only)

    python -m experiments.lab.segment_baseline runs/segment_run/per_agent
    python -m experiments.lab.segment_baseline RUN --rollouts 64

Under `train.segment` every round's cohort starts from its own root state, so the training
return swings with the root (0 where nothing can be potted in the segment, 3+ where a soup is
near), and its curve says little on its own. This replays each round's root exactly (the run's
config, the round's `start` from `metrics.jsonl` and the walk stream `rollout.walk_rng(seed,
round)`) and plays `--rollouts` continuations of uniform menu picks from it (what the frozen base
amounts to under per-decision letter shuffling), so each round's training return has its own
baseline. Prints one row per round (the run's mean return, uniform's mean and its standard
error), the paired difference over the rounds (mean, t, and a sign test), and one JSON line.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np
from scipy import stats

from experiments.lab.menu_policies import play

from omjax.config import load_config
from omjax.games.registry import make_game
from omjax.options.libraries import resolve_library
from omjax.train.metrics import read_jsonl
from omjax.train.rollout import walk_rng


def baselines(run_dir: Path, rollouts: int, first: int = 0) -> list[dict]:
    """One row per training round of `run_dir` from round `first`: the run's team returns and
    uniform picks' from the same root."""
    cfg = resolve_library(load_config(run_dir / "config.yaml"))
    if not cfg.train.segment:
        raise ValueError(f"{run_dir} trained whole episodes (train.segment=0): its rounds share the reset state, "
                         "so experiments/credit_snr.py's pools are its baseline")
    game = make_game(cfg.env, cfg.policy.action_interface)
    rows = []
    try:
        for row in read_jsonl(run_dir / "metrics.jsonl")[first:]:
            r, start = row["round"], row["start"]
            seeds = [10 ** 6 + r * rollouts + k for k in range(rollouts)]  # apart from the run's episode seeds
            _, rewards = play(game, "uniform", seeds, starts=[start], steps=cfg.train.segment,
                              walks=[walk_rng(cfg.seed, r)])
            uniform = rewards.sum(axis=1)  # [rollouts]
            rows.append({"round": r, "start": start, "trained": float(row["team_return_mean"]),
                         "uniform": float(uniform.mean()), "uniform_se": float(uniform.std(ddof=1) / math.sqrt(rollouts))})
    finally:
        game.close()
    return rows


def paired(rows: list[dict]) -> dict:
    """Trained minus uniform over the rounds: mean, one-sample t and two-sided sign-test p."""
    d = np.array([r["trained"] - r["uniform"] for r in rows])
    t = stats.ttest_1samp(d, 0.0) if len(d) > 1 and d.std() > 0 else None
    nonzero = d[d != 0]
    sign = stats.binomtest(int((nonzero > 0).sum()), len(nonzero)).pvalue if len(nonzero) else 1.0
    return {"rounds": len(d), "mean_difference": float(d.mean()), "t": None if t is None else float(t.statistic),
            "t_p": None if t is None else float(t.pvalue), "rounds_above": int((d > 0).sum()),
            "rounds_below": int((d < 0).sum()), "sign_p": float(sign)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--rollouts", type=int, default=64, help="uniform continuations per root")
    parser.add_argument("--first", type=int, default=0, help="first round compared")
    args = parser.parse_args(argv)
    if args.rollouts < 2:
        raise SystemExit(f"--rollouts must be >= 2 (a standard error needs them), got {args.rollouts}")
    if not (args.run_dir / "metrics.jsonl").is_file():
        raise SystemExit(f"{args.run_dir}: no metrics.jsonl (not an `omjax train` run directory)")
    rows = baselines(args.run_dir, args.rollouts, args.first)
    print("| round | root step | trained return | uniform return (± se) |\n|---|---|---|---|")
    for r in rows:
        print(f"| {r['round']} | {r['start']} | {r['trained']:.2f} | {r['uniform']:.2f} ± {r['uniform_se']:.2f} |")
    summary = paired(rows)
    print(f"\ntrained - uniform over {summary['rounds']} rounds: {summary['mean_difference']:+.2f} "
          f"(t = {summary['t'] if summary['t'] is None else round(summary['t'], 2)}, p = "
          f"{summary['t_p'] if summary['t_p'] is None else round(summary['t_p'], 3)}); above in "
          f"{summary['rounds_above']}, below in {summary['rounds_below']} (sign test p = {summary['sign_p']:.3f})")
    print(json.dumps({"experiment": "segment_baseline", "run": str(args.run_dir), "rollouts": args.rollouts,
                      "rows": rows, "paired": summary}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
