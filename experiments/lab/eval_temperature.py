"""Does sampling a trained team at a lower temperature sharpen what it learned? Training-style seeds.

    python -m experiments.lab.eval_temperature runs/learning/overcooked_q_last_burn/per_agent \\
        --game overcooked_q_last_burn --seed0 5000 --episodes 16 --temperature 0.5 --out runs/temp05

`policy.temperature` divides every logit of a decision (state-line label and letter,
`omjax.train.policy`), so at T < 1 the adapters' learned shift counts 1 / T times as much, and so
do the base's letter habits (which, under the per-decision shuffle, say nothing about the
options). This plays the frozen base and a run's latest adapters (its newest checkpoint) with the
learning setting's held-out config at temperature T, on seeds below the held-out range (a
training-style check that chooses an evaluation protocol without looking at a held-out episode;
training episodes are seeded by 32-bit hashes, `rollout.episode_seed`, so small seeds are
theirs by chance at most), and prints the real deliveries, delivering episodes, shaped return,
idle share and a Mann-Whitney test between the two. `--realign L` also realigns the trained
team's draws (`policy.realign`: its learned shift from the base scaled by L, the base's letter
habits left as they are; the frozen base, its own reference, is played without it). Episodes
are saved per batch to `OUT/{frozen,trained}.jsonl` (a stopped probe resumes) beside the config played,
`OUT/config.yaml`; the last line is one JSON summary.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from experiments.paper import common
from experiments.paper.learning import EVAL_SEED0, SETTINGS
from experiments.lab.menu_policies import IDLE

from omjax.config import dump_config, load_config
from omjax.eval.heldout import compare, evaluate, load_or_play
from omjax.eval.stats import bootstrap_ci
from omjax.train.checkpoint import Checkpointer
from omjax.train.trainer import Trainer


def describe(episodes: list[dict], n_agents: int) -> dict:
    """Real units (mean, CI, delivering episodes), shaped return and each agent's idle share."""
    units = [e["units"] for e in episodes]
    ci, shaped = bootstrap_ci(units), bootstrap_ci([e["shaped_return"] for e in episodes])
    idle = []
    for a in range(n_agents):
        picks = [c["opt"] for e in episodes for c in e["choices"] if c["aid"] == a]
        idle.append(sum(p in IDLE for p in picks) / max(len(picks), 1))
    return {"episodes": len(units), "units_mean": ci.mean, "ci95": [ci.low, ci.high],
            "delivering": int(sum(u > 0 for u in units)), "shaped_mean": shaped.mean, "idle_share": idle}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run", type=Path, help="a learning run's directory (its checkpoints/)")
    parser.add_argument("--game", required=True, choices=sorted(SETTINGS), help="the run's learning setting")
    parser.add_argument("--seed0", type=int, required=True, help=f"first seed; all must be < {EVAL_SEED0}")
    parser.add_argument("--episodes", type=int, default=16)
    parser.add_argument("--temperature", type=float, required=True)
    parser.add_argument("--realign", type=float, default=1.0,
                        help="policy.realign of the trained team's draws (the frozen base is its own reference)")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("overrides", nargs="*", metavar="key=value", help="config overrides applied last (as the run's)")
    args = parser.parse_intermixed_args(argv)  # the run first, key=value overrides last
    seeds = list(range(args.seed0, args.seed0 + args.episodes))
    if args.seed0 < 0 or seeds[-1] >= EVAL_SEED0:
        raise SystemExit(f"seeds {seeds[0]}..{seeds[-1]} reach the held-out range (>= {EVAL_SEED0}): "
                         "this probe must not look at held-out episodes")
    if args.episodes < 2:
        raise SystemExit(f"--episodes must be >= 2 (a Mann-Whitney test needs them), got {args.episodes}")
    if not (args.run / "checkpoints").is_dir():
        raise SystemExit(f"{args.run} has no checkpoints/: not a learning run's directory")
    setting = SETTINGS[args.game]
    overrides = [*setting.overrides, *setting.eval_overrides, f"policy.temperature={args.temperature}",
                 *args.overrides, f"run.out_dir={args.out}"]
    cfg = load_config(common.CONFIGS / setting.config, overrides)
    args.out.mkdir(parents=True, exist_ok=True)
    dump_config(cfg, args.out / "config.yaml")  # what was played: the setting's held-out config at T
    trainer = Trainer(cfg)
    state = trainer.init_state()
    restored = Checkpointer(args.run, cfg.run.keep_checkpoints).restore(state)
    # The trained team's draws realigned (its own Trainer on the same model); the base's are not:
    # realigning a zero adapter gives the base bit for bit, at the cost of a second pass.
    realigned = [*overrides, f"policy.realign={args.realign}"]
    trained = trainer if args.realign == 1.0 else Trainer(load_config(common.CONFIGS / setting.config, realigned),
                                                          model=trainer.model)
    print(f"adapters of {args.run}, checkpoint of round {restored.step}; temperature {args.temperature}; "
          f"realign {args.realign}; seeds {seeds[0]}..{seeds[-1]}", flush=True)
    out, times = {}, {}
    for name, bank, tr in (("frozen", state.bank, trainer), ("trained", restored.state.bank, trained)):
        t0 = time.time()
        out[name] = load_or_play(args.out / f"{name}.jsonl", seeds, setting.eval_batch,
                              lambda chunk, bank=bank, tr=tr: evaluate(tr, bank, chunk, len(chunk)))
        times[name] = time.time() - t0
        print(name, json.dumps(describe(out[name], cfg.env.n_agents)), f"{times[name]:.0f}s", flush=True)
    trainer.game.close()
    if trained is not trainer:
        trained.game.close()
    test = compare(out["trained"], out["frozen"])
    summary = {"experiment": "eval_temperature", "run": str(args.run), "round": restored.step,
               "temperature": args.temperature, "realign": args.realign, "seeds": [seeds[0], seeds[-1]],
               **{name: describe(eps, cfg.env.n_agents) for name, eps in out.items()},
               "u": test["u"], "p": test["p"], "shaped_u": test["shaped_u"], "shaped_p": test["shaped_p"],
               "wall_s": times}
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
