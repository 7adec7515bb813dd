"""JAX-native Overcooked with the dynamics of `overcooked_ai_py` 1.1.0 `OvercookedGridworld`.

One step follows `OvercookedGridworld.get_state_transition` exactly:
1. INTERACTs resolve one agent after the other in agent order, each seeing the state the previous
   one left (agent 0 can drop an onion on a counter that agent 1 picks up in the same step).
2. Movement: each moving agent turns to its action's direction even when blocked; it moves only
   onto floor. If any two agents would end on one cell or swap cells, every agent stays put
   (orientations still change).
3. Time advances by one and every cooking pot ticks once (so a pot started this step shows tick 1).

Pots take up to `MAX_INGREDIENTS` ingredients while idle; an INTERACT with empty hands on an idle
non-empty pot starts cooking; a dish takes a ready soup; delivering a soup on a serving cell scores
the layout's value for that recipe (0 for a recipe not in the layout's orders, so on the classic
layouts only the 3-onion soup scores, 20). The team reward is the sum over agents, given to all.
"""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from omjax.envs.packages import bare_package

# Only jaxmarl's base class and spaces are needed. Its package `__init__`s import every bundled
# environment (about 10 s, brax included), print "Submoduled environments not found" on every
# command, and point sys.stdout/stderr back at the process streams (silencing pytest capture and
# notebook cells); bare parent packages skip all of that.
bare_package("jaxmarl", "pip install jaxmarl==0.2.0")
bare_package("jaxmarl.environments", "pip install jaxmarl==0.2.0")
from jaxmarl.environments import spaces  # noqa: E402
from jaxmarl.environments.multi_agent_env import MultiAgentEnv  # noqa: E402

from omjax.envs.overcooked.items import (
    DIR_VEC,
    NUM_ACTIONS,
    NUM_ITEMS,
    Action,
    Item,
    PotPhase,
    is_soup,
    soup_onions,
    soup_tomatoes,
)
from omjax.envs.overcooked.layout import MAX_INGREDIENTS, Layout, Terrain, load_layout

# OvercookedGridworld BASE_REW_SHAPING_PARAMS (every shipped layout leaves rew_shaping_params None).
PLACEMENT_IN_POT_REW = 3
DISH_PICKUP_REWARD = 3
SOUP_PICKUP_REWARD = 5

# Pot tick of an idle pot (overcooked_ai_py SoupState cooking_tick -1 = not started).
POT_IDLE = -1

# Per-agent events reported in `infos["events"]`, a subset of overcooked_ai_py EVENT_TYPES with the
# same meaning, plus `cook_start` (an INTERACT that started a pot cooking).
EVENTS = ("onion_pickup", "tomato_pickup", "dish_pickup", "soup_pickup", "onion_drop", "tomato_drop",
          "dish_drop", "soup_drop", "potting_onion", "potting_tomato", "cook_start", "soup_delivery")

# Observation channels, see `Overcooked.get_obs`.
OBS_CHANNELS = ("terrain", "counter_item", "pot_onions", "pot_tomatoes", "pot_tick_plus_1",
                "self_facing_plus_1", "self_held", "others_facing_plus_1", "others_held")


@struct.dataclass
class State:
    """Dynamic state of one Overcooked game (A agents, P pots, an H x W grid)."""

    pos: jax.Array  # int32 [A, 2] (x, y)
    facing: jax.Array  # int32 [A] Direction index (N, S, E, W)
    held: jax.Array  # int32 [A] Item code
    counter: jax.Array  # int32 [H, W] Item code on each counter cell, Item.NONE elsewhere
    pot_onions: jax.Array  # int32 [P]
    pot_tomatoes: jax.Array  # int32 [P]
    pot_tick: jax.Array  # int32 [P] ticks cooked; POT_IDLE (-1) until cooking starts
    time: jax.Array  # int32 [] steps taken (overcooked_ai_py timestep)


def pot_cook_time(layout: Layout, state: State) -> jax.Array:
    """int32 [P]: cook time of the soup in each pot (that of its current ingredients)."""
    table = jnp.asarray(layout.soup_cook_time)  # [4, 4]
    return table[state.pot_onions, state.pot_tomatoes]


