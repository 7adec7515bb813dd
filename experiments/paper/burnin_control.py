"""The §5.1 burn-in control: uniform vs frozen-LLM burn-in, same episodes, guards found and wall time.

    python -m experiments.paper.burnin_control --cpu                 # SmolLM2-135M, 2 + 2 episodes of 60 steps
    python -m experiments.paper.burnin_control                       # paper scale: Qwen3-4B, 2,000 + 2,000 x 400 steps

Runs the Overcooked AA burn-in twice over the same solo and team episodes, once with the uniform
policy of Stage 2 and once with the frozen base choosing from the same guardless menu through the
rollout engine, synthesises guards from each, and writes `<root>/burnin_control.json`, `.md` and
`.png` (paper: 2 guards for the frozen LLM vs 36 for uniform, at ~400x the cost).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from matplotlib.figure import Figure

from experiments.paper import common

from omjax.config import load_config
from omjax.eval.burnin_control import compare_burnins
from omjax.train.trainer import Trainer

LAYOUT = "asymmetric_advantages"


def render(result: dict, out_png: Path) -> str:
    rows = ["| burn-in policy | records | guards | wall time (s) | options that ever succeeded |",
            "|---|---|---|---|---|"]
    for name in ("uniform", "llm"):
        r = result[name]
        rows.append(f"| {name} | {r['records']} | {r['guards']} | {r['wall_s']:.1f} | "
                    f"{len(r['options_that_succeeded'])}: {', '.join(r['options_that_succeeded'])} |")
    fig = Figure(figsize=(6.5, 3.2))
    for k, (key, label) in enumerate((("guards", "guards synthesised"), ("wall_s", "wall time (s)"))):
        ax = fig.add_subplot(1, 2, k + 1)
        ax.bar(["uniform", "frozen LLM"], [result["uniform"][key], result["llm"][key]], color=["tab:green", "tab:gray"])
        ax.set_title(label, fontsize=9)
    fig.suptitle(f"Burn-in control on {LAYOUT}: {result['episodes']}")
    fig.tight_layout()
    out_png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out_png, dpi=110)
    return "\n".join(rows) + f"\n\nLLM / uniform wall time: {result['cost_ratio']}x\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", default="runs/experiments")
    parser.add_argument("--cpu", action="store_true", help="SmolLM2-135M, 2 + 2 episodes of 60 steps")
    parser.add_argument("--solo", type=int, default=None, help="solo episodes (default: 2 at --cpu, 2000)")
    parser.add_argument("--team", type=int, default=None, help="team episodes (default: 2 at --cpu, 2000)")
    parser.add_argument("--horizon", type=int, default=None, help="steps per episode (default: 60 at --cpu, 400)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("overrides", nargs="*", metavar="key=value", help="config overrides (e.g. model.name=...)")
    args = parser.parse_args(argv)
    scale = common.CPU if args.cpu else common.PAPER
    solo = args.solo if args.solo is not None else (2 if args.cpu else 2000)
    team = args.team if args.team is not None else (2 if args.cpu else 2000)
    horizon = args.horizon if args.horizon is not None else (60 if args.cpu else 400)
    if min(solo, team) < 0 or solo + team == 0 or horizon < 1:
        raise SystemExit(f"need episodes and a horizon >= 1, got --solo {solo} --team {team} --horizon {horizon}")
    cfg = load_config(scale.config("overcooked_aa", scale.backbones[0]),
                      [*scale.overrides, "train.train=false", "env.library=lib_a", f"env.horizon={horizon}",
                       *args.overrides])
    trainer = Trainer(cfg)
    frozen = trainer.init_state().bank  # B = 0: every adapter is exactly the base model
    result = compare_burnins(trainer, frozen, LAYOUT, solo, team, args.seed, horizon)
    result["episodes"] = f"{solo} solo + {team} team x {horizon} steps"
    result["model"] = cfg.model.name
    root = Path(args.root)
    table = render(result, root / "burnin_control.png")
    common.write_text(root / "burnin_control.md", table)
    common.write_text(root / "burnin_control.json", json.dumps(result, indent=2) + "\n")
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
