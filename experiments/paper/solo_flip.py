"""§6.4 solo-test flip: train on Forced Coordination and Asymmetric Advantages, then each agent alone.

    python -m experiments.paper.solo_flip --cpu      # SmolLM2-135M at the quick-start scale
    python -m experiments.paper.solo_flip            # paper scale: Qwen3-4B (paper: FC team 7.57, alone 0)

For each layout, trains the full method (resuming a stopped run), evaluates its best checkpoint
on the held-out seeds, then plays the solo test on the same seeds: the team, and each agent alone
with its partner absent (a one-player kitchen of the same layout). The frozen base (option menu,
no adapters) plays the same test beside it (paper, FC: frozen 0.00 vs trained 7.57). On AA one
agent can do the whole task alone; on FC nobody can, so a team return there certifies
coordination. Writes `<root>/solo_flip/solo_flip.png`, `.json` and `.md`.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from experiments.paper import common

from omjax.config import load_config
from omjax.eval.ablations import TABLE2_CELLS
from omjax.eval.audits import plot_solo_test
from omjax.eval.cli import load_policy, parse_seeds
from omjax.eval.solo import solo_test_policy

LAYOUTS = {"forced_coordination": "overcooked_fc", "asymmetric_advantages": "overcooked_aa"}
"""Layout -> config prefix at paper scale (`configs/<prefix>_<backbone>.yaml`)."""


def layout_config(scale: common.Scale, layout: str) -> tuple[Path, list[str]]:
    if scale.name == "cpu":
        return scale.config("overcooked_aa", scale.backbones[0]), [f"env.layout={layout}"]
    return common._existing(common.CONFIGS / f"{LAYOUTS[layout]}_{scale.backbones[0]}.yaml"), []


POLICIES = ("trained", "frozen")
"""The full method's best checkpoint, and the frozen base on the same option menu."""


def render(reports: dict) -> str:
    lines = ["| layout | policy | team deliveries | " + " | ".join(f"a{a} alone" for a in range(2)) +
             " | partner when alone | verdict |", "|---|---|---|---|---|---|---|"]
    for layout, by_policy in reports.items():
        for policy, r in by_policy.items():
            s = r.summary()
            lines.append(f"| {layout} | {policy} | {s['team_mean']:.2f} | " +
                         " | ".join(f"{v:.2f}" for v in s["solo_mean"]) + f" | {s['partner']} | {s['verdict']} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    common.add_common_args(parser)
    args = parser.parse_args(argv)
    scale = common.scale_of(args)
    root = Path(args.root) / "solo_flip"
    seeds = parse_seeds(common.eval_seed_range(scale.eval_episodes))
    reports = {}
    for layout in LAYOUTS:
        config, layout_overrides = layout_config(scale, layout)
        run = root / layout
        overrides = [*scale.overrides, *TABLE2_CELLS["ours"], *layout_overrides, *args.overrides]
        if not args.render_only:
            common.run_policy(config, overrides, run, scale.eval_episodes, label=layout)
        if not common.is_finished(run):
            raise SystemExit(f"solo_flip: {run} has no finished evaluation (run without --render-only)")
        cfg = load_config(run / "config.yaml")
        trainer, bank = load_policy(cfg, run, "best")
        if trainer is None:
            raise SystemExit(f"solo_flip: no best checkpoint in {run}")
        reports[layout] = {"trained": solo_test_policy(trainer, bank, seeds)}
        frozen = load_config(config, [*scale.overrides, *TABLE2_CELLS["frozen_menu"], *layout_overrides,
                                      *args.overrides, f"run.out_dir={run / 'frozen'}"])
        reports[layout]["frozen"] = solo_test_policy(*load_policy(frozen, None), seeds)
    plot_solo_test({f"{layout} ({policy})": r for layout, by in reports.items() for policy, r in by.items()},
                   root / "solo_flip.png", title="Solo test flip (best checkpoints and the frozen base, partner absent)")
    table = render(reports)
    common.write_text(root / "solo_flip.md", table)
    common.write_text(root / "solo_flip.json", json.dumps(
        {layout: {policy: r.summary() for policy, r in by.items()} for layout, by in reports.items()}, indent=2) + "\n")
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
