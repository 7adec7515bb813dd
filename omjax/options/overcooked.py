"""The Overcooked-AI option libraries, their executor, burn-in and menus (a `GameLibrary`).

Two candidate libraries, as two samples of the Stage-1 drafting prompt would give (paper §5.1,
"the library is sampled per training seed"). Options (target class in brackets; one menu
instance per target of the class):

    both:   pick_onion [onion dispenser]   pick_dish [dish dispenser]   place_in_pot [pot]
            start_cooking [pot]            plate_soup [pot]              deliver [serving station]
            wait [no target]
    lib_a:  drop_held [counter]            pick_from_counter [counter]
    lib_b:  item-typed counter hand-offs, one option per item (a finer decomposition):
            drop_onion / drop_dish / drop_soup [counter]
            take_onion / take_dish / take_soup [counter]

`SCHEMA` is their union (lib_a's options first, in lib_a's order, then lib_b's own), which
records and guard files are read with; a library instantiates only its own options. Registry
variants: a layout name is lib_a on that layout, `<layout>@lib_b` is lib_b on it (shipped guard
file `overcooked_<layout>@lib_b.jsonl`, from `omjax guards --game overcooked --layout <layout>@lib_b`).

Counters are the counter cells next to at least one floor cell (the ones anyone could ever use).
Read set (guard-eligible, at initiation): `held` (none/onion/dish/soup), `tgt_pot_state`
(na/empty/filling/full/cooking/ready), `tgt_item` (na/none/onion/dish/soup: the item on a target
counter). Transient (logged only): `partner_adjacent`. Effect features: `held`, `tgt_pot_state`,
`tgt_onions`, `tgt_item`, read on the step of the executor's final INTERACT (before and after),
so the delta is the acting agent's own transition.

Raw executor: the shortest interact plan from `overcooked_plan` (one table lookup per step), then
INTERACT; `wait` stays for `wait_steps` steps. Typed failures, checked at initiation in this
order: `NothingHeld` (drop_held with empty hands), `NoPath` (no static path to an interact
pose). A failed initiation consumes the agent's step (it stays) and is logged at once. An
execution that has not reached its INTERACT after `dist + patience` steps times out and is logged
as `effect_fail`.

Two implementations of the same library share every table and function below (written against
an array module `xp`, NumPy or jax.numpy): the jitted, vmapped burn-in (`burnin`, a `lax.scan`
over steps of `option_step`) and the plain-Python per-env loop (`burnin_python`, stepping the
reference simulator `overcooked_ai_py` one env at a time). Given the same option choices they
produce the same records.

Training-side API (see `OvercookedOptions`, and the package docstring for a rollout loop):
`init_exec`, `option_step(state, ex, choice, active)` (jittable, one env; vmap for a batch),
`read_features` / `live_failures` for any `[K]` agent/instance pairs, `hidden_mask` (JAX, all
instances of all agents of one env) and `menu(state, agent, guards, rng)` (Python, lettered
`MenuItem`s).
"""

from __future__ import annotations

import functools
import importlib

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from tqdm.auto import tqdm

from omjax.envs.overcooked.env import State, initial_state, transition
from omjax.envs.overcooked.items import DIR_VEC, NUM_ITEMS, Action, Item
from omjax.envs.overcooked.layout import MAX_INGREDIENTS, Layout, Terrain, load_layout
from omjax.envs.overcooked.reference import from_overcooked_ai, make_mdp, to_overcooked_ai
from omjax.options import menu as menu_mod
from omjax.options.overcooked_plan import plan_tables
from omjax.options.records import NO_TARGET, RecordTable
from omjax.options.schema import (EFFECT_FAIL, EXPLICIT_BASE, SUCCESS, Effect, Feature, Increased, OptionSpec,
                                  Reason, Schema, Transition, compile_effects, effect_holds, effect_holds_jax)
from omjax.options.synthesis import Guard

LAYOUTS = ("asymmetric_advantages", "forced_coordination", "cramped_room", "coordination_ring",
           "counter_circuit")
LIBRARY_SEP = "@"
VARIANTS = LAYOUTS + tuple(f"{layout}{LIBRARY_SEP}lib_b" for layout in LAYOUTS)
DEFAULT_EPISODES = (2000, 2000)
HORIZON = 400  # the paper's Overcooked episode length

