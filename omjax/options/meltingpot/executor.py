"""The raw executor: start, one primitive per step (closed loop, re-planned every step), termination.

Kinds:
    eat        walk onto the target apple (entering a cell with an apple eats it)
    clean      walk to a firing pose (the target inside the cleaning beam's footprint with a clear
               lane), turn to face, FIRE_CLEAN once
    approach   the same walk and turn, without firing
    fire       FIRE_CLEAN once, where the agent stands
    goto       walk into a goal region (river bank, orchard, open floor) or the target patch
    patch_eat  walk onto the nearest apple of the target patch
    wait       NOOP once
Explicit failures, checked at initiation only: `TargetAbsent` (the target item is gone) and
`NoPath` (no route on the static map). A failed initiation costs the agent its step (NOOP).
Termination: the kind's goal reached (after at least one primitive), the target item gone, or a
timeout of `MAX_OPTION_STEPS` (logged as effect_fail). Effect features are measured at
initiation (pre) and at termination (post), counters relative to the initiation.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from omjax.envs.meltingpot.adapter import SymbolicState
from omjax.options.meltingpot.beam import state_beam
from omjax.options.meltingpot.encoding import encode
from omjax.options.meltingpot.features import read_codes, transient_codes
from omjax.options.meltingpot.goals import goal_distance_of, in_goal, live_memo, patch_mask, target_present
from omjax.options.meltingpot.library import MPLibrary
from omjax.options.meltingpot.paths import Ctx, goal_distance, turn_toward, walk_step
from omjax.options.menu import Instance
from omjax.options.schema import EFFECT_FAIL, EXPLICIT_BASE, SUCCESS, Reason, effect_holds

# Longer than any walk an option asks for: visible targets lie within 14 steps, regions and
# patches within 34 (the far corner patches of Commons Harvest), plus at most two turns.
MAX_OPTION_STEPS = 40


@dataclasses.dataclass(frozen=True)
class Execution:
    """One running option of one agent (call-and-return: it runs until `advance` ends it)."""

    agent: int
    inst: Instance
    step0: int  # env step at initiation
    features: np.ndarray  # int8 [F] read set at initiation
    transient: np.ndarray  # int8 [G]
    pre: np.ndarray  # int8 [E] effect features at initiation
    failure: Reason | None  # explicit failure at initiation: the execution is a single NOOP
    steps: int = 0  # primitives emitted
    ate: int = 0  # apples this agent ate during the execution
    cleaned: int = 0  # dirt cells this agent cleaned during the execution
    fired: bool = False  # the final FIRE_CLEAN has been emitted


def _evolve(ex: Execution, **changes) -> Execution:
    """`dataclasses.replace` for Execution without re-running __init__ (a hot path)."""
    new = object.__new__(Execution)
    new.__dict__.update(ex.__dict__)
    new.__dict__.update(changes)
    return new


def start(lib: MPLibrary, ctx: Ctx, state: SymbolicState, agent: int, inst: Instance) -> Execution:
    live = live_memo(lib, ctx, state, agent, inst)
    failure = Reason(int(np.argmax(live))) if live.any() else None
    ex = Execution(agent=agent, inst=inst, step0=state.step,
                   features=read_codes(lib, ctx, state, agent, inst).copy(),
                   transient=transient_codes(lib, ctx, state, agent).copy(),
                   pre=np.zeros(len(lib.schema.effect_features), np.int8), failure=failure)
    return _evolve(ex, pre=effect_codes(lib, ctx, state, ex))


def act(lib: MPLibrary, ctx: Ctx, ex: Execution, state: SymbolicState) -> int:
    """The primitive action `ex`'s agent takes in `state` (NOOP when it has nothing to do)."""
    agent = ex.agent
    if ex.failure is not None or not state.alive[agent]:
        return ctx.noop
    kind = lib.kinds[ex.inst.opt]
    if kind == "wait":
        return ctx.noop
    if kind == "fire":
        return ctx.actions["FIRE_CLEAN"]
    target = ex.inst.target
    if kind in ("clean", "approach"):
        beam = state_beam(ctx, state)
        poses = beam.poses(target)
        x, y = int(state.pos[agent, 0]), int(state.pos[agent, 1])
        ori = int(state.ori[agent])
        if poses[ori, y, x]:
            return ctx.actions["FIRE_CLEAN"] if kind == "clean" else ctx.noop
        if poses[:, y, x].any():
            # Fewest turns (a half turn costs two); ties go to the lower orientation index.
            want = min(np.nonzero(poses[:, y, x])[0], key=lambda o: (min((o - ori) % 4, (ori - o) % 4), o))
            return turn_toward(ctx, ori, int(want))
        move = walk_step(ctx, state, agent, goal_distance(ctx, beam.goal(target)))
        return ctx.noop if move is None else move
    move = walk_step(ctx, state, agent, goal_distance_of(lib, ctx, state, ex.inst.opt, target))
    return ctx.noop if move is None else move


