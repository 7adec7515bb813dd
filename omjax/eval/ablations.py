"""The six cells of Table 2 (paper §6.1) as config overrides on one base run config.

Design space {abstraction: option menu / compound-JSON / native} x {capacity: per-agent LoRA /
shared LoRA / no training}; each cell differs from the full method only in the removed part, so
every cell is the same base config plus the few `section.key=value` overrides below.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from omjax.config import Config, load_config

TABLE2_CELLS: dict[str, tuple[str, ...]] = {
    "frozen_native": ("policy.action_interface=native", "train.train=false"),
    "frozen_menu": ("policy.action_interface=options", "train.train=false"),
    "native_magrpo": ("policy.action_interface=native", "train.train=true"),
    # Free generation needs the sampled reply; constrained letter scoring has nothing to parse.
    # A full emission such as {"action": "place_in_pot", "args": {"target": [4, 2]}} is 22-25
    # SmolLM2 tokens, so the default 24-token reply budget would truncate valid ones.
    "compound_json": ("policy.action_interface=compound_json", "policy.decision_mode=sample",
                      "policy.max_new_tokens=48", "train.train=true"),
    "shared_lora": ("policy.action_interface=options", "train.shared_lora=true", "train.train=true"),
    "ours": ("policy.action_interface=options", "train.shared_lora=false", "train.train=true"),
    # The paper ran its ablations on an earlier interface whose guards were hand-selected (§6.1):
    # the full method on that interface, beside the synthesized-guard row above.
    "ours_hand_guards": ("policy.action_interface=options", "train.shared_lora=false", "train.train=true",
                         "env.guards=hand"),
}
"""Cell name -> overrides, in the paper's Table 2 row order (see `omjax.eval.stats.TABLE2_ROWS`)."""


def cell_overrides(cell: str) -> tuple[str, ...]:
    try:
        return TABLE2_CELLS[cell]
    except KeyError:
        raise ValueError(f"unknown Table 2 cell {cell!r}; cells: {', '.join(TABLE2_CELLS)}") from None


def cell_config(cell: str, base: str | Path | None = None, overrides: Sequence[str] = ()) -> Config:
    """The validated config of one cell: `base` YAML, then the cell's overrides, then `overrides`.

    Later overrides win, so a caller can rescale a cell (rounds, horizon) but a cell's defining
    switches are applied after the base file and cannot be silently lost to it.
    """
    return load_config(base, [*cell_overrides(cell), *overrides])