HELD = Feature("held", ("none", "onion", "dish", "soup"), private=True)
TGT_POT_STATE = Feature("tgt_pot_state", ("na", "empty", "filling", "full", "cooking", "ready"))
TGT_ITEM = Feature("tgt_item", ("na", "none", "onion", "dish", "soup"))
TGT_ONIONS = Feature("tgt_onions", tuple(str(n) for n in range(MAX_INGREDIENTS + 1)))
PARTNER_ADJACENT = Feature("partner_adjacent", ("no", "yes"))

_CARRY = ("onion", "dish", "soup")


def _typed_counter_options(item: str) -> tuple[OptionSpec, OptionSpec]:
    """lib_b's drop and take of one item kind on a counter."""
    return (
        OptionSpec(f"drop_{item}", "counter", f"put the held {item} down on counter @ {{target}}",
                   Effect(private=Transition("held", from_=(item,), to=("none",)),
                          shared=(Transition("tgt_item", from_=("none",), to=(item,)),)),
                   (Reason.NothingHeld, Reason.NoPath)),
        OptionSpec(f"take_{item}", "counter", f"take the {item} from counter @ {{target}}",
                   Effect(private=Transition("held", from_=("none",), to=(item,)),
                          shared=(Transition("tgt_item", from_=(item,), to=("none",)),)), (Reason.NoPath,)),
    )


SCHEMA = Schema(
    game="overcooked",
    options=(
        OptionSpec("pick_onion", "onion_dispenser", "pick up onion from dispenser @ {target}",
                   Effect(private=Transition("held", to=("onion",))), (Reason.NoPath,)),
        OptionSpec("pick_dish", "dish_dispenser", "pick up dish from dispenser @ {target}",
                   Effect(private=Transition("held", to=("dish",))), (Reason.NoPath,)),
        OptionSpec("place_in_pot", "pot", "place held item in pot @ {target}",
                   Effect(private=Transition("held", from_=("onion",), to=("none",)),
                          shared=(Increased("tgt_onions"),)), (Reason.NoPath,)),
        OptionSpec("start_cooking", "pot", "start cooking pot @ {target}",
                   Effect(shared=(Transition("tgt_pot_state", from_=("filling", "full"), to=("cooking",)),)),
                   (Reason.NoPath,)),
        OptionSpec("plate_soup", "pot", "plate soup from pot @ {target}",
                   Effect(private=Transition("held", from_=("dish",), to=("soup",)),
                          shared=(Transition("tgt_pot_state", from_=("ready",), to=("empty",)),)),
                   (Reason.NoPath,)),
        OptionSpec("deliver", "serving", "deliver soup to serving station @ {target}",
                   Effect(private=Transition("held", from_=("soup",), to=("none",))), (Reason.NoPath,)),
        OptionSpec("drop_held", "counter", "drop held item on counter @ {target}",
                   Effect(private=Transition("held", from_=_CARRY, to=("none",)),
                          shared=(Transition("tgt_item", from_=("none",), to=_CARRY),)),
                   (Reason.NothingHeld, Reason.NoPath)),
        OptionSpec("pick_from_counter", "counter", "pick up item from counter @ {target}",
                   Effect(private=Transition("held", from_=("none",), to=_CARRY),
                          shared=(Transition("tgt_item", from_=_CARRY, to=("none",)),)), (Reason.NoPath,)),
        OptionSpec("wait", None, "wait", Effect()),
        *(spec for item in _CARRY for spec in _typed_counter_options(item)),
    ),
    read_set=(HELD, TGT_POT_STATE, TGT_ITEM),
    effect_features=(HELD, TGT_POT_STATE, TGT_ONIONS, TGT_ITEM),
    transient=(PARTNER_ADJACENT,),
)

_SHARED = ("pick_onion", "pick_dish", "place_in_pot", "start_cooking", "plate_soup", "deliver", "wait")
LIBRARIES: dict[str, tuple[str, ...]] = {
    "lib_a": _SHARED[:6] + ("drop_held", "pick_from_counter", "wait"),
    "lib_b": _SHARED + tuple(f"{verb}_{item}" for item in _CARRY for verb in ("drop", "take")),
}
"""Candidate library -> its option names (lib_a is the default: the shipped guard files of plain
layout names)."""


def split_variant(variant: str) -> tuple[str, str]:
    """Registry variant -> (layout, library): `asymmetric_advantages` is lib_a on that layout,
    `asymmetric_advantages@lib_b` is lib_b."""
    layout, _, lib = variant.partition(LIBRARY_SEP)
    lib = lib or "lib_a"
    if lib not in LIBRARIES:
        raise ValueError(f"unknown Overcooked option library {lib!r} in {variant!r}; libraries: {', '.join(LIBRARIES)}")
    return layout, lib


