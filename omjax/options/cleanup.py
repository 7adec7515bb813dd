"""Cleanup (Melting Pot `clean_up`) option libraries: `LIBRARY`, a `MeltingPotGameLibrary`.

Two candidate libraries, as two samples of the Stage-1 prompt would give (paper §6.1, "each
training seed draws one candidate library"). They are the registry's variants of the game, so
`omjax guards --game cleanup --layout lib_b` builds the second one; `LIBRARY.SCHEMA` is their union
(option and feature names never collide), which is what records and guard files are read with.

lib_a (the paper's schematic menu):
    eat apple @ (x, y) [apple]   clean dirt @ (x, y) [dirt]   go to the river   go to the orchard   wait
lib_b (finer-grained cleaning):
    harvest the apple at (x, y) [apple]   walk into beam range of dirt at (x, y) [dirt]
    fire the cleaning beam   walk to the river bank   walk to the orchard   stay put

`apple` and `dirt` targets are the cells inside the agent's view window (11 x 11, 9 ahead, see
`omjax.envs.meltingpot.text`). Executors and termination: `omjax.options.meltingpot`.

Read set (guard-eligible, at initiation): `region` (where the agent stands: sand, bank = land
next to the river, river, orchard), `tgt_dist`, `tgt_in_beam` (a dirt target is already inside
the beam from the current pose), `dirt_in_beam` (firing now would hit some dirt),
`apples_visible`, `dirt_visible`. Transient: `partner_adjacent`.
Effect features (pre at initiation, post at termination): private `my_apples` / `my_cleaned`
(same/more: did this agent eat / clean during the execution), `at_target`, `at_river`,
`on_bank`, `in_orchard`, `aimed` (the target dirt is inside my beam); shared `tgt_apple`,
`tgt_dirt` (present/absent; `none` for options without such a target). Every shared condition
sits next to a private transition, so a partner eating my target apple or cleaning my target
dirt never counts as my success.
"""

from __future__ import annotations

import numpy as np

from omjax.envs.meltingpot.adapter import CleanUp, MeltingPotEnv, SymbolicState
from omjax.options import meltingpot as mp
from omjax.options.schema import Effect, Feature, OptionSpec, Reason, Transition


YES_NO = ("no", "yes")
SAME_MORE = ("same", "more")

# Read set.
REGION = Feature("region", ("sand", "bank", "river", "orchard"), private=True)
TGT_DIST = Feature("tgt_dist", mp.DIST_VALUES)
TGT_IN_BEAM = Feature("tgt_in_beam", ("none", "no", "yes"))
DIRT_IN_BEAM = Feature("dirt_in_beam", YES_NO)
APPLES_VISIBLE = Feature("apples_visible", YES_NO)
DIRT_VISIBLE = Feature("dirt_visible", YES_NO)
PARTNER_ADJACENT = Feature("partner_adjacent", YES_NO)
# Effect features.
MY_APPLES = Feature("my_apples", SAME_MORE, private=True)
MY_CLEANED = Feature("my_cleaned", SAME_MORE, private=True)
AT_TARGET = Feature("at_target", YES_NO, private=True)
AT_RIVER = Feature("at_river", YES_NO, private=True)
ON_BANK = Feature("on_bank", YES_NO, private=True)
IN_ORCHARD = Feature("in_orchard", YES_NO, private=True)
# Only my pose moves the target in or out of my beam (a partner clearing a blocking dirt cell
# could too, but then my beam would have hit that cell first, so the transition still needs me).
AIMED = Feature("aimed", ("none", "no", "yes"), private=True)
TGT_APPLE = Feature("tgt_apple", ("none", "present", "absent"))
TGT_DIRT = Feature("tgt_dirt", ("none", "present", "absent"))

_ATE = Transition("my_apples", to=("more",))
_EAT = Effect(private=_ATE, shared=(Transition("at_target", to=("yes",)),
                                    Transition("tgt_apple", to=("absent",), from_=("present",))))
_REACH = (Reason.TargetAbsent, Reason.NoPath)

