"""Fig. 2: Commons Harvest patch survival, frozen base vs tuned, over a long evaluation episode.

    python -m experiments.paper.fig2            # paper scale: 400-step evaluation of the Qwen3-4B runs
    python -m experiments.paper.fig2 --cpu      # CPU scale: SmolLM2-135M, shorter evaluation

Trains the full method on Harvest (the Table 2 "ours" cell) once per training seed (`--seeds`,
default the scale's: five at paper scale; the curve pools their episodes), evaluates it and the frozen base with
the option menu ("frozen_menu") on episodes of `harvest_eval_horizon` steps, and plots the
patches alive per step from their trajectories (`omjax audit patches`). Needs a Harvest rollout
game registered with the engine whose `patches_alive()` the evaluation records. Writes
`<root>/figures/fig2.png` (+ `.json`) and `<root>/figures/fig2_report.md` (both policies' team
and per-agent returns, bootstrap CIs, Mann-Whitney U).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from experiments.paper import common

from omjax.eval.ablations import TABLE2_CELLS
from omjax.eval.audit_cli import audit_patches
from omjax.eval.results import read_results, render_report

GAME = "commons_harvest"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    common.add_common_args(parser)
    parser.add_argument("--seeds", type=int, nargs="+", default=None,
                        help="training seeds of the tuned runs, pooled into one curve (default: the "
                             "scale's, five at paper scale)")
    args = parser.parse_args(argv)
    scale = common.scale_of(args)
    root = Path(args.root)
    config = scale.config(GAME, scale.backbones[0])
    long_eval = [f"env.horizon={scale.harvest_eval_horizon}"]
    seeds = tuple(args.seeds) if args.seeds else scale.seeds
    frozen = root / "fig2" / "frozen"
    tuned = [root / "fig2" / f"tuned_seed{seed}" for seed in seeds]
    if not args.render_only:
        common.evaluate(frozen, scale.eval_episodes,
                        [*scale.overrides, *TABLE2_CELLS["frozen_menu"], *args.overrides, *long_eval],
                        config=config, label="frozen")
        for seed, run in zip(seeds, tuned):
            common.train(config, [*scale.overrides, *TABLE2_CELLS["ours"], f"seed={seed}", *args.overrides], run)
            common.evaluate(run, scale.eval_episodes, long_eval, label=f"tuned_seed{seed}")
    out = root / "figures" / "fig2.png"
    summary = audit_patches({"frozen": frozen / "eval", "tuned": [run / "eval" for run in tuned]}, out, n_patches=None)
    summary["seeds"] = list(seeds)
    out.with_suffix(".json").write_text(json.dumps(summary, indent=2) + "\n")
    results = [r for run in (frozen, *tuned) for r in read_results(run / "eval" / "eval.jsonl")]
    common.write_text(root / "figures" / "fig2_report.md", render_report(results))
    print(f"wrote {out}: {summary}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