def pot_phase(layout: Layout, state: State) -> jax.Array:
    """int32 [P]: the `PotPhase` of every pot. Accepts a `Layout` or an `Overcooked` env."""
    layout = getattr(layout, "layout", layout)
    ingredients = state.pot_onions + state.pot_tomatoes  # [P]
    idle = state.pot_tick < 0
    ready = ~idle & (state.pot_tick >= pot_cook_time(layout, state))
    # Nested selects rather than `jnp.select` (an argmax reduction, slow vmapped on the CPU).
    return jnp.where(idle, jnp.where(ingredients == 0, PotPhase.EMPTY,
                                     jnp.where(ingredients < MAX_INGREDIENTS, PotPhase.FILLING, PotPhase.FULL)),
                     jnp.where(ready, PotPhase.READY, PotPhase.COOKING)).astype(jnp.int32)


def initial_state(layout: Layout) -> State:
    """The layout's standard start state (overcooked_ai_py `get_standard_start_state`)."""
    return State(
        pos=jnp.asarray(layout.start_pos), facing=jnp.asarray(layout.start_facing),
        held=jnp.asarray(layout.start_held), counter=jnp.asarray(layout.start_counter),
        pot_onions=jnp.asarray(layout.start_pot_onions),
        pot_tomatoes=jnp.asarray(layout.start_pot_tomatoes),
        pot_tick=jnp.asarray(layout.start_pot_tick), time=jnp.zeros((), jnp.int32))


# Bit layout of the per-(cell, facing) lookup `_Tables.facing`: which cell an agent faces, the
# terrain there and the pot there (index + 1, 0 for none), packed so that one gather reads all three.
_CELL_BITS = 16
_TERRAIN_BITS = 4
# Bit layout of a pot inside `_resolve_interacts` (see there).
_INGREDIENT_MASK = 15
_READY_BIT = 4
_TICK_SHIFT = 5


class _Tables:
    """Static lookup tables of a layout for the step, built once per layout with NumPy.

    Vmapped over thousands of envs, every gather costs about as much as a dozen elementwise ops,
    so the step reads what it needs about a cell with as few gathers as possible.
    """

    def __init__(self, layout: Layout):
        height, width = layout.height, layout.width
        cells = np.arange(height * width)
        x, y = cells % width, cells // width
        # [H*W, 4]: the faced cell, clipped into the grid (only floor cells are ever looked up,
        # and a floor cell's neighbours are inside the grid since borders are never floor).
        fx = np.clip(x[:, None] + DIR_VEC[None, :, 0], 0, width - 1)
        fy = np.clip(y[:, None] + DIR_VEC[None, :, 1], 0, height - 1)
        faced = fy * width + fx
        if faced.max() >= 1 << _CELL_BITS or layout.num_pots + 1 >= 1 << (31 - _CELL_BITS - _TERRAIN_BITS):
            raise ValueError(f"layout {layout.name!r} is too large for the packed step tables")
        self.facing = (faced | (layout.grid.reshape(-1)[faced] << _CELL_BITS)
                       | ((layout.pot_index.reshape(-1)[faced] + 1) << (_CELL_BITS + _TERRAIN_BITS))
                       ).reshape(-1).astype(np.int32)  # [H*W * 4]
        walkable = layout.grid.reshape(-1)[faced] == Terrain.FLOOR  # [H*W, 4]
        stay = np.repeat(cells[:, None], NUM_ACTIONS - len(DIR_VEC), axis=1)  # STAY, INTERACT
        self.move = np.concatenate([np.where(walkable, faced, cells[:, None]), stay],
                                   axis=1).reshape(-1).astype(np.int32)  # [H*W * NUM_ACTIONS]
        value = np.zeros(NUM_ITEMS, np.float32)
        for item in range(Item.SOUP + 1, NUM_ITEMS):
            onions, tomatoes = soup_onions(item), soup_tomatoes(item)
            if onions + tomatoes <= MAX_INGREDIENTS:
                value[item] = layout.soup_value[onions, tomatoes]
        self.value_of_item = value  # [NUM_ITEMS] delivery reward of a held soup, 0 otherwise
        self.cook_time = layout.soup_cook_time.reshape(-1)  # [(MAX+1)^2]
        onions, tomatoes = np.meshgrid(np.arange(MAX_INGREDIENTS + 1), np.arange(MAX_INGREDIENTS + 1),
                                       indexing="ij")
        recipes = (onions + tomatoes >= 1) & (onions + tomatoes <= MAX_INGREDIENTS)
        if (layout.soup_cook_time[recipes] < 1).any():
            # The step reads readiness once per step, which is exact only for positive cook times.
            raise ValueError(f"layout {layout.name!r}: cook times must be >= 1, got\n{layout.soup_cook_time}")
        # One cook time for every recipe (as on the classic layouts): no lookup then. A started pot
        # always holds a recipe (1..MAX ingredients); only the [0, 0] entry can differ.
        times = np.unique(layout.soup_cook_time[recipes])
        self.uniform_cook_time = int(times[0]) if len(times) == 1 else None
        # Delivery rewards as (item, value) pairs when few items score: compares instead of a gather.
        scoring = np.flatnonzero(value)
        self.value_pairs = [(int(i), float(value[i])) for i in scoring] if len(scoring) <= 4 else None


