"""Table 1: frozen base vs ours for every backbone x game, mean ± std over training seeds (§6.2).

    python -m experiments.paper.table1 --cpu                   # CPU scale: SmolLM2-135M, Overcooked AA, 2 seeds
    python -m experiments.paper.table1                         # paper scale: 4 backbones x 3 games x 5 seeds
    python -m experiments.paper.table1 --cpu --render-only

For each game and backbone: the frozen base is evaluated once from the config (it has no training
seed) with native actions, as the paper's Table 1 frozen row is (frozen + native, Ablation C; the
frozen base over the option menu is Table 2's "Frozen + option menu" row), and the full method
trains every training seed in one program (`omjax train --seeds`: one base, the seeds' adapters in
one bank, their rollouts batched together, each seed on the option library it draws), then each
seed's best checkpoint is evaluated. A cell is the mean ±
std over seeds of each run's mean team return on the held-out episodes. Writes `<root>/table1.md`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from experiments.paper import common

from omjax.eval.ablations import TABLE2_CELLS
from omjax.eval.stats import table1_markdown


def run_game(scale: common.Scale, root: Path, game: str, backbone: str, extra: list[str]) -> None:
    config = scale.config(game, backbone)
    frozen = common.table1_frozen_dir(root, game, backbone)
    common.run_policy(config, [*scale.overrides, *TABLE2_CELLS["frozen_native"], *extra], frozen,
                      scale.eval_episodes, label="frozen")
    overrides = [*scale.overrides, *TABLE2_CELLS["ours"], *extra]
    common.train_group(config, overrides, common.table1_ours_group(root, game, backbone), scale.seeds)
    for seed in scale.seeds:
        common.evaluate(common.table1_ours_dir(root, game, backbone, seed), scale.eval_episodes,
                        label=f"ours_seed{seed}", compare=[frozen / "eval"])


def render(root: Path, scale: common.Scale, games: tuple[str, ...]) -> str:
    data = common.collect_table1(root, scale, games)
    table = table1_markdown(data, scale.backbones, games)
    common.write_text(root / "table1.md", table)
    return table


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    common.add_common_args(parser)
    args = parser.parse_args(argv)
    scale = common.scale_of(args)
    games = common.games_of(args, scale)
    root = Path(args.root)
    if not args.render_only:
        for game in games:
            for backbone in scale.backbones:
                run_game(scale, root, game, backbone, args.overrides)
    print(render(root, scale, games))
    return 0


if __name__ == "__main__":
    sys.exit(main())