LIB_A = (
    (OptionSpec("eat_apple", "apple", "eat apple @ {target}", _EAT, _REACH,
                "walk onto the apple; entering its cell eats it"), mp.MPOption("eat")),
    (OptionSpec("clean_dirt", "dirt", "clean dirt @ {target}",
                Effect(private=Transition("my_cleaned", to=("more",)),
                       shared=(Transition("tgt_dirt", to=("absent",), from_=("present",)),)), _REACH,
                "walk within beam range, turn to face, fire_clean"), mp.MPOption("clean")),
    (OptionSpec("go_to_river", None, "go to the river", Effect(private=Transition("at_river", to=("yes",))),
                (Reason.NoPath,), "walk to the nearest river or river-bank cell"), mp.MPOption("goto", "river")),
    (OptionSpec("go_to_orchard", None, "go to the orchard", Effect(private=Transition("in_orchard", to=("yes",))),
                (Reason.NoPath,), "walk to the nearest orchard cell"), mp.MPOption("goto", "orchard")),
    (OptionSpec("wait", None, "wait", Effect(), (), "stay one step"), mp.MPOption("wait")),
)
LIB_B = (
    (OptionSpec("harvest_apple", "apple", "harvest the apple at {target}", _EAT, _REACH,
                "walk onto the apple"), mp.MPOption("eat")),
    (OptionSpec("approach_dirt", "dirt", "walk into beam range of dirt at {target}",
                Effect(private=Transition("aimed", to=("yes",), from_=("no",))), _REACH,
                "walk to a firing pose for the dirt and face it, without firing"), mp.MPOption("approach")),
    (OptionSpec("fire_beam", None, "fire the cleaning beam", Effect(private=Transition("my_cleaned", to=("more",))),
                (), "fire_clean once where the agent stands"), mp.MPOption("fire")),
    (OptionSpec("walk_to_bank", None, "walk to the river bank", Effect(private=Transition("on_bank", to=("yes",))),
                (Reason.NoPath,), "walk to the nearest land cell next to the river"), mp.MPOption("goto", "bank")),
    (OptionSpec("walk_to_orchard", None, "walk to the orchard", Effect(private=Transition("in_orchard", to=("yes",))),
                (Reason.NoPath,), "walk to the nearest orchard cell"), mp.MPOption("goto", "orchard")),
    (OptionSpec("stay_put", None, "stay put", Effect(), (), "stay one step"), mp.MPOption("wait")),
)
_READ = (REGION, TGT_DIST, TGT_IN_BEAM, DIRT_IN_BEAM, APPLES_VISIBLE, DIRT_VISIBLE)
_EFFECT = (MY_APPLES, MY_CLEANED, AT_TARGET, AT_RIVER, ON_BANK, IN_ORCHARD, AIMED, TGT_APPLE, TGT_DIRT)


def regions(env: MeltingPotEnv) -> dict[str, np.ndarray]:
    lay = env.layout
    return {"river": lay.river | lay.shore, "bank": lay.shore, "orchard": lay.orchard}


def _region(ctx: mp.Ctx, state: SymbolicState, agent: int) -> str:
    lay = ctx.layout
    if mp.at(state, agent, lay.river):
        return "river"
    if mp.at(state, agent, lay.shore):
        return "bank"
    return "orchard" if mp.at(state, agent, lay.orchard) else "sand"


def _aimed(ctx: mp.Ctx, state: SymbolicState, agent: int, target) -> bool:
    return mp.state_beam(ctx, state).in_beam(state.pos[agent], int(state.ori[agent]), target)


def agent_features(ctx: mp.Ctx, state: SymbolicState, agent: int, view: dict) -> dict[str, str]:
    return {
        "region": _region(ctx, state, agent),
        "dirt_in_beam": "yes" if mp.dirt_in_beam(ctx, state, agent) else "no",
        "apples_visible": "yes" if view["apple"] else "no",
        "dirt_visible": "yes" if view["dirt"] else "no",
    }


def target_features(ctx: mp.Ctx, state: SymbolicState, agent: int, cls: str | None, tgt) -> dict[str, str]:
    return {
        "tgt_dist": mp.dist_bucket(state, agent, tgt),
        "tgt_in_beam": ("yes" if _aimed(ctx, state, agent, tgt) else "no") if cls == "dirt" else "none",
    }


def effect_features(ctx: mp.Ctx, state: SymbolicState, ex: mp.Execution, cls: str | None) -> dict[str, str]:
    a, tgt = ex.agent, ex.inst.target
    lay = ctx.layout
    return {
        **mp.common_effects(state, ex, cls),
        "my_cleaned": "more" if ex.cleaned > 0 else "same",
        "at_river": "yes" if mp.at(state, a, lay.river | lay.shore) else "no",
        "on_bank": "yes" if mp.at(state, a, lay.shore) else "no",
        "in_orchard": "yes" if mp.at(state, a, lay.orchard) else "no",
        "aimed": ("yes" if _aimed(ctx, state, a, tgt) else "no") if cls == "dirt" else "none",
        "tgt_dirt": ("present" if state.dirt[tgt[1], tgt[0]] else "absent") if cls == "dirt" else "none",
    }


LIBRARY = mp.MeltingPotGameLibrary(
    game="cleanup", module=__name__, env=CleanUp, candidates={"lib_a": LIB_A, "lib_b": LIB_B},
    read_set=_READ, effect_set=_EFFECT, transient=(PARTNER_ADJACENT,), agent_features=agent_features,
    target_features=target_features, effect_features=effect_features, transient_features=mp.partner_transient,
    regions=regions, DEFAULT_EPISODES=(7, 7),  # one solo episode per agent, then as many team episodes (150 steps each)
)