_TABLES: dict[int, tuple[Layout, _Tables]] = {}


def _tables(layout: Layout) -> _Tables:
    # Keyed by id and holding the layout, so the id cannot be reused while the entry lives.
    entry = _TABLES.get(id(layout))
    if entry is None or entry[0] is not layout:
        entry = _TABLES[id(layout)] = (layout, _Tables(layout))
    return entry[1]


def _cook_time_of(layout: Layout, onions: jax.Array, tomatoes: jax.Array) -> jax.Array:
    """int32: the layout's `soup_cook_time[onions, tomatoes]`."""
    tables = _tables(layout)
    if tables.uniform_cook_time is None:
        return jnp.asarray(tables.cook_time)[onions * (MAX_INGREDIENTS + 1) + tomatoes]
    uniform = jnp.full(jnp.shape(onions), tables.uniform_cook_time, jnp.int32)
    if tables.cook_time[0] == tables.uniform_cook_time:
        return uniform
    return jnp.where((onions | tomatoes) == 0, jnp.int32(tables.cook_time[0]), uniform)


def _delivery_value(tables: _Tables, item: jax.Array) -> jax.Array:
    """float32: the reward for delivering `item` (0 for an item that does not score)."""
    if tables.value_pairs is None:
        return jnp.asarray(tables.value_of_item)[item]
    value = jnp.zeros(jnp.shape(item), jnp.float32)
    for code, score in tables.value_pairs:
        value = jnp.where(item == code, jnp.float32(score), value)
    return value