def _finished(lib: MPLibrary, ctx: Ctx, ex: Execution, state: SymbolicState) -> bool:
    if ex.failure is not None or ex.steps >= MAX_OPTION_STEPS:
        return True
    kind = lib.kinds[ex.inst.opt]
    if kind in ("wait", "fire"):
        return True
    if kind == "clean":
        return ex.fired or not target_present(lib, state, ex.inst.opt, ex.inst.target)
    if kind == "patch_eat":
        return ex.ate > 0 or not bool(np.any(patch_mask(ctx, ex.inst.target) & state.apples))
    if ex.inst.target is not None and not target_present(lib, state, ex.inst.opt, ex.inst.target):
        return True
    x, y = int(state.pos[ex.agent, 0]), int(state.pos[ex.agent, 1])
    if kind == "approach":
        return bool(state_beam(ctx, state).poses(ex.inst.target)[int(state.ori[ex.agent]), y, x])
    return in_goal(lib, ctx, state, ex.inst.opt, ex.inst.target, x, y)


def advance(lib: MPLibrary, ctx: Ctx, ex: Execution, action: int, state: SymbolicState
            ) -> tuple[Execution, int | None, bool]:
    """Account for the step `action` -> `state`. Returns (execution, outcome or None while it
    runs, changed): the outcome is SUCCESS / EFFECT_FAIL / EXPLICIT_BASE + reason once it ends;
    `changed` says whether any effect feature moved from its initiation value."""
    agent = ex.agent
    ex = _evolve(ex, steps=ex.steps + 1, ate=ex.ate + int(state.ate[agent]),
                 cleaned=ex.cleaned + int(state.cleaned[agent]),
                 fired=ex.fired or action == ctx.actions.get("FIRE_CLEAN", -1))
    if not _finished(lib, ctx, ex, state):
        return ex, None, False
    post = effect_codes(lib, ctx, state, ex)
    changed = bool(np.any(post != ex.pre))
    if ex.failure is not None:
        return ex, EXPLICIT_BASE + int(ex.failure), changed
    ok = ex.steps < MAX_OPTION_STEPS or _finished_before_timeout(lib, ctx, ex, state)
    if ok and effect_holds(lib.schema, ex.inst.opt, ex.pre, post):
        return ex, SUCCESS, changed
    return ex, EFFECT_FAIL, changed


def _finished_before_timeout(lib: MPLibrary, ctx: Ctx, ex: Execution, state: SymbolicState) -> bool:
    """At the step limit, an execution that also met its own goal on that step is not a timeout."""
    return _finished(lib, ctx, _evolve(ex, steps=0), state)


def common_effects(state: SymbolicState, ex: Execution, cls: str | None) -> dict[str, str]:
    """Effect features both games share: `my_apples` (ate during the execution), `at_target`,
    `tgt_apple` (present / absent; none without an apple target)."""
    a, tgt = ex.agent, ex.inst.target
    return {
        "my_apples": "more" if ex.ate > 0 else "same",
        "at_target": "yes" if tgt is not None and tuple(state.pos[a]) == tuple(tgt) else "no",
        "tgt_apple": ("present" if state.apples[tgt[1], tgt[0]] else "absent") if cls == "apple" else "none",
    }


def effect_codes(lib: MPLibrary, ctx: Ctx, state: SymbolicState, ex: Execution) -> np.ndarray:
    return encode(lib.effect_codec, lib.effect_features(ctx, state, ex, lib.classes[ex.inst.opt]))
