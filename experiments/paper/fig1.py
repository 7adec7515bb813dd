"""Fig. 1: per-agent macro choices of the trained team on Overcooked AA, plus the solo test.

    python -m experiments.paper.fig1 --cpu
    python -m experiments.paper.fig1            # paper scale (the Table 2 "ours" run on Qwen3-4B)

Uses (and if needed launches) the full method's Table 1 runs on Overcooked Asymmetric Advantages,
one per training seed (`--seeds`, default the scale's: five at paper scale), and pools their
evaluations with each run's agents ranked by return (roles, not agent indices, are compared
across seeds), or the one finished run given with `--run`. The histogram
comes from `omjax audit macro`. With `--scripted-solo` it also runs the §6.4 solo test on AA and the Forced
Coordination control with the scripted cooks of `omjax.eval.scripted` (`omjax audit solo`). Writes `<root>/figures/fig1.png` (+ `.json`).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from experiments.paper import common

from omjax.eval.ablations import TABLE2_CELLS
from omjax.eval.audit_cli import audit_macro, audit_solo


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    common.add_common_args(parser)
    parser.add_argument("--run", type=Path, default=None,
                        help="draw from this finished run (e.g. the Table 2 'ours' cell) instead of the seeds")
    parser.add_argument("--seeds", type=int, nargs="+", default=None,
                        help="training seeds to train (the Table 1 runs) and pool, agents ranked by return "
                             "within each run (default: the scale's, five at paper scale)")
    parser.add_argument("--scripted-solo", action="store_true",
                        help="also run the solo test with scripted cooks on AA and Forced Coordination")
    args = parser.parse_args(argv)
    scale = common.scale_of(args)
    root = Path(args.root)
    seeds = tuple(args.seeds) if args.seeds else scale.seeds
    if args.run is not None:
        runs = [args.run]
    else:
        backbone = scale.backbones[0]
        runs = [common.table1_ours_dir(root, "overcooked_aa", backbone, s) for s in seeds]
        if not args.render_only:
            config = scale.config("overcooked_aa", backbone)
            for seed, run in zip(seeds, runs):
                common.run_policy(config, [*scale.overrides, *TABLE2_CELLS["ours"], f"seed={seed}", *args.overrides],
                                  run, scale.eval_episodes, label=f"ours_seed{seed}")
    for run in runs:
        if not common.is_finished(run):
            raise SystemExit(f"fig1: {run} has no finished evaluation (run without --render-only)")
    out = root / "figures" / "fig1.png"
    summary = audit_macro([run / "eval" for run in runs], out)
    summary["runs"] = [str(run) for run in runs]
    out.with_suffix(".json").write_text(json.dumps(summary, indent=2) + "\n")
    print(f"wrote {out}: shares per agent {summary['shares']} over options {summary['options']}")
    if args.scripted_solo:
        solo = root / "figures" / "solo_scripted.png"
        horizon = 400 if scale.name == "paper" else 150
        result = audit_solo(["asymmetric_advantages", "forced_coordination"], ["cook", "cook"], horizon, solo)
        solo.with_suffix(".json").write_text(json.dumps(result, indent=2) + "\n")
        print(f"wrote {solo}: {result}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