def variant_name(layout: str, lib: str) -> str:
    """Inverse of `split_variant`."""
    return layout if lib == "lib_a" else f"{layout}{LIBRARY_SEP}{lib}"


def library_options(variant: str) -> tuple[str, ...]:
    """Option names of the library a registry variant names (what its burn-in can run)."""
    return LIBRARIES[split_variant(variant)[1]]


TARGET_CLASSES = {"onion_dispenser": Terrain.ONION_DISPENSER, "dish_dispenser": Terrain.DISH_DISPENSER,
                  "pot": Terrain.POT, "serving": Terrain.SERVING, "counter": Terrain.COUNTER}

# Item code -> `held` code (none/onion/dish/soup); every code from Item.SOUP up is a soup.
HELD_OF_ITEM = np.array([0, 1, 1, 2] + [3] * (NUM_ITEMS - Item.SOUP), np.int32)
# Initiation checks in the paper's raw_expand order.
REASON_PRIORITY = (Reason.TargetAbsent, Reason.NothingHeld, Reason.NoPath)


@struct.dataclass
class Exec:
    """Per-agent executor state of one env (A agents, F read-set, G transient features)."""

    inst: jax.Array  # int32 [A] instance being executed; -1 = the agent needs a decision
    left: jax.Array  # int32 [A] steps left before timeout
    start: jax.Array  # int32 [A] env step at initiation
    feats: jax.Array  # int8 [A, F] read set at initiation
    trans: jax.Array  # int8 [A, G] transient features at initiation


@struct.dataclass
class StepRecord:
    """What one `option_step` logs per agent: at most one finished execution each."""

    valid: jax.Array  # bool [A] an execution finished (or failed at initiation) this step
    inst: jax.Array  # int32 [A]
    outcome: jax.Array  # int8 [A]
    start: jax.Array  # int32 [A]
    feats: jax.Array  # int8 [A, F]
    trans: jax.Array  # int8 [A, G]
    changed: jax.Array  # bool [A] some effect feature changed across the last step
    contested: jax.Array  # bool [A] another agent INTERACTed with the same target on the last step


class View(struct.PyTreeNode):
    """The state fields the library reads, with pot phases as `tgt_pot_state` codes."""

    pos: jax.Array  # int32 [A, 2] (x, y)
    facing: jax.Array  # int32 [A]
    held: jax.Array  # int32 [A] Item codes
    counter: jax.Array  # int32 [H, W]
    pot_onions: jax.Array  # int32 [P]
    pot_state: jax.Array  # int32 [P] tgt_pot_state code (1 empty .. 5 ready)


def pot_state_code(xp, layout: Layout, onions, tomatoes, tick):
    """int32 [P] tgt_pot_state code of each pot (the env's PotPhase + 1; 0 is `na`)."""
    cook = xp.asarray(layout.soup_cook_time)[onions, tomatoes]
    n = onions + tomatoes
    idle = tick < 0
    ready = ~idle & (tick >= cook)
    phase = xp.where(idle, xp.where(n == 0, 0, xp.where(n < MAX_INGREDIENTS, 1, 2)), xp.where(ready, 4, 3))
    return (phase + 1).astype(xp.int32)


