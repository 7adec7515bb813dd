"""Exact conversion between our `State` and `overcooked_ai_py` 1.1.0 `OvercookedState`.

`overcooked_ai_py` is the reference simulator. Two things keep it from importing as-is here:
it uses `np.Inf` (removed in NumPy 2), and its package `__init__` registers a gym env although
gym is not a dependency of its MDP. `load_overcooked_ai()` handles both in this one place, then
returns the `overcooked_ai_py.mdp.overcooked_mdp` module. Nothing here touches the motion planner
(which would write a pickle into the package folder).
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types

import numpy as np

from omjax.envs.overcooked.env import POT_IDLE, Overcooked, State
from omjax.envs.overcooked.items import (
    DIRECTIONS,
    Item,
    is_soup,
    item_from_name,
    soup_item,
    soup_onions,
    soup_tomatoes,
)
from omjax.envs.overcooked.layout import Layout


def load_overcooked_ai() -> types.ModuleType:
    """Import and return `overcooked_ai_py.mdp.overcooked_mdp` (see module doc for the patches)."""
    if not hasattr(np, "Inf"):
        np.Inf = np.inf
    if "overcooked_ai_py" not in sys.modules and importlib.util.find_spec("gym") is None:
        # Register the package without running its __init__, whose only job is gym registration.
        spec = importlib.util.find_spec("overcooked_ai_py")
        if spec is None:
            raise ModuleNotFoundError("overcooked_ai_py is not installed "
                                      "(pip install --no-deps overcooked-ai==1.1.0)")
        package = types.ModuleType("overcooked_ai_py")
        package.__path__ = list(spec.submodule_search_locations)
        package.__spec__ = spec
        sys.modules["overcooked_ai_py"] = package
    return importlib.import_module("overcooked_ai_py.mdp.overcooked_mdp")


_MDPS: dict = {}


def make_mdp(layout: str | Layout):
    """`OvercookedGridworld.from_layout_name(name)`; this (re)configures the global `Recipe` class."""
    mdp = load_overcooked_ai()
    name = layout.name if isinstance(layout, Layout) else layout
    _MDPS[name] = mdp.OvercookedGridworld.from_layout_name(name)
    return _MDPS[name]


def _configure_recipes(layout: Layout):
    """Point overcooked_ai_py's global `Recipe` configuration at this layout's recipes.

    Recipe values and cook times are class-level in overcooked_ai_py, set by whichever
    OvercookedGridworld was built last; soups built for another layout must not use them.
    """
    mdp = load_overcooked_ai()
    if layout.name not in _MDPS:
        make_mdp(layout)
    config = _MDPS[layout.name].recipe_config
    if not mdp.Recipe._configured or mdp.Recipe._conf is not config:
        mdp.Recipe.configure(config)


def _layout(env) -> Layout:
    return env.layout if isinstance(env, Overcooked) else env


def _make_object(mdp, item: int, position: tuple[int, int], cook_time: int):
    """The overcooked_ai_py object for an item code at a position (soups: cooked, ready)."""
    if is_soup(item):
        onions, tomatoes = int(soup_onions(item)), int(soup_tomatoes(item))
        return _make_soup(mdp, position, onions, tomatoes, cook_time)
    names = {Item.ONION: "onion", Item.TOMATO: "tomato", Item.DISH: "dish"}
    return mdp.ObjectState(names[Item(item)], position)


def _make_soup(mdp, position, onions: int, tomatoes: int, tick: int):
    ingredients = ([mdp.ObjectState("onion", position) for _ in range(onions)]
                   + [mdp.ObjectState("tomato", position) for _ in range(tomatoes)])
    return mdp.SoupState(position, ingredients, cooking_tick=tick)


def to_overcooked_ai(env, state: State):
    """Our (unbatched) `State` as an `overcooked_ai_py` `OvercookedState` with the layout's orders.

    Soups outside pots are cooked, so they get cooking_tick = their recipe's cook time.
    Ingredients of a soup are listed onions first: overcooked_ai_py keeps them in the order they
    were added and compares soups in that order, but only their counts matter to its dynamics, so
    a mixed onion-tomato soup equals the reference's up to that order.
    """
    mdp = load_overcooked_ai()
    layout = _layout(env)
    _configure_recipes(layout)
    s = {k: np.asarray(v) for k, v in vars(state).items()}
    if s["pos"].ndim != 2:
        raise ValueError(f"to_overcooked_ai takes one unbatched state; pos has shape {s['pos'].shape}")
    players = []
    for i in range(layout.num_agents):
        position = tuple(int(v) for v in s["pos"][i])
        held = int(s["held"][i])
        obj = None if held == Item.NONE else _make_object(
            mdp, held, position, int(layout.soup_cook_time[soup_onions(held), soup_tomatoes(held)]))
        players.append(mdp.PlayerState(position, DIRECTIONS[int(s["facing"][i])], obj))
    objects = {}
    for y, x in zip(*np.nonzero(s["counter"])):
        item = int(s["counter"][y, x])
        pos = (int(x), int(y))
        objects[pos] = _make_object(mdp, item, pos,
                                    int(layout.soup_cook_time[soup_onions(item), soup_tomatoes(item)]))
    for p, (x, y) in enumerate(layout.pot_pos):
        onions, tomatoes = int(s["pot_onions"][p]), int(s["pot_tomatoes"][p])
        if onions + tomatoes:
            pos = (int(x), int(y))
            objects[pos] = _make_soup(mdp, pos, onions, tomatoes, int(s["pot_tick"][p]))
    gridworld = _MDPS[layout.name]
    return mdp.OvercookedState(players, objects, bonus_orders=gridworld.start_bonus_orders,
                               all_orders=gridworld.start_all_orders, timestep=int(s["time"]))


def _object_item(obj) -> int:
    if obj.name != "soup":
        return item_from_name(obj.name)
    return int(soup_item(obj.ingredients.count("onion"), obj.ingredients.count("tomato")))


def _loose_item(obj, where: str) -> int:
    """Item code of an object outside a pot; such a soup must be exactly cooked to be encodable."""
    if obj.name == "soup" and (obj.is_idle or obj._cooking_tick != obj.cook_time):
        raise ValueError(f"soup {where} has cooking tick {obj._cooking_tick}, not its cook time "
                         f"{obj.cook_time}; our State encodes soups outside pots as just cooked")
    return _object_item(obj)


def from_overcooked_ai(env, oa_state) -> State:
    """An `overcooked_ai_py` `OvercookedState` on this layout as our `State` (exact).

    The fields are NumPy arrays with our dtypes (jax functions take them as they are); this keeps
    step-by-step comparisons against the reference free of device transfers.
    """
    layout = _layout(env)
    _configure_recipes(layout)
    if len(oa_state.players) != layout.num_agents:
        raise ValueError(f"state has {len(oa_state.players)} players, layout {layout.name!r} "
                         f"has {layout.num_agents}")
    pos = np.array([p.position for p in oa_state.players], np.int32)
    facing = np.array([DIRECTIONS.index(tuple(p.orientation)) for p in oa_state.players], np.int32)
    held = np.zeros(layout.num_agents, np.int32)
    for i, player in enumerate(oa_state.players):
        if player.held_object is not None:
            obj = player.held_object
            held[i] = _loose_item(obj, f"held by player {i}")
    counter = np.zeros((layout.height, layout.width), np.int32)
    onions = np.zeros(layout.num_pots, np.int32)
    tomatoes = np.zeros(layout.num_pots, np.int32)
    tick = np.full(layout.num_pots, POT_IDLE, np.int32)
    for (x, y), obj in oa_state.objects.items():
        pot = int(layout.pot_index[y, x])
        if pot >= 0:
            onions[pot] = obj.ingredients.count("onion")
            tomatoes[pot] = obj.ingredients.count("tomato")
            tick[pot] = obj._cooking_tick
        else:
            counter[y, x] = _loose_item(obj, f"on counter {(x, y)}")
    return State(pos=pos, facing=facing, held=held, counter=counter, pot_onions=onions,
                 pot_tomatoes=tomatoes, pot_tick=tick, time=np.asarray(oa_state.timestep, np.int32))
