"""Fig. 1: per-agent macro choices of the trained team on Overcooked AA, plus the solo test.

    python experiments/fig1.py --cpu
    python experiments/fig1.py            # paper scale (the Table 2 "ours" run on Qwen3-4B)

Uses (and if needed launches) the "ours" cell of Table 2 on Overcooked Asymmetric Advantages, or
the finished run given with `--run`, then draws the histogram from its evaluation (`omjax audit
macro`). With `--scripted-solo` it also runs the §6.4 solo test on AA and the Forced
Coordination control with the scripted cooks of `omjax.eval.scripted` (`omjax audit solo`). Writes `<root>/figures/fig1.png` (+ `.json`).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common  # noqa: E402
import table2  # noqa: E402

from omjax.eval.audit_cli import audit_macro, audit_solo  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    common.add_common_args(parser)
    parser.add_argument("--run", type=Path, default=None,
                        help="draw from this finished run (e.g. a Table 1 seed, the same config as the "
                             "Table 2 'ours' cell) instead of the 'ours' cell")
    parser.add_argument("--scripted-solo", action="store_true",
                        help="also run the solo test with scripted cooks on AA and Forced Coordination")
    args = parser.parse_args(argv)
    scale = common.scale_of(args)
    root = Path(args.root)
    run = args.run or common.table2_dir(root, "overcooked_aa", "ours")
    if not args.render_only and args.run is None:
        table2.run_cell(scale, root, "overcooked_aa", "ours", args.overrides)
    if not common.is_finished(run):
        raise SystemExit(f"fig1: {run} has no finished evaluation (run without --render-only)")
    out = root / "figures" / "fig1.png"
    summary = audit_macro(run / "eval", out)
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