class OvercookedOptions:
    """One candidate library (`LIBRARIES`) instantiated on one static layout (all tables are
    NumPy constants; option indices are those of the union `SCHEMA`)."""

    def __init__(self, layout: str | Layout, patience: int = 8, wait_steps: int = 1, library: str = "lib_a"):
        if library not in LIBRARIES:
            raise ValueError(f"unknown Overcooked option library {library!r}; libraries: {', '.join(LIBRARIES)}")
        self.library = library
        self.layout = load_layout(layout) if isinstance(layout, str) else layout
        if self.layout.has_tomatoes:
            raise ValueError(f"layout {self.layout.name!r} has tomatoes; the option library is onion-only "
                             f"(held/tgt_item have no tomato value)")
        if patience < 0 or wait_steps < 1:
            raise ValueError(f"need patience >= 0 and wait_steps >= 1, got {patience}, {wait_steps}")
        self.patience, self.wait_steps = int(patience), int(wait_steps)
        self.schema = SCHEMA
        lay = self.layout
        floor = lay.grid == Terrain.FLOOR
        padded = np.pad(floor, 1)
        next_to_floor = padded[:-2, 1:-1] | padded[2:, 1:-1] | padded[1:-1, :-2] | padded[1:-1, 2:]
        self.targets_by_class: dict[str, list[tuple[int, int]]] = {}
        for cls, terrain in TARGET_CLASSES.items():
            cells = lay.pot_pos if terrain == Terrain.POT else lay.positions_of(terrain)
            if terrain == Terrain.COUNTER:
                cells = cells[next_to_floor[cells[:, 1], cells[:, 0]]]
            self.targets_by_class[cls] = [(int(x), int(y)) for x, y in cells]
        own = set(LIBRARIES[library])
        self.instances = [i for i in menu_mod.instantiate(SCHEMA, self.targets_by_class)
                          if SCHEMA.options[i.opt].name in own]
        cells = sorted({i.target for i in self.instances if i.target is not None})
        self.plans = plan_tables(lay, np.array(cells, np.int32))
        cell_index = {c: k for k, c in enumerate(cells)}
        self.inst_opt = np.array([i.opt for i in self.instances], np.int32)  # [I]
        self.inst_tgt = np.array([cell_index.get(i.target, -1) for i in self.instances], np.int32)  # [I]
        xy = np.array([i.target if i.target is not None else (NO_TARGET, NO_TARGET) for i in self.instances])
        self.inst_xy = xy.astype(np.int32)  # [I, 2]
        self.inst_pot = np.array([lay.pot_index[y, x] if x >= 0 else -1 for x, y in xy], np.int32)  # [I]
        self.inst_counter = np.array([x >= 0 and lay.grid[y, x] == Terrain.COUNTER for x, y in xy], bool)
        self.inst_wait = self.inst_opt == SCHEMA.option_index("wait")
        allowed = np.zeros((len(SCHEMA.options), len(Reason)), bool)
        for o, spec in enumerate(SCHEMA.options):
            allowed[o, list(spec.reasons)] = True
        self.inst_reasons = allowed[self.inst_opt]  # [I, R]
        self.inst_drop = self.inst_reasons[:, Reason.NothingHeld]  # [I] the drops: need a held item
        self.effects = compile_effects(SCHEMA)

    @property
    def num_instances(self) -> int:
        return len(self.instances)

    @property
    def num_agents(self) -> int:
        return self.layout.num_agents

    # ------------------------------------------------------------------ shared (xp) functions
    def view(self, xp, state) -> View:
        """Library view of an env `State` (jax arrays with xp=jnp, NumPy arrays with xp=np)."""
        return View(pos=state.pos, facing=state.facing, held=state.held, counter=state.counter,
                    pot_onions=state.pot_onions,
                    pot_state=pot_state_code(xp, self.layout, state.pot_onions, state.pot_tomatoes,
                                             state.pot_tick))

    def read_features(self, xp, v: View, agent, inst):
        """int32 [K, F] read set of instances `inst` [K] for agents `agent` [K]."""
        held = xp.asarray(HELD_OF_ITEM)[v.held[agent]]
        pot = xp.asarray(self.inst_pot)[inst]
        tgt_pot = xp.where(pot >= 0, v.pot_state[xp.maximum(pot, 0)], 0)
        xy = xp.maximum(xp.asarray(self.inst_xy)[inst], 0)
        tgt_item = xp.where(xp.asarray(self.inst_counter)[inst],
                            xp.asarray(HELD_OF_ITEM)[v.counter[xy[..., 1], xy[..., 0]]] + 1, 0)
        return xp.stack([held, tgt_pot, tgt_item], axis=-1).astype(xp.int32)

    def effect_features(self, xp, v: View, agent, inst):
        """int32 [K, E] effect features (held, tgt_pot_state, tgt_onions, tgt_item)."""
        read = self.read_features(xp, v, agent, inst)
        pot = xp.asarray(self.inst_pot)[inst]
        onions = xp.where(pot >= 0, v.pot_onions[xp.maximum(pot, 0)], 0)
        return xp.stack([read[..., 0], read[..., 1], onions, read[..., 2]], axis=-1).astype(xp.int32)

    def transient_features(self, xp, v: View, agent):
        """int32 [K, G]: partner_adjacent (another agent on a 4-neighbour cell)."""
        mine = v.pos[agent]  # [K, 2]
        gap = xp.abs(mine[:, None, :] - v.pos[None, :, :]).sum(-1)  # [K, A]
        return (gap == 1).any(-1).astype(xp.int32)[:, None]

    def live_failures(self, xp, v: View, agent, inst):
        """bool [K, R]: would the raw executor fail with each Reason right now (static planner)."""
        tgt = xp.asarray(self.inst_tgt)[inst]
        xy = v.pos[agent]
        reach = xp.asarray(self.plans.reachable)[xp.maximum(tgt, 0), xy[..., 1], xy[..., 0]]
        no_path = (tgt >= 0) & ~reach
        nothing = xp.asarray(self.inst_drop)[inst] & (v.held[agent] == Item.NONE)
        absent = xp.zeros_like(no_path)  # every Overcooked target is static terrain: never absent
        by_reason = {Reason.TargetAbsent: absent, Reason.NoPath: no_path, Reason.NothingHeld: nothing}
        live = xp.stack([by_reason[r] for r in Reason], axis=-1)
        return live & xp.asarray(self.inst_reasons)[inst]

    def first_failure(self, xp, live):
        """int32 [K]: outcome code of the first failing reason (paper order), or -1 if none."""
        code = xp.full(live.shape[:-1], -1, xp.int32)
        for r in reversed(REASON_PRIORITY):
            code = xp.where(live[..., r], EXPLICIT_BASE + int(r), code)
        return code

    def budget(self, xp, v: View, agent, inst):
        """int32 [K] steps allowed: plan length + patience (wait: wait_steps)."""
        tgt = xp.asarray(self.inst_tgt)[inst]
        xy, f = v.pos[agent], v.facing[agent]
        dist = xp.asarray(self.plans.dist)[xp.maximum(tgt, 0), xy[..., 1], xy[..., 0], f]
        return xp.where(xp.asarray(self.inst_wait)[inst], self.wait_steps, dist + self.patience).astype(xp.int32)

    def contested(self, xp, v: View, actions, inst):
        """bool [A]: another agent INTERACTs this step with the target of each agent's instance.

        `actions` int [A] are all agents' actions, `inst` int [A] each agent's instance."""
        faced = v.pos + xp.asarray(DIR_VEC)[v.facing]  # [A, 2] cell each agent acts on
        target = xp.asarray(self.inst_xy)[inst]  # [A, 2]
        hits = (faced[None, :, :] == target[:, None, :]).all(-1) & (actions == Action.INTERACT)[None, :]  # [A, A]
        others = ~xp.eye(len(actions), dtype=bool)
        return (hits & others).any(-1) & (xp.asarray(self.inst_tgt)[inst] >= 0)

    def action(self, xp, v: View, agent, inst, left):
        """(action int32 [K], final bool [K]) of executing agents; other agents block moves."""
        tgt = xp.asarray(self.inst_tgt)[inst]
        xy, f = v.pos[agent], v.facing[agent]
        act = xp.asarray(self.plans.next_action)[xp.maximum(tgt, 0), xy[..., 1], xy[..., 0], f]
        is_wait = xp.asarray(self.inst_wait)[inst]
        act = xp.where(is_wait, int(Action.STAY), act)
        dest = xy + xp.asarray(DIR_VEC)[xp.minimum(act, 3)]  # [K, 2]
        occupied = (dest[:, None, :] == v.pos[None, :, :]).all(-1).any(-1)  # [K]
        act = xp.where((act < Action.STAY) & occupied, int(Action.STAY), act)
        final = (act == Action.INTERACT) | (is_wait & (left <= 1))
        return act.astype(xp.int32), final

    # ------------------------------------------------------------------ JAX executor
    def init_exec(self) -> Exec:
        num_a = self.num_agents
        return Exec(inst=jnp.full(num_a, -1, jnp.int32), left=jnp.zeros(num_a, jnp.int32),
                    start=jnp.zeros(num_a, jnp.int32), feats=jnp.zeros((num_a, len(SCHEMA.read_set)), jnp.int8),
                    trans=jnp.zeros((num_a, len(SCHEMA.transient)), jnp.int8))

    def option_step(self, state: State, ex: Exec, choice, active):
        """One env step of every agent's option executor (one env; jittable, vmap for batches).

        `choice` int32 [A]: the instance each agent picks if it needs a decision (`ex.inst < 0`)
        and is `active` bool [A]; ignored otherwise. Inactive agents stay and never decide.
        Returns (next_state, next_ex, StepRecord, sparse reward by agent float32 [A], shaped
        reward by agent float32 [A]: Overcooked-AI's, from `transition`).
        """
        agents = jnp.arange(self.num_agents)
        v = self.view(jnp, state)
        need = active & (ex.inst < 0)
        fail = self.first_failure(jnp, self.live_failures(jnp, v, agents, choice))  # [A]
        explicit = need & (fail >= 0)
        begin = need & (fail < 0)
        feats = jnp.where(need[:, None], self.read_features(jnp, v, agents, choice).astype(jnp.int8), ex.feats)
        trans = jnp.where(need[:, None], self.transient_features(jnp, v, agents).astype(jnp.int8), ex.trans)
        ex = ex.replace(inst=jnp.where(begin, choice, ex.inst),
                        left=jnp.where(begin, self.budget(jnp, v, agents, choice), ex.left),
                        start=jnp.where(need, state.time, ex.start), feats=feats, trans=trans)
        running = ex.inst >= 0
        inst = jnp.maximum(ex.inst, 0)
        act, final = self.action(jnp, v, agents, inst, ex.left)
        act = jnp.where(running, act, int(Action.STAY))
        final = running & final
        left = ex.left - running
        timeout = running & ~final & (left <= 0)
        pre = self.effect_features(jnp, v, agents, inst)
        next_state, sparse, shaped = transition(self.layout, state, act)[:3]
        post = self.effect_features(jnp, self.view(jnp, next_state), agents, inst)
        ok = effect_holds_jax(self.effects, jnp.asarray(self.inst_opt)[inst], pre, post)
        done = final | timeout
        outcome = jnp.where(explicit, fail, jnp.where(final & ok, SUCCESS, EFFECT_FAIL)).astype(jnp.int8)
        record = StepRecord(valid=explicit | done, inst=jnp.where(explicit, choice, ex.inst), outcome=outcome,
                            start=ex.start, feats=ex.feats, trans=ex.trans,
                            changed=done & jnp.any(pre != post, axis=-1),
                            contested=done & self.contested(jnp, v, act, inst))
        ex = ex.replace(inst=jnp.where(done, -1, ex.inst), left=left)
        return next_state, ex, record, sparse, shaped

    def hidden_mask(self, table: menu_mod.GuardTable, state: State):
        """bool [A, I]: instances hidden from each agent by the guards (one env; jittable)."""
        v = self.view(jnp, state)
        num_a, num_i = self.num_agents, self.num_instances
        agent = jnp.repeat(jnp.arange(num_a), num_i)  # [A*I]
        inst = jnp.tile(jnp.arange(num_i), num_a)  # [A*I]
        feats = self.read_features(jnp, v, agent, inst).reshape(num_a, num_i, -1)
        live = self.live_failures(jnp, v, agent, inst).reshape(num_a, num_i, -1)
        return menu_mod.hidden_mask_jax(table, jnp.asarray(self.inst_opt), feats, live)

    def hidden_mask_batch(self, table: menu_mod.GuardTable, states: State):
        """bool [E, A, I] for a batch of states with a leading env axis (jit this)."""
        return jax.vmap(self.hidden_mask, in_axes=(None, 0))(table, states)

    # ------------------------------------------------------------------ Python menu
    def menu(self, state, agent: int, guards: list[Guard], rng: np.random.Generator) -> list[menu_mod.MenuItem]:
        """The lettered menu `agent` sees in `state` (guards evaluated by the Python evaluator)."""
        if not 0 <= agent < self.num_agents:
            raise ValueError(f"agent must be in [0, {self.num_agents}), got {agent}")
        state = jax.tree.map(np.asarray, state)
        v = self.view(np, state)
        inst = np.arange(self.num_instances)
        agents = np.full(self.num_instances, agent)
        feats = self.read_features(np, v, agents, inst)
        live = self.live_failures(np, v, agents, inst)
        return menu_mod.assemble_menu(SCHEMA, guards, self.instances, feats, live, rng)

    def label(self, index: int) -> str:
        return menu_mod.label(SCHEMA, self.instances[index])