def _resolve_interacts(layout: Layout, state: State, actions: jax.Array):
    """Apply every agent's INTERACT in agent order. Returns (state, sparse [A], shaped [A], events).

    What an agent faces, holds and asks for does not depend on the other agents' interacts, so it
    is computed for all agents at once; only counter and pot contents, which an earlier agent may
    have changed, are read and written one agent after the other.
    """
    tables = _tables(layout)
    height, width = layout.height, layout.width
    num_agents = layout.num_agents

    # [A] each: the faced cell, its terrain and pot, and what the agent holds.
    cell_here = state.pos[:, 1] * width + state.pos[:, 0]
    faced = jnp.asarray(tables.facing)[cell_here * len(DIR_VEC) + state.facing]
    cell = faced & ((1 << _CELL_BITS) - 1)
    terrain = (faced >> _CELL_BITS) & ((1 << _TERRAIN_BITS) - 1)
    pot = (faced >> (_CELL_BITS + _TERRAIN_BITS)) - 1  # -1 when the faced cell is no pot
    interact = actions == Action.INTERACT
    hand = state.held
    empty_hand = hand == Item.NONE
    at_counter = interact & (terrain == Terrain.COUNTER)
    at_pot = interact & (terrain == Terrain.POT)
    take_onion = interact & (terrain == Terrain.ONION_DISPENSER) & empty_hand
    take_tomato = interact & (terrain == Terrain.TOMATO_DISPENSER) & empty_hand
    take_dish = interact & (terrain == Terrain.DISH_DISPENSER) & empty_hand
    deliver = interact & (terrain == Terrain.SERVING) & is_soup(hand)
    sparse = jnp.where(deliver, _delivery_value(tables, hand), 0.0)  # [A]
    wants_cook = at_pot & empty_hand
    wants_plate = at_pot & (hand == Item.DISH)
    wants_add = at_pot & ((hand == Item.ONION) | (hand == Item.TOMATO))
    # The pot each agent faces, 0 when none: then the agent cannot act on it (`at_pot` is False),
    # so it reads some pot and writes the same code back.
    slot = jnp.maximum(pot, 0)  # [A]

    counter = state.counter.reshape(-1)  # [H*W]
    # Each pot as one int32 for the sequential part, so that an agent reads and writes its pot as
    # one entry: bits 0-3 hold the ingredients as in a soup's item
    # code (onions + 4 * tomatoes), bit 4 is set while the soup is ready, bits 5+ hold tick + 1
    # (0 = idle). Readiness is fixed for the step except by plating, which empties the pot: a pot
    # started now has tick 0, below any cook time (>= 1).
    ingredients = state.pot_onions + (MAX_INGREDIENTS + 1) * state.pot_tomatoes  # [P]
    ready = (state.pot_tick >= 0) & (state.pot_tick >= _cook_time_of(layout, state.pot_onions,
                                                                      state.pot_tomatoes))
    pot_code = ingredients | (ready.astype(jnp.int32) << _READY_BIT) | ((state.pot_tick + 1) << _TICK_SHIFT)
    if layout.num_pots == 0:
        pot_code = jnp.zeros(1, jnp.int32)  # a stand-in no agent can act on
    is_onion = hand == Item.ONION
    on_counter, drop, pick, start_cook, plate, add, soup = ([] for _ in range(7))
    for i in range(num_agents):
        seen = counter[cell[i]]
        drop_i = at_counter[i] & ~empty_hand[i] & (seen == Item.NONE)
        pick_i = at_counter[i] & empty_hand[i] & (seen != Item.NONE)
        # A one-cell update: vmapped, XLA turns it into a scatter of one entry per env, far
        # cheaper than selecting over every cell of every env.
        counter = counter.at[cell[i]].set(jnp.where(drop_i, hand[i], jnp.where(pick_i, Item.NONE, seen)),
                                          indices_are_sorted=True, unique_indices=True,
                                          mode="promise_in_bounds")
        # Read and written with a one-entry gather and scatter: vmapped, the scatter also makes XLA
        # materialize the pots once instead of fusing this whole chain into every pot output.
        code = pot_code.at[slot[i]].get(mode="promise_in_bounds")
        contents = code & _INGREDIENT_MASK
        count = (contents & MAX_INGREDIENTS) + (contents >> 2)
        idle = code < (1 << _TICK_SHIFT)
        start_i = wants_cook[i] & idle & (count > 0)
        plate_i = wants_plate[i] & ((code >> _READY_BIT) & 1).astype(bool)
        add_i = wants_add[i] & idle & (count < MAX_INGREDIENTS)
        new_code = jnp.where(plate_i, 0, jnp.where(start_i, contents | (1 << _TICK_SHIFT),
                                                   code + add_i * jnp.where(is_onion[i], 1, MAX_INGREDIENTS + 1)))
        pot_code = pot_code.at[slot[i]].set(new_code, indices_are_sorted=True, unique_indices=True,
                                            mode="promise_in_bounds")
        for acc, value in zip((on_counter, drop, pick, start_cook, plate, add, soup),
                              (seen, drop_i, pick_i, start_i, plate_i, add_i, Item.SOUP + contents)):
            acc.append(value)
    on_counter, drop, pick, start_cook, plate, add, soup = (
        jnp.stack(acc) for acc in (on_counter, drop, pick, start_cook, plate, add, soup))  # [A] each
    pot_code = pot_code[:layout.num_pots]
    onions = pot_code & MAX_INGREDIENTS
    tomatoes = (pot_code & _INGREDIENT_MASK) >> 2
    tick = (pot_code >> _TICK_SHIFT) - 1

    # Nested selects, first condition outermost (as `jnp.select`, which would lower to an argmax
    # reduction over the stacked conditions, several times slower vmapped on the CPU).
    held = hand
    for cond, value in reversed(((drop | deliver | add, Item.NONE), (pick, on_counter), (take_onion, Item.ONION),
                                 (take_tomato, Item.TOMATO), (take_dish, Item.DISH), (plate, soup))):
        held = jnp.where(cond, value, held)
    start = state
    state = state.replace(held=held.astype(jnp.int32), counter=counter.reshape(height, width),
                          pot_onions=onions, pot_tomatoes=tomatoes, pot_tick=tick)
    picked = jnp.where(pick, on_counter, Item.NONE)  # [A]
    dropped = jnp.where(drop, hand, Item.NONE)  # [A]
    events = {
        "onion_pickup": take_onion | (picked == Item.ONION),
        # overcooked_ai_py logs no event for taking a tomato from its dispenser.
        "tomato_pickup": picked == Item.TOMATO,
        "dish_pickup": take_dish | (picked == Item.DISH),
        "soup_pickup": plate | is_soup(picked),
        "onion_drop": dropped == Item.ONION,
        "tomato_drop": dropped == Item.TOMATO,
        "dish_drop": dropped == Item.DISH,
        "soup_drop": is_soup(dropped),
        "potting_onion": add & (hand == Item.ONION),
        "potting_tomato": add & (hand == Item.TOMATO),
        "cook_start": start_cook,
        "soup_delivery": deliver,
    }
    shaped = (PLACEMENT_IN_POT_REW * add + SOUP_PICKUP_REWARD * plate
              + DISH_PICKUP_REWARD * (take_dish & _dish_pickup_useful(layout, start, hand, held, dropped, picked)))
    return state, sparse.astype(jnp.float32), shaped.astype(jnp.float32), events


