"""Table 2: the six ablation cells x games on one backbone (paper §6.1-§6.2).

    python -m experiments.paper.table2 --cpu                   # CPU scale, Overcooked AA, SmolLM2-135M
    python -m experiments.paper.table2 --games overcooked_aa   # paper scale (Qwen3-4B configs)
    python -m experiments.paper.table2 --cpu --render-only     # re-render from finished runs

Each cell is the game's config plus the cell's overrides (`omjax.eval.ablations.TABLE2_CELLS`).
Frozen cells are evaluated straight from the config (no training); trained cells are trained,
then their best checkpoint is evaluated on the held-out seeds. Cells whose every training
rollout scored zero are marked with the paper's dagger. Writes `<root>/table2.md` (mean ± std
over evaluation episodes) and a bootstrap-CI / Mann-Whitney report of each game's cells. After
each native-action Cleanup cell, the §4 fire_clean audit of its evaluation (how often the beam
was fired with a turn just before it) is written beside it: `<cell>/audit_fireclean.png`, `.json`.
The last row, the full method on hand-selected guards, is the interface the paper's ablations
ran on (§6.1).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from experiments.paper import common

from omjax.eval.ablations import TABLE2_CELLS
from omjax.eval.audit_cli import audit_fire_clean
from omjax.eval.results import read_results, render_report
from omjax.eval.stats import table2_markdown


NATIVE_CELLS = tuple(c for c, o in TABLE2_CELLS.items() if "policy.action_interface=native" in o)
"""The cells that act in motor actions: on Cleanup each is followed by the fire_clean audit."""


def run_cell(scale: common.Scale, root: Path, game: str, cell: str, extra: list[str]) -> None:
    run = common.table2_dir(root, game, cell)
    common.run_policy(scale.config(game, scale.backbones[0]), [*scale.overrides, *TABLE2_CELLS[cell], *extra],
                      run, scale.eval_episodes, label=cell)
    if (game == "clean_up" and cell in NATIVE_CELLS and common.is_finished(run)
            and not (run / "audit_fireclean.json").is_file()):
        summary = audit_fire_clean(run / "eval", run / "audit_fireclean.png")
        common.write_text(run / "audit_fireclean.json", json.dumps(summary, indent=2) + "\n")


def render(root: Path, games: tuple[str, ...]) -> str:
    returns, collapsed = common.collect_table2(root, list(TABLE2_CELLS), games)
    table = table2_markdown(returns, games, collapsed=collapsed)
    common.write_text(root / "table2.md", table)
    for game in games:
        results = [r for cell in TABLE2_CELLS if common.is_finished(run := common.table2_dir(root, game, cell))
                   for r in read_results(run / "eval" / "eval.jsonl")]
        if results:
            common.write_text(root / f"table2_{game}_report.md", render_report(results))
    return table


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    common.add_common_args(parser)
    parser.add_argument("--cells", nargs="+", default=list(TABLE2_CELLS), choices=list(TABLE2_CELLS))
    args = parser.parse_args(argv)
    scale = common.scale_of(args)
    games = common.games_of(args, scale)
    root = Path(args.root)
    if not args.render_only:
        for game in games:
            for cell in args.cells:
                run_cell(scale, root, game, cell, args.overrides)
    print(render(root, games))
    return 0


if __name__ == "__main__":
    sys.exit(main())