def library(layout: str, lib: str = "lib_a") -> OvercookedOptions:
    """Library `lib` on `layout` (one shared object per pair); `layout` may also be a registry
    variant (`<layout>@lib_b`)."""
    if LIBRARY_SEP in layout:
        layout, lib = split_variant(layout)
    return _library(layout, lib)


@functools.lru_cache(maxsize=None)
def _library(layout: str, lib: str) -> OvercookedOptions:
    return OvercookedOptions(layout, library=lib)


# ---------------------------------------------------------------------- burn-in (JAX)
@functools.partial(jax.jit, static_argnums=(0, 1, 2))
def _burnin_batch(lib: OvercookedOptions, num_envs: int, horizon: int, key, active):
    """Records [E, T, A] of `num_envs` episodes; `active` bool [E, A] marks acting agents."""
    num_a, num_i = lib.num_agents, lib.num_instances
    choices = jax.random.randint(key, (num_envs, horizon, num_a), 0, num_i)  # [E, T, A]

    def episode(choice_seq, act):  # [T, A], [A]
        def body(carry, choice):
            state, ex = carry
            state, ex, rec, _, _ = lib.option_step(state, ex, choice, act)
            return (state, ex), rec

        carry = (initial_state(lib.layout), lib.init_exec())
        return jax.lax.scan(body, carry, choice_seq)[1]

    return jax.vmap(episode)(choices, active)