def _dish_pickup_useful(layout: Layout, start: State, hand, held, dropped, picked) -> jax.Array:
    """bool [A]: overcooked_ai_py `is_dish_pickup_useful` as each agent's interact sees it.

    Useful when no dish lies on a counter and fewer dishes are held than pots are non-empty
    (filling, cooking or ready) at the start of the step; dishes on counters and in hands are
    counted after the interacts of the agents before. overcooked_ai_py defines it for exactly two
    players and says False otherwise. `start` is the state before the interacts; `hand` the items
    held then, `held` after, `dropped` / `picked` the items each agent put on / took from a counter.
    """
    num_agents = layout.num_agents
    if num_agents != 2:
        return jnp.zeros(num_agents, bool)
    phase = pot_phase(layout, start)  # [P]
    non_empty_pots = jnp.sum((phase == PotPhase.FILLING) | (phase == PotPhase.COOKING)
                             | (phase == PotPhase.READY))
    before = jnp.tril(jnp.ones((num_agents, num_agents), bool), k=-1)  # [i, j]: j acts before i
    # Net dishes each agent put on a counter (+1 dropped, -1 picked up). Masked with a select: a
    # bitwise `before & -1` would give +1, counting a dish taken off a counter as one put there.
    counter_delta = (dropped == Item.DISH).astype(jnp.int32) - (picked == Item.DISH).astype(jnp.int32)  # [A]
    dishes_on_counters = jnp.sum(start.counter == Item.DISH) + jnp.sum(
        jnp.where(before, counter_delta[None, :], 0), axis=1)  # [A]
    dishes_held = jnp.sum(jnp.where(before, held[None, :] == Item.DISH, hand[None, :] == Item.DISH), axis=1)
    return (dishes_on_counters == 0) & (dishes_held < non_empty_pots)


