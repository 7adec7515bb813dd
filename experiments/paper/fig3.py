"""Fig. 3: per-agent visit heatmaps of the trained team (paper: Cleanup and Harvest, 7 agents).

    python -m experiments.paper.fig3                         # paper scale: Cleanup and Harvest, Qwen3-4B "ours" runs
    python -m experiments.paper.fig3 --cpu                   # CPU scale: the game the CPU scale trains
    python -m experiments.paper.fig3 --cpu --games overcooked_aa
    python -m experiments.paper.fig3 --cpu --run runs/experiments_cpu/fig2/tuned   # a finished run

Uses (and if needed launches) the Table 2 "ours" run of the game, or the finished run given with
`--run` (e.g. Fig. 2's tuned Harvest team, whose 7 agents' 100-step CPU-scale evaluation is the
Melting Pot map this machine can afford), then draws each agent's visit counts over all
evaluation episodes on the map (`omjax audit heatmap`). The CPU scale defaults to Overcooked AA,
the game it trains. Writes `<root>/figures/fig3_<game>.png` (+ `.json`).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from experiments.paper import common
from experiments.paper import table2

from omjax.eval.audit_cli import audit_heatmap

PAPER_GAMES = ("clean_up", "commons_harvest")
"""The maps Fig. 3 draws at paper scale: both Melting Pot games' 7-agent teams."""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    common.add_common_args(parser)
    parser.add_argument("--run", type=Path, default=None,
                        help="draw from this finished run instead of the game's Table 2 'ours' cell")
    args = parser.parse_args(argv)
    scale = common.scale_of(args)
    root = Path(args.root)
    if args.run is not None:
        game = common.run_game(args.run)
        runs = [(game, args.run)]
    else:
        games = args.games or (list(PAPER_GAMES) if scale.name == "paper" else list(scale.games))
        runs = [(game, common.table2_dir(root, game, "ours")) for game in games]
    for game, run in runs:
        if not args.render_only and args.run is None:
            table2.run_cell(scale, root, game, "ours", args.overrides)
        if not common.is_finished(run):
            raise SystemExit(f"fig3: {run} has no finished evaluation (run without --render-only)")
        out = root / "figures" / f"fig3_{game}.png"
        summary = audit_heatmap(run / "eval", out)
        out.with_suffix(".json").write_text(json.dumps(summary, indent=2) + "\n")
        print(f"wrote {out}: {summary}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
