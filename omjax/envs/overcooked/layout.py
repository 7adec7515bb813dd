"""Static Overcooked layouts, parsed from the `.layout` files that ship with `overcooked_ai_py`.

A `Layout` is plain static configuration (NumPy arrays and Python scalars): the env holds it, it
never enters a traced computation as an argument. Coordinates are `(x, y) = (column, row)`, exactly
as in `overcooked_ai_py`, so `grid[y, x]` is the cell at position `(x, y)`.

Reading the files needs no `overcooked_ai_py` import: only its data folder is located. Recipe
values and cook times are tabulated here per soup `(onions, tomatoes)` with the same rules as
`overcooked_ai_py.mdp.overcooked_mdp.Recipe` (`value`, `time`) and
`OvercookedGridworld.get_recipe_value` (orders, bonus orders, order bonus).
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
import math
import os
from enum import IntEnum

import numpy as np

from omjax.envs.overcooked.items import DIRECTIONS, MAX_INGREDIENTS, item_from_name, soup_item

# Default Recipe value/time and OvercookedGridworld.order_bonus when a layout does not set them.
_DEFAULT_RECIPE_VALUE = 20
_DEFAULT_RECIPE_TIME = 20
_DEFAULT_ORDER_BONUS = 2


class Terrain(IntEnum):
    """Terrain code of a grid cell (the layout character in the comment)."""

    FLOOR = 0  # ' ' (and the player digits, which stand on floor)
    COUNTER = 1  # 'X'
    ONION_DISPENSER = 2  # 'O'
    TOMATO_DISPENSER = 3  # 'T'
    DISH_DISPENSER = 4  # 'D'
    POT = 5  # 'P'
    SERVING = 6  # 'S'


TERRAIN_CHARS = {" ": Terrain.FLOOR, "X": Terrain.COUNTER, "O": Terrain.ONION_DISPENSER,
                 "T": Terrain.TOMATO_DISPENSER, "D": Terrain.DISH_DISPENSER, "P": Terrain.POT,
                 "S": Terrain.SERVING}
TERRAIN_TO_CHAR = {code: char for char, code in TERRAIN_CHARS.items()}


def layouts_dir() -> str:
    """The `data/layouts` folder of the installed `overcooked_ai_py` (located, not imported)."""
    spec = importlib.util.find_spec("overcooked_ai_py")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(
            "overcooked_ai_py is not installed; its .layout files define the Overcooked layouts "
            "(pip install --no-deps overcooked-ai==1.1.0)")
    return os.path.join(list(spec.submodule_search_locations)[0], "data", "layouts")


def list_layouts() -> list[str]:
    """Names of every layout shipped with `overcooked_ai_py`."""
    return sorted(f[: -len(".layout")] for f in os.listdir(layouts_dir()) if f.endswith(".layout"))


def read_layout_dict(name: str) -> dict:
    """The raw dict of `<name>.layout`. The files are Python literals; one uses `float('inf')`."""
    path = os.path.join(layouts_dir(), f"{name}.layout")
    if not os.path.exists(path):
        raise ValueError(f"unknown Overcooked layout {name!r}; known layouts: {', '.join(list_layouts())}")
    with open(path) as f:
        text = f.read()
    # The files are trusted package data in overcooked_ai_py's own eval format; no builtins but float.
    return eval(text, {"__builtins__": {}, "float": float, "None": None, "True": True, "False": False})


def _recipe_key(ingredients) -> tuple[int, int]:
    """(onions, tomatoes) of an ingredient list, the identity of a Recipe (it sorts ingredients)."""
    ingredients = list(ingredients)
    unknown = [i for i in ingredients if i not in ("onion", "tomato")]
    if unknown:
        raise ValueError(f"unknown ingredient(s) {unknown}; Overcooked knows 'onion' and 'tomato'")
    return ingredients.count("onion"), ingredients.count("tomato")


@dataclasses.dataclass(frozen=True, eq=False)
class Layout:
    """A parsed Overcooked layout. Arrays are NumPy (static config); A agents, P pots."""

    name: str
    grid: np.ndarray  # int32 [H, W] Terrain codes
    start_pos: np.ndarray  # int32 [A, 2] (x, y), player 1 first
    start_facing: np.ndarray  # int32 [A] Direction index (NORTH unless the layout's start_state says)
    start_held: np.ndarray  # int32 [A] Item codes (none unless the layout's start_state says)
    start_counter: np.ndarray  # int32 [H, W] Item codes on counters at the start
    start_pot_onions: np.ndarray  # int32 [P]
    start_pot_tomatoes: np.ndarray  # int32 [P]
    start_pot_tick: np.ndarray  # int32 [P] (-1 = idle)
    pot_pos: np.ndarray  # int32 [P, 2] (x, y), in row-major order of the grid (as overcooked_ai_py)
    soup_value: np.ndarray  # float32 [4, 4] reward for delivering a soup of [onions, tomatoes]
    soup_cook_time: np.ndarray  # int32 [4, 4] cook time of a soup of [onions, tomatoes]
    raw: dict = dataclasses.field(repr=False)  # the .layout dict as read (for the reference sim)

    @property
    def height(self) -> int:
        return int(self.grid.shape[0])

    @property
    def width(self) -> int:
        return int(self.grid.shape[1])

    @property
    def num_agents(self) -> int:
        return int(self.start_pos.shape[0])

    @property
    def num_pots(self) -> int:
        return int(self.pot_pos.shape[0])

    @property
    def cook_time(self) -> int:
        """Cook time of the 3-onion soup (20 on the classic layouts)."""
        return int(self.soup_cook_time[MAX_INGREDIENTS, 0])

    @property
    def delivery_reward(self) -> float:
        """Reward for delivering the 3-onion soup (20 on the classic layouts)."""
        return float(self.soup_value[MAX_INGREDIENTS, 0])

    @property
    def has_tomatoes(self) -> bool:
        return bool((self.grid == Terrain.TOMATO_DISPENSER).any())

    @functools.cached_property
    def pot_index(self) -> np.ndarray:
        """int32 [H, W]: index into `pot_pos` of the pot at each cell, -1 elsewhere."""
        index = np.full(self.grid.shape, -1, np.int32)
        index[self.pot_pos[:, 1], self.pot_pos[:, 0]] = np.arange(self.num_pots, dtype=np.int32)
        return index

    @functools.cached_property
    def floor_pos(self) -> np.ndarray:
        """int32 [F, 2]: every walkable cell (x, y), row-major."""
        ys, xs = np.nonzero(self.grid == Terrain.FLOOR)
        return np.stack([xs, ys], axis=1).astype(np.int32)

    def positions_of(self, terrain: Terrain) -> np.ndarray:
        """int32 [N, 2]: the (x, y) of every cell of one terrain type, row-major."""
        ys, xs = np.nonzero(self.grid == terrain)
        return np.stack([xs, ys], axis=1).astype(np.int32)

    def char_rows(self) -> list[str]:
        """The terrain as layout characters, one string per row (players not drawn)."""
        return ["".join(TERRAIN_TO_CHAR[Terrain(c)] for c in row) for row in self.grid]


def _tabulate_recipes(conf: dict) -> tuple[np.ndarray, np.ndarray]:
    """Delivery reward and cook time of every soup [onions, tomatoes], as overcooked_ai_py scores it."""
    all_orders = {_recipe_key(o["ingredients"]) for o in conf.get("start_all_orders") or []}
    bonus_orders = {_recipe_key(o["ingredients"]) for o in conf.get("start_bonus_orders") or []}
    order_bonus = conf.get("order_bonus", _DEFAULT_ORDER_BONUS)
    value_map, time_map = {}, {}
    if "recipe_values" in conf:
        value_map = {_recipe_key(o["ingredients"]): v
                     for o, v in zip(conf["start_all_orders"], conf["recipe_values"])}
    if "recipe_times" in conf:
        time_map = {_recipe_key(o["ingredients"]): t
                    for o, t in zip(conf["start_all_orders"], conf["recipe_times"])}
    value = np.zeros((MAX_INGREDIENTS + 1, MAX_INGREDIENTS + 1), np.float32)
    cook = np.zeros((MAX_INGREDIENTS + 1, MAX_INGREDIENTS + 1), np.int32)
    for onions in range(MAX_INGREDIENTS + 1):
        for tomatoes in range(MAX_INGREDIENTS + 1 - onions):
            if onions + tomatoes == 0:
                continue
            key = (onions, tomatoes)
            # Recipe.value / Recipe.time: the checks are truthiness checks, in this order.
            if conf.get("delivery_reward"):
                base = conf["delivery_reward"]
            elif key in value_map:
                base = value_map[key]
            elif conf.get("onion_value") and conf.get("tomato_value"):
                base = conf["tomato_value"] * tomatoes + conf["onion_value"] * onions
            else:
                base = _DEFAULT_RECIPE_VALUE
            if conf.get("cook_time"):
                cook[key] = conf["cook_time"]
            elif key in time_map:
                cook[key] = time_map[key]
            elif conf.get("onion_time") and conf.get("tomato_time"):
                cook[key] = conf["onion_time"] * onions + conf["tomato_time"] * tomatoes
            else:
                cook[key] = _DEFAULT_RECIPE_TIME
            # get_recipe_value: an empty order list means every recipe is orderable.
            if all_orders and key not in all_orders:
                value[key] = 0.0
            elif key in bonus_orders:
                value[key] = order_bonus * base if not math.isinf(order_bonus) else math.inf
            else:
                value[key] = base
    return value, cook


@functools.lru_cache(maxsize=None)
def load_layout(name: str) -> Layout:
    """Parse `overcooked_ai_py/data/layouts/<name>.layout` into a `Layout`."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"layout name must be a non-empty string, got {name!r}")
    raw = read_layout_dict(name)
    rows = [row.strip() for row in raw["grid"].split("\n")]
    if len({len(r) for r in rows}) != 1:
        raise ValueError(f"layout {name!r}: grid rows have different lengths")
    height, width = len(rows), len(rows[0])
    grid = np.zeros((height, width), np.int32)
    starts: dict[int, tuple[int, int]] = {}
    for y, row in enumerate(rows):
        for x, char in enumerate(row):
            if char.isdigit() and char != "0":
                starts[int(char) - 1] = (x, y)
                char = " "
            if char not in TERRAIN_CHARS:
                raise ValueError(f"layout {name!r}: unknown grid character {char!r} at (x={x}, y={y})")
            grid[y, x] = TERRAIN_CHARS[char]
    if sorted(starts) != list(range(len(starts))) or not starts:
        raise ValueError(f"layout {name!r}: players must be numbered 1..N, found {sorted(k + 1 for k in starts)}")
    num_agents = len(starts)
    start_pos = np.array([starts[i] for i in range(num_agents)], np.int32)  # [A, 2]
    ys, xs = np.nonzero(grid == Terrain.POT)
    pot_pos = np.stack([xs, ys], axis=1).astype(np.int32)  # [P, 2]
    pot_index = {(int(x), int(y)): p for p, (x, y) in enumerate(pot_pos)}

    start_facing = np.zeros(num_agents, np.int32)  # NORTH, as OvercookedState.from_player_positions
    start_held = np.zeros(num_agents, np.int32)
    start_counter = np.zeros((height, width), np.int32)
    pot_onions = np.zeros(len(pot_pos), np.int32)
    pot_tomatoes = np.zeros(len(pot_pos), np.int32)
    pot_tick = np.full(len(pot_pos), -1, np.int32)

    def object_item(obj: dict) -> int:
        if obj["name"] != "soup":
            return item_from_name(obj["name"])
        onions, tomatoes = _recipe_key(i["name"] for i in obj["_ingredients"])
        return soup_item(onions, tomatoes)

    start_state = raw.get("start_state")
    if start_state is not None:
        players = start_state["players"]
        if len(players) != num_agents:
            raise ValueError(f"layout {name!r}: start_state has {len(players)} players, grid has {num_agents}")
        for i, player in enumerate(players):
            start_pos[i] = player["position"]
            start_facing[i] = DIRECTIONS.index(tuple(player["orientation"]))
            if player.get("held_object") is not None:
                start_held[i] = object_item(player["held_object"])
        for obj in start_state["objects"]:
            x, y = obj["position"]
            if (x, y) in pot_index:
                p = pot_index[(x, y)]
                pot_onions[p], pot_tomatoes[p] = _recipe_key(i["name"] for i in obj["_ingredients"])
                pot_tick[p] = obj.get("_cooking_tick", obj.get("cooking_tick", -1))
            else:
                start_counter[y, x] = object_item(obj)

    soup_value, soup_cook_time = _tabulate_recipes(raw)
    return Layout(name=name, grid=grid, start_pos=start_pos, start_facing=start_facing,
                  start_held=start_held, start_counter=start_counter, start_pot_onions=pot_onions,
                  start_pot_tomatoes=pot_tomatoes, start_pot_tick=pot_tick, pot_pos=pot_pos,
                  soup_value=soup_value, soup_cook_time=soup_cook_time, raw=raw)