def _resolve_movement(layout: Layout, state: State, actions: jax.Array) -> State:
    """Move and turn every agent; any same-cell or swap conflict keeps all agents in place."""
    width = layout.width
    moving = actions < Action.STAY  # [A]; move actions equal their Direction index
    cell = state.pos[:, 1] * width + state.pos[:, 0]  # [A]
    new_cell = jnp.asarray(_tables(layout).move)[cell * NUM_ACTIONS + actions]  # [A]
    new_pos = jnp.stack([new_cell % width, new_cell // width], axis=-1)  # [A, 2]
    old = state.pos
    same_new = jnp.all(new_pos[:, None, :] == new_pos[None, :, :], axis=-1)  # [A, A]
    crossed = (jnp.all(new_pos[:, None, :] == old[None, :, :], axis=-1)
               & jnp.all(old[:, None, :] == new_pos[None, :, :], axis=-1))  # [A, A]
    off_diagonal = ~jnp.eye(layout.num_agents, dtype=bool)
    collision = jnp.any((same_new | crossed) & off_diagonal)
    return state.replace(pos=jnp.where(collision, old, new_pos),
                         facing=jnp.where(moving, actions, state.facing).astype(jnp.int32))


def _environment_effects(layout: Layout, state: State) -> State:
    """Advance time; every cooking (started, not yet ready) pot cooks one tick."""
    cooking = (state.pot_tick >= 0) & (state.pot_tick < _cook_time_of(layout, state.pot_onions,
                                                                         state.pot_tomatoes))
    return state.replace(time=state.time + 1, pot_tick=state.pot_tick + cooking)


def transition(layout: Layout, state: State, actions: jax.Array):
    """One pure `OvercookedGridworld.get_state_transition` on int32 actions [A].

    Returns (next_state, sparse_reward_by_agent float32 [A], shaped_reward_by_agent float32 [A],
    events: dict of bool [A]).
    """
    actions = jnp.asarray(actions, jnp.int32)
    state, sparse, shaped, events = _resolve_interacts(layout, state, actions)
    state = _resolve_movement(layout, state, actions)
    return _environment_effects(layout, state), sparse, shaped, events


def random_actions(key: jax.Array, shape: tuple[int, ...]) -> jax.Array:
    """int32 actions uniform over `NUM_ACTIONS`, of any shape (e.g. `[T, B, A]`).

    Multiply-shift of 32 random bits (Lemire), computed exactly in 32-bit halves: the bias is below
    NUM_ACTIONS / 2**32, and it needs one random word per action where `jax.random.randint` needs
    two, which roughly halves the cost of random-policy rollouts on the CPU.
    """
    bits = jax.random.bits(key, shape, jnp.uint32)
    high = (bits >> 16) * NUM_ACTIONS + (((bits & 0xFFFF) * NUM_ACTIONS) >> 16)
    return (high >> 16).astype(jnp.int32)


class Overcooked(MultiAgentEnv):
    """Overcooked-AI (`overcooked_ai_py` 1.1.0) as a JaxMARL `MultiAgentEnv`.

    Args:
        layout: name of any layout shipped with overcooked_ai_py (`list_layouts()`).
        horizon: episode length; `dones["__all__"]` once `state.time >= horizon` (as
            `OvercookedEnv.is_done`).
        random_start: when True, `reset` places the agents on distinct floor cells drawn uniformly,
            facing north, instead of the layout's start positions.

    Actions are ints in `Action` order (N, S, E, W, STAY, INTERACT), given per agent in a dict
    (`{"agent_0": a0, ...}`) or as one int array `[A]`. Rewards: every agent receives the team's
    sparse reward. `infos` holds `sparse_reward_by_agent` and `shaped_reward_by_agent` (float32
    `[A]`, overcooked_ai_py's shaping) and `events` (dict of bool `[A]`, see `EVENTS`).

    Observation per agent: int32 `[H, W, C]` with channels `OBS_CHANNELS`: terrain code, item on
    each counter, pot onions / tomatoes / (tick + 1) on pot cells, the agent's own (facing + 1) and
    held item at its cell, the other agents' (facing + 1) and held items at theirs. It is lossless
    for the layout's state apart from `time`.
    """

    def __init__(self, layout: str = "cramped_room", horizon: int = 400, random_start: bool = False):
        if not isinstance(horizon, (int, np.integer)) or isinstance(horizon, bool) or horizon < 1:
            raise ValueError(f"horizon must be a positive int, got {horizon!r}")
        self.layout = load_layout(layout)
        self.horizon = int(horizon)
        self.random_start = bool(random_start)
        super().__init__(num_agents=self.layout.num_agents)
        shape = (self.layout.height, self.layout.width, len(OBS_CHANNELS))
        high = max(NUM_ITEMS, int(self.layout.soup_cook_time.max()) + 2, len(Terrain))
        self.observation_spaces = {a: spaces.Box(0, high, shape, jnp.int32) for a in self.agents}
        self.action_spaces = {a: spaces.Discrete(NUM_ACTIONS) for a in self.agents}

    @property
    def name(self) -> str:
        return f"Overcooked-{self.layout.name}"

    @property
    def agent_classes(self) -> dict:
        return {"chef": list(self.agents)}

    # ---- Python boundary -------------------------------------------------------------------

    def actions_to_array(self, actions) -> jax.Array:
        """int32 [A] from a dict keyed by agent name or an array; checks concrete values."""
        if isinstance(actions, dict):
            missing = [a for a in self.agents if a not in actions]
            extra = [a for a in actions if a not in self.agents]
            if missing or extra:
                raise ValueError(f"actions must be keyed by exactly {self.agents}; "
                                 f"missing {missing}, unexpected {extra}")
            actions = jnp.stack([jnp.asarray(actions[a]).astype(jnp.int32) for a in self.agents], axis=-1)
        else:
            actions = jnp.asarray(actions)
            if actions.shape[-1:] != (self.num_agents,):
                raise ValueError(f"actions array must end in the agent axis [{self.num_agents}], "
                                 f"got shape {actions.shape}")
            if not jnp.issubdtype(actions.dtype, jnp.integer):
                raise ValueError(f"actions must be integers in [0, {NUM_ACTIONS}), got dtype {actions.dtype}")
            actions = actions.astype(jnp.int32)
        if not isinstance(actions, jax.core.Tracer):
            values = np.asarray(actions)
            if values.size and (values.min() < 0 or values.max() >= NUM_ACTIONS):
                raise ValueError(f"actions must be in [0, {NUM_ACTIONS}) "
                                 f"({', '.join(a.name for a in Action)}), got {values.tolist()}")
        return actions

    def reset(self, key: jax.Array):
        """`(obs, state)`: the layout's start state, or random distinct floor starts if enabled."""
        return self._reset(key)

    def step(self, key: jax.Array, state: State, actions, reset_state: State | None = None):
        """`(obs, state, rewards, dones, infos)`; resets automatically once the horizon is reached."""
        return self._step(key, state, self.actions_to_array(actions), reset_state)

    # ---- Pure, jitted core -----------------------------------------------------------------

    @partial(jax.jit, static_argnums=(0,))
    def _reset(self, key: jax.Array):
        state = initial_state(self.layout)
        if self.random_start:
            floor = jnp.asarray(self.layout.floor_pos)  # [F, 2]
            picks = jax.random.choice(key, floor.shape[0], (self.num_agents,), replace=False)
            state = state.replace(pos=floor[picks], facing=jnp.zeros_like(state.facing))
        return self.get_obs(state), state

    @partial(jax.jit, static_argnums=(0,))
    def _step(self, key, state, actions, reset_state):
        return super().step(key, state, actions, reset_state)

    def step_env(self, key: jax.Array, state: State, actions):
        """One transition without auto-reset. `actions`: int32 [A] (or the agent dict)."""
        if isinstance(actions, dict):
            actions = self.actions_to_array(actions)
        state, sparse, shaped, events = transition(self.layout, state, actions)
        team = jnp.sum(sparse)
        rewards = {a: team for a in self.agents}
        done = state.time >= self.horizon
        dones = {**{a: done for a in self.agents}, "__all__": done}
        infos = {"sparse_reward_by_agent": sparse, "shaped_reward_by_agent": shaped, "events": events}
        return self.get_obs(state), state, rewards, dones, infos

    def get_obs(self, state: State) -> dict:
        """Per agent int32 [H, W, C] (channels `OBS_CHANNELS`)."""
        height, width = self.layout.height, self.layout.width
        grid = jnp.asarray(self.layout.grid)  # [H, W]
        pot_x, pot_y = self.layout.pot_pos[:, 0], self.layout.pot_pos[:, 1]
        zeros = jnp.zeros((height, width), jnp.int32)
        pot_onions = zeros.at[pot_y, pot_x].set(state.pot_onions)
        pot_tomatoes = zeros.at[pot_y, pot_x].set(state.pot_tomatoes)
        pot_tick = zeros.at[pot_y, pot_x].set(state.pot_tick + 1)
        # [A, H, W]: which cell each agent stands on.
        here = ((jnp.arange(height)[None, :, None] == state.pos[:, 1, None, None])
                & (jnp.arange(width)[None, None, :] == state.pos[:, 0, None, None]))
        facing = jnp.where(here, state.facing[:, None, None] + 1, 0)  # [A, H, W]
        held = jnp.where(here, state.held[:, None, None], 0)  # [A, H, W]
        shared = jnp.stack([grid, state.counter, pot_onions, pot_tomatoes, pot_tick], axis=-1)
        obs = {}
        for i, agent in enumerate(self.agents):
            others_facing = jnp.sum(facing, axis=0) - facing[i]
            others_held = jnp.sum(held, axis=0) - held[i]
            own = jnp.stack([facing[i], held[i], others_facing, others_held], axis=-1)
            obs[agent] = jnp.concatenate([shared, own], axis=-1).astype(jnp.int32)  # [H, W, C]
        return obs

    def get_avail_actions(self, state: State) -> dict:
        """Every action is always legal in Overcooked."""
        return {a: jnp.ones(NUM_ACTIONS, bool) for a in self.agents}
