"""Where each option kind's walk ends, whether its target is present, and its live failures."""

from __future__ import annotations

import numpy as np

from omjax.envs.meltingpot.adapter import SymbolicState
from omjax.options.meltingpot.beam import state_beam
from omjax.options.meltingpot.library import MPLibrary
from omjax.options.meltingpot.memo import lib_memo
from omjax.options.meltingpot.paths import Ctx, cell_distance, goal_distance
from omjax.options.menu import Instance
from omjax.options.schema import Reason


def patch_mask(ctx: Ctx, target) -> np.ndarray:
    """bool [H, W]: cells of the patch holding `target` (memoised in `ctx.cache`)."""
    pid = int(ctx.layout.patch_id[target[1], target[0]])
    key = ("patch", pid)
    out = ctx.cache.get(key)
    if out is None:
        out = ctx.cache[key] = ctx.layout.patch_id == pid
        out.flags.writeable = False
    return out


def goal_mask(lib: MPLibrary, ctx: Ctx, state: SymbolicState, opt: int, target) -> np.ndarray:
    """Cells where option `opt`'s walk ends (for `clean`/`approach`: cells of any firing pose).

    The result may be shared: treat it as read-only."""
    kind = lib.options[opt]
    shape = ctx.layout.shape
    if kind.kind == "eat":
        goal = np.zeros(shape, bool)
        goal[target[1], target[0]] = True
        return goal
    if kind.kind in ("clean", "approach"):
        return state_beam(ctx, state).goal(target)
    if kind.kind == "goto" and kind.region is not None:
        return ctx.regions[kind.region]
    if kind.kind in ("goto", "patch_eat"):
        patch = patch_mask(ctx, target)
        return patch if kind.kind == "goto" else patch & state.apples
    return np.zeros(shape, bool)


def goal_distance_of(lib: MPLibrary, ctx: Ctx, state: SymbolicState, opt: int, target) -> np.ndarray:
    """`goal_distance` of `goal_mask(...)`, without building single-cell goals."""
    if lib.kinds[opt] == "eat":
        return cell_distance(ctx, int(target[0]), int(target[1]))
    return goal_distance(ctx, goal_mask(lib, ctx, state, opt, target))


def in_goal(lib: MPLibrary, ctx: Ctx, state: SymbolicState, opt: int, target, x: int, y: int) -> bool:
    """`goal_mask(...)[y, x]` without building the mask."""
    kind = lib.options[opt]
    if kind.kind == "eat":
        return (x, y) == (int(target[0]), int(target[1]))
    if kind.kind in ("clean", "approach"):
        return bool(state_beam(ctx, state).goal(target)[y, x])
    if kind.kind == "goto" and kind.region is not None:
        return bool(ctx.regions[kind.region][y, x])
    if kind.kind in ("goto", "patch_eat"):
        pid = ctx.layout.patch_id[target[1], target[0]]
        in_patch = ctx.layout.patch_id[y, x] == pid
        return bool(in_patch) if kind.kind == "goto" else bool(in_patch and state.apples[y, x])
    return False


def target_present(lib: MPLibrary, state: SymbolicState, opt: int, target) -> bool:
    kind = lib.options[opt].kind
    if kind == "eat":
        return bool(state.apples[target[1], target[0]])
    if kind in ("clean", "approach"):
        return bool(state.dirt[target[1], target[0]])
    return True


def live_failures(lib: MPLibrary, ctx: Ctx, state: SymbolicState, agent: int, inst: Instance) -> np.ndarray:
    """bool [R]: the typed failures the raw executor would raise for `inst` right now."""
    return live_memo(lib, ctx, state, agent, inst).copy()


def live_memo(lib: MPLibrary, ctx: Ctx, state: SymbolicState, agent: int, inst: Instance) -> np.ndarray:
    """`live_failures`, memoised per state (read-only)."""
    memo = lib_memo(state, lib)
    key = ("live", agent, inst.opt, inst.target)
    live = memo.get(key)
    if live is None:
        live = memo[key] = _live(lib, ctx, state, inst, _component_mask(ctx, state, agent))
        live.flags.writeable = False
    return live


def _component_mask(ctx: Ctx, state: SymbolicState, agent: int) -> np.ndarray:
    """bool [H, W]: the walkable component the agent stands in (memoised per component)."""
    label = int(ctx.component[state.pos[agent, 1], state.pos[agent, 0]])
    key = ("component", label)
    out = ctx.cache.get(key)
    if out is None:
        out = ctx.cache[key] = ctx.component == label
        out.flags.writeable = False
    return out


def _live(lib: MPLibrary, ctx: Ctx, state: SymbolicState, inst: Instance, mine: np.ndarray) -> np.ndarray:
    """`live_failures` given `mine`, the agent's walkable component (bool [H, W])."""
    live = np.zeros(len(Reason), bool)
    if inst.target is not None and not target_present(lib, state, inst.opt, inst.target):
        live[Reason.TargetAbsent] = True
        return live
    kind = lib.options[inst.opt].kind
    if kind in ("wait", "fire"):
        return live
    # A static route exists iff some goal cell lies in the agent's walkable component.
    if kind in ("clean", "approach"):
        reachable = bool(np.any(state_beam(ctx, state).poses(inst.target) & mine[None]))
    elif kind == "eat":
        reachable = bool(mine[inst.target[1], inst.target[0]])
    elif kind == "goto":  # a static goal: memoised per goal and component
        goal = goal_mask(lib, ctx, state, inst.opt, inst.target)
        key = ("reachable", id(goal), mine.tobytes())
        hit = ctx.cache.get(key)
        if hit is None or hit[0] is not goal:
            hit = ctx.cache[key] = (goal, bool(np.any(goal & mine)))
        reachable = hit[1]
    else:
        reachable = bool(np.any(goal_mask(lib, ctx, state, inst.opt, inst.target) & mine))
    live[Reason.NoPath] = not reachable
    return live
