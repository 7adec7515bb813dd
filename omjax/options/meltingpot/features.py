"""Targets of each class and the read-set / transient feature values and codes of an agent."""

from __future__ import annotations

import numpy as np

from omjax.envs.meltingpot.adapter import SymbolicState
from omjax.envs.meltingpot.text import view_mask
from omjax.options.meltingpot.encoding import encode
from omjax.options.meltingpot.library import MPLibrary
from omjax.options.meltingpot.memo import lib_memo, occupied, state_memo
from omjax.options.meltingpot.paths import HEAD_XY, Ctx
from omjax.options.menu import Instance


def targets(ctx: Ctx, state: SymbolicState, agent: int) -> dict[str, list[tuple[int, int]]]:
    """Targets of every class for `agent`: visible apples and dirt (nearest first), all patches.

    Memoised per state and agent: treat the result as read-only."""
    memo = state_memo(state)
    key = ("targets", agent)
    out = memo.get(key)
    if out is not None:
        return out
    view = view_mask(state.pos[agent], int(state.ori[agent]), state.apples.shape)
    out = {}
    for cls, grid in (("apple", state.apples), ("dirt", state.dirt)):
        ys, xs = np.nonzero(grid & view)
        dist = np.abs(xs - state.pos[agent, 0]) + np.abs(ys - state.pos[agent, 1])
        order = np.lexsort((xs, ys, dist))
        out[cls] = list(zip(xs[order].tolist(), ys[order].tolist()))
    anchors = ctx.cache.get("anchors")
    if anchors is None:
        anchors = ctx.cache["anchors"] = [(int(x), int(y)) for x, y in ctx.layout.patch_anchor]
    out["patch"] = anchors
    memo[key] = out
    return out


def dist_bucket(state: SymbolicState, agent: int, target) -> str:
    """Manhattan distance agent -> target as a read-set value (`none` for target-less options)."""
    if target is None:
        return "none"
    d = abs(int(target[0]) - int(state.pos[agent, 0])) + abs(int(target[1]) - int(state.pos[agent, 1]))
    return "0" if d == 0 else "1" if d == 1 else "2-3" if d <= 3 else "4-6" if d <= 6 else "7+"


DIST_VALUES = ("none", "0", "1", "2-3", "4-6", "7+")


def partner_adjacent(state: SymbolicState, agent: int) -> str:
    """Transient: is another alive avatar on a 4-neighbour cell."""
    x, y = int(state.pos[agent, 0]), int(state.pos[agent, 1])
    occ = occupied(state)
    return "yes" if any((x + dx, y + dy) in occ for dx, dy in HEAD_XY) else "no"


def at(state: SymbolicState, agent: int, grid: np.ndarray) -> bool:
    return bool(grid[state.pos[agent, 1], state.pos[agent, 0]])


def partner_transient(ctx: Ctx, state: SymbolicState, agent: int) -> dict[str, str]:
    """The transient features both Melting Pot games log: `partner_adjacent`."""
    return {"partner_adjacent": partner_adjacent(state, agent)}


def agent_feature_values(lib: MPLibrary, ctx: Ctx, state: SymbolicState, agent: int) -> dict:
    memo = lib_memo(state, lib)
    key = ("agent", agent)
    values = memo.get(key)
    if values is None:
        values = memo[key] = lib.agent_features(ctx, state, agent, targets(ctx, state, agent))
    return values


def read_codes(lib: MPLibrary, ctx: Ctx, state: SymbolicState, agent: int, inst: Instance,
                agent_values: dict | None = None) -> np.ndarray:
    """int8 [F] read-set codes of `inst` for `agent` (they depend on the target class and target
    only, so options sharing a class share them; memoised per state)."""
    cls = lib.classes[inst.opt]
    memo = lib_memo(state, lib)
    key = ("read", agent, cls, inst.target)
    codes = memo.get(key)
    if codes is None:
        if agent_values is None:
            agent_values = agent_feature_values(lib, ctx, state, agent)
        values = {**agent_values, **lib.target_features(ctx, state, agent, cls, inst.target)}
        codes = memo[key] = encode(lib.read_codec, values)
        codes.flags.writeable = False
    return codes


def transient_codes(lib: MPLibrary, ctx: Ctx, state: SymbolicState, agent: int) -> np.ndarray:
    memo = lib_memo(state, lib)
    key = ("transient", agent)
    codes = memo.get(key)
    if codes is None:
        codes = memo[key] = encode(lib.transient_codec, lib.transient_features(ctx, state, agent))
        codes.flags.writeable = False
    return codes