def records_to_table(lib: OvercookedOptions, rec, ep_offset: int, solo: bool, keep_envs: int) -> RecordTable:
    """Burn-in records of `StepRecord`s stacked [E, T, A] (first `keep_envs` envs; env e is episode
    ep_offset + e)."""
    rec = jax.tree.map(lambda x: np.asarray(x)[:keep_envs], rec)  # [E, T, A, ...]
    flat = np.flatnonzero(rec.valid)  # row-major over [E, T, A]: by episode, then step, then agent
    e, _, a = np.unravel_index(flat, rec.valid.shape)

    def take(x):
        return x.reshape(-1, *x.shape[3:])[flat]

    inst = take(rec.inst)
    return RecordTable.build(
        ep=ep_offset + e, step=take(rec.start), aid=a, opt=lib.inst_opt[inst], target=lib.inst_xy[inst],
        features=take(rec.feats), transient=take(rec.trans), outcome=take(rec.outcome),
        solo=np.full(len(inst), solo), changed=take(rec.changed), contested=take(rec.contested))


def solo_active(num_envs: int, num_agents: int, ep_offset: int = 0) -> np.ndarray:
    """bool [E, A]: in solo episode e only agent (e mod A) acts; the others stand still."""
    return (np.arange(ep_offset, ep_offset + num_envs)[:, None] % num_agents) == np.arange(num_agents)[None, :]


