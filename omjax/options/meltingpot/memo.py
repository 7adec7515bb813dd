"""Per-step scratch memo on a `SymbolicState`: what every agent and option of one step shares."""

from __future__ import annotations

from omjax.envs.meltingpot.adapter import SymbolicState
from omjax.options.meltingpot.library import MPLibrary

CACHE_SIZE = 4096  # memoised grids (firing poses, distance maps) kept before a cache is dropped


def state_memo(state: SymbolicState) -> dict:
    """A scratch dict living on `state` (one env step): what every agent and option of that step
    shares -- targets, features, occupied cells, beam geometry. States are never mutated in place
    (the adapter makes a new one per step; `dataclasses.replace` starts with an empty memo)."""
    memo = state.__dict__.get("_memo")
    if memo is None:
        memo = {}
        object.__setattr__(state, "_memo", memo)
    return memo


def lib_memo(state: SymbolicState, lib: MPLibrary) -> dict:
    memo = state_memo(state)
    entry = memo.get(id(lib))
    if entry is None or entry[0] is not lib:
        entry = memo[id(lib)] = (lib, {})
    return entry[1]


def occupied(state: SymbolicState) -> set[tuple[int, int]]:
    """Cells held by alive avatars (an agent's own cell is never one of its neighbours)."""
    memo = state_memo(state)
    occ = memo.get("occupied")
    if occ is None:
        occ = memo["occupied"] = {(x, y) for (x, y), alive in zip(state.pos.tolist(), state.alive.tolist()) if alive}
    return occ
