"""Commons Harvest (Melting Pot `commons_harvest__open`) option libraries: `LIBRARY`.

Two candidate libraries (registry variants; `LIBRARY.SCHEMA` is their union, see `omjax.options.cleanup`):

lib_a:  eat apple @ (x, y) [apple]   go to the patch at (x, y) [patch]   wait
lib_b:  pick the apple at (x, y) [apple]   harvest one apple from the patch at (x, y) [patch]
        walk to the patch at (x, y) [patch]   step back to open floor   wait

The game's source makes patches the natural unit: an eaten apple regrows only with uneaten
apples within radius 2, so a patch is a connected component under that neighbourhood (six on
this map, `omjax.envs.meltingpot.layout`); a patch target is its anchor cell and every patch is
instantiated, alive or not. "Open floor" is every walkable cell farther than the regrowth radius
from all apple cells: standing there touches no patch.

Read set (at initiation): `region` (patch / edge = within the regrowth radius of a patch /
floor), `tgt_dist`, `tgt_patch_apples` (apples left on the target patch: none/0/1/2-4/5+),
`in_tgt_patch`, `apples_visible`. Transient: `partner_adjacent`.
Effect features: private `my_apples` (same/more during the execution), `at_target`,
`in_tgt_patch`, `on_floor`; shared `tgt_apple` (present/absent, none without an apple target).
"""

from __future__ import annotations

import numpy as np

from omjax.envs.meltingpot.adapter import CommonsHarvest, MeltingPotEnv, SymbolicState
from omjax.envs.meltingpot.layout import HARVEST_REGROWTH_RADIUS
from omjax.options import meltingpot as mp
from omjax.options.schema import Effect, Feature, OptionSpec, Reason, Transition


YES_NO = ("no", "yes")

REGION = Feature("region", ("patch", "edge", "floor"), private=True)
TGT_DIST = Feature("tgt_dist", mp.DIST_VALUES)
TGT_PATCH_APPLES = Feature("tgt_patch_apples", ("none", "0", "1", "2-4", "5+"))
IN_TGT_PATCH = Feature("in_tgt_patch", ("none", "no", "yes"), private=True)
APPLES_VISIBLE = Feature("apples_visible", YES_NO)
PARTNER_ADJACENT = Feature("partner_adjacent", YES_NO)

MY_APPLES = Feature("my_apples", ("same", "more"), private=True)
AT_TARGET = Feature("at_target", YES_NO, private=True)
ON_FLOOR = Feature("on_floor", YES_NO, private=True)
TGT_APPLE = Feature("tgt_apple", ("none", "present", "absent"))

_EAT = Effect(private=Transition("my_apples", to=("more",)),
              shared=(Transition("at_target", to=("yes",)),
                      Transition("tgt_apple", to=("absent",), from_=("present",))))
_REACH = (Reason.TargetAbsent, Reason.NoPath)
_GO_PATCH = Effect(private=Transition("in_tgt_patch", to=("yes",), from_=("no",)))

LIB_A = (
    (OptionSpec("eat_apple", "apple", "eat apple @ {target}", _EAT, _REACH,
                "walk onto the apple; entering its cell eats it"), mp.MPOption("eat")),
    (OptionSpec("go_to_patch", "patch", "go to the patch at {target}", _GO_PATCH, (Reason.NoPath,),
                "walk to the nearest cell of the patch"), mp.MPOption("goto")),
    (OptionSpec("wait", None, "wait", Effect(), (), "stay one step"), mp.MPOption("wait")),
)
LIB_B = (
    (OptionSpec("pick_apple", "apple", "pick the apple at {target}", _EAT, _REACH,
                "walk onto the apple"), mp.MPOption("eat")),
    (OptionSpec("harvest_patch", "patch", "harvest one apple from the patch at {target}",
                Effect(private=Transition("my_apples", to=("more",))), (Reason.NoPath,),
                "walk onto the nearest apple of the patch"), mp.MPOption("patch_eat")),
    (OptionSpec("walk_to_patch", "patch", "walk to the patch at {target}", _GO_PATCH, (Reason.NoPath,),
                "walk to the nearest cell of the patch"), mp.MPOption("goto")),
    (OptionSpec("step_back", None, "step back to open floor", Effect(private=Transition("on_floor", to=("yes",))),
                (Reason.NoPath,), "walk to the nearest cell out of every patch's regrowth radius"),
     mp.MPOption("goto", "floor")),
    (OptionSpec("hold", None, "wait", Effect(), (), "stay one step"), mp.MPOption("wait")),
)
_READ = (REGION, TGT_DIST, TGT_PATCH_APPLES, IN_TGT_PATCH, APPLES_VISIBLE)
_EFFECT = (MY_APPLES, AT_TARGET, IN_TGT_PATCH, ON_FLOOR, TGT_APPLE)