def burnin(variant: str, solo_episodes: int, team_episodes: int, seed: int, progress: bool = True,
           horizon: int = HORIZON, batch: int = 1000) -> RecordTable:
    """Stage-2 burn-in with the jitted, vmapped executor (see `GameLibrary.burnin`)."""
    if solo_episodes < 0 or team_episodes < 0:
        raise ValueError(f"episode counts must be >= 0, got {solo_episodes}, {team_episodes}")
    lib = library(variant)
    key = jax.random.PRNGKey(seed)
    tables = []
    jobs = []
    for solo, count, offset in ((True, solo_episodes, 0), (False, team_episodes, solo_episodes)):
        for start in range(0, count, batch):
            # A short last batch is padded to the full batch size, so one compiled shape serves.
            jobs.append((solo, offset + start, min(batch, count - start), min(batch, count)))
    # Dispatch every batch before reading any back: the host-side record conversion of one batch
    # then overlaps the device work of the next (JAX dispatch is asynchronous).
    pending = []
    for solo, ep0, n, size in jobs:
        active = (solo_active(size, lib.num_agents, ep0) if solo
                  else np.ones((size, lib.num_agents), bool))
        pending.append((_burnin_batch(lib, size, horizon, jax.random.fold_in(key, ep0), jnp.asarray(active)),
                        ep0, solo, n))
    for rec, ep0, solo, n in tqdm(pending, desc=f"burn-in {variant}", unit="batch", disable=not progress):
        tables.append(records_to_table(lib, rec, ep0, solo, n))
    if not tables:
        return RecordTable.empty(len(SCHEMA.read_set), len(SCHEMA.transient))
    return RecordTable.concat(tables)


def burnin_choices(seed: int, ep0: int, num_envs: int, horizon: int, lib: OvercookedOptions) -> np.ndarray:
    """int32 [E, T, A]: the option choices `burnin` draws for the batch starting at episode ep0."""
    key = jax.random.fold_in(jax.random.PRNGKey(seed), ep0)
    return np.asarray(jax.random.randint(key, (num_envs, horizon, lib.num_agents), 0, lib.num_instances))


# ---------------------------------------------------------------------- burn-in (plain Python)
def burnin_python(variant: str, episodes: list[tuple[int, bool]], choices: np.ndarray,
                  horizon: int = HORIZON, progress: bool = False) -> RecordTable:
    """The same library run per env in plain Python on the reference simulator `overcooked_ai_py`.

    `episodes`: (episode index, solo) per env; `choices` int [E, T, A] the option choices (drawn
    by the caller, e.g. `burnin_choices`, or any RNG). Library logic runs in NumPy per env and
    step; the env step is `OvercookedGridworld.get_state_transition`.
    """
    lib = library(variant)
    mdp = make_mdp(lib.layout)  # also makes overcooked_ai_py importable (see reference.py)
    joint = importlib.import_module("overcooked_ai_py.mdp.actions").Action.ALL_ACTIONS
    num_a = lib.num_agents
    agents = np.arange(num_a)
    cols = {k: [] for k in ("ep", "step", "aid", "opt", "target", "features", "transient", "outcome",
                            "solo", "changed", "contested")}
    start_state = jax.tree.map(np.asarray, initial_state(lib.layout))
    for e, (ep, solo) in enumerate(tqdm(episodes, desc="python burn-in", disable=not progress)):
        active = solo_active(1, num_a, ep)[0] if solo else np.ones(num_a, bool)
        oa_state = to_overcooked_ai(lib.layout, start_state)
        state = start_state
        inst = np.full(num_a, -1)
        left = np.zeros(num_a, np.int64)
        start = np.zeros(num_a, np.int64)
        feats = np.zeros((num_a, len(SCHEMA.read_set)), np.int64)
        trans = np.zeros((num_a, len(SCHEMA.transient)), np.int64)
        for t in range(horizon):
            v = lib.view(np, state)
            choice = choices[e, t]
            actions = np.full(num_a, int(Action.STAY))
            finals = np.zeros(num_a, bool)
            for a in range(num_a):
                if not active[a] or inst[a] >= 0:
                    continue
                aa, ca = agents[a:a + 1], choice[a:a + 1]
                fail = int(lib.first_failure(np, lib.live_failures(np, v, aa, ca))[0])
                feats[a] = lib.read_features(np, v, aa, ca)[0]
                trans[a] = lib.transient_features(np, v, aa)[0]
                start[a] = t
                if fail >= 0:
                    _append(cols, lib, ep, t, a, int(choice[a]), feats[a], trans[a], fail, solo, False, False)
                else:
                    inst[a] = choice[a]
                    left[a] = lib.budget(np, v, aa, ca)[0]
            running = inst >= 0
            pre = {}
            for a in np.nonzero(running)[0]:
                act, fin = lib.action(np, v, agents[a:a + 1], inst[a:a + 1], left[a:a + 1])
                actions[a], finals[a] = act[0], fin[0]
                pre[a] = lib.effect_features(np, v, agents[a:a + 1], inst[a:a + 1])[0]
            contested = lib.contested(np, v, actions, np.maximum(inst, 0))
            oa_state = mdp.get_state_transition(oa_state, tuple(joint[x] for x in actions))[0]
            state = from_overcooked_ai(lib.layout, oa_state)
            v_next = lib.view(np, state)
            for a in np.nonzero(running)[0]:
                left[a] -= 1
                if not finals[a] and left[a] > 0:
                    continue
                post = lib.effect_features(np, v_next, agents[a:a + 1], inst[a:a + 1])[0]
                ok = finals[a] and effect_holds(SCHEMA, int(lib.inst_opt[inst[a]]), pre[a], post)
                _append(cols, lib, ep, int(start[a]), a, int(inst[a]), feats[a], trans[a],
                        SUCCESS if ok else EFFECT_FAIL, solo, bool(np.any(pre[a] != post)), bool(contested[a]))
                inst[a] = -1
    if not cols["ep"]:
        return RecordTable.empty(len(SCHEMA.read_set), len(SCHEMA.transient))
    return RecordTable.build(**cols)


def _append(cols, lib, ep, step, aid, inst, feats, trans, outcome, solo, changed, contested):
    cols["ep"].append(ep)
    cols["step"].append(step)
    cols["aid"].append(aid)
    cols["opt"].append(lib.inst_opt[inst])
    cols["target"].append(lib.inst_xy[inst])
    cols["features"].append(np.array(feats))
    cols["transient"].append(np.array(trans))
    cols["outcome"].append(outcome)
    cols["solo"].append(solo)
    cols["changed"].append(changed)
    cols["contested"].append(contested)


# ---------------------------------------------------------------------- menus
def start_menu(variant: str, seed: int, agent: int, guards: list[Guard]) -> list[menu_mod.MenuItem]:
    """The menu `agent` sees at the layout's start state; letters from `episode_rng(seed, agent)`."""
    lib = library(variant)
    return lib.menu(initial_state(lib.layout), agent, guards, menu_mod.episode_rng(seed, agent))