def _near_orchard(orchard: np.ndarray, radius: float) -> np.ndarray:
    """bool [H, W]: cells within `radius` (L2) of an orchard cell."""
    h, w = orchard.shape
    ys, xs = np.mgrid[0:h, 0:w]
    near = np.zeros(orchard.shape, bool)
    for y, x in np.argwhere(orchard):
        near |= (ys - y) ** 2 + (xs - x) ** 2 <= radius ** 2
    return near


def regions(env: MeltingPotEnv) -> dict[str, np.ndarray]:
    lay = env.layout
    return {"floor": lay.walkable & ~_near_orchard(lay.orchard, HARVEST_REGROWTH_RADIUS)}


def _region(ctx: mp.Ctx, state: SymbolicState, agent: int) -> str:
    lay = ctx.layout
    if mp.at(state, agent, lay.patch_id >= 0):
        return "patch"
    return "floor" if mp.at(state, agent, ctx.regions["floor"]) else "edge"


def _patch(ctx: mp.Ctx, tgt) -> int:
    return int(ctx.layout.patch_id[tgt[1], tgt[0]])


def _in_patch(ctx: mp.Ctx, state: SymbolicState, agent: int, tgt) -> str:
    return "yes" if mp.at(state, agent, ctx.layout.patch_id == _patch(ctx, tgt)) else "no"


def agent_features(ctx: mp.Ctx, state: SymbolicState, agent: int, view: dict) -> dict[str, str]:
    return {"region": _region(ctx, state, agent), "apples_visible": "yes" if view["apple"] else "no"}


def target_features(ctx: mp.Ctx, state: SymbolicState, agent: int, cls: str | None, tgt) -> dict[str, str]:
    if cls == "patch":
        n = int(state.patch_apples[_patch(ctx, tgt)])
        apples = "0" if n == 0 else "1" if n == 1 else "2-4" if n <= 4 else "5+"
    else:
        apples = "none"
    return {
        "tgt_dist": mp.dist_bucket(state, agent, tgt),
        "tgt_patch_apples": apples,
        "in_tgt_patch": _in_patch(ctx, state, agent, tgt) if cls == "patch" else "none",
    }


def effect_features(ctx: mp.Ctx, state: SymbolicState, ex: mp.Execution, cls: str | None) -> dict[str, str]:
    a, tgt = ex.agent, ex.inst.target
    return {
        **mp.common_effects(state, ex, cls),
        "in_tgt_patch": _in_patch(ctx, state, a, tgt) if cls == "patch" else "none",
        "on_floor": "yes" if mp.at(state, a, ctx.regions["floor"]) else "no",
    }


LIBRARY = mp.MeltingPotGameLibrary(
    game="harvest", module=__name__, env=CommonsHarvest, candidates={"lib_a": LIB_A, "lib_b": LIB_B},
    read_set=_READ, effect_set=_EFFECT, transient=(PARTNER_ADJACENT,), agent_features=agent_features,
    target_features=target_features, effect_features=effect_features, transient_features=mp.partner_transient,
    regions=regions, DEFAULT_EPISODES=(8, 8),  # the coverage curve: 8 + 8 (400-step episodes), README
)
