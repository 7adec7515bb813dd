"""Item, action, direction and pot-phase codes shared by the env, renderers and option library.

Items are single int32 codes so that a held object or a counter cell is one array entry. A soup
carries its ingredients in its code: `soup_item(onions, tomatoes) = SOUP + onions + 4 * tomatoes`,
so the onion-only soups are `SOUP_1`, `SOUP_2`, `SOUP_3` (5, 6, 7) and every code `>= SOUP` other
than `SOUP` itself is a soup. Soups outside pots are always cooked (overcooked_ai_py only lets a
dish take a ready soup), so an item code needs no cooking tick.
"""

from __future__ import annotations

from enum import IntEnum

import numpy as np

# Recipe.MAX_NUM_INGREDIENTS in overcooked_ai_py 1.1.0. OvercookedGridworld passes its
# `num_items_for_soup` under a key Recipe.configure does not read, so this stays 3 for every layout.
MAX_INGREDIENTS = 3

# overcooked_ai_py Direction.ALL_DIRECTIONS order, as (dx, dy).
DIRECTIONS = [(0, -1), (0, 1), (1, 0), (-1, 0)]
DIRECTION_NAMES = ["north", "south", "east", "west"]
DIR_VEC = np.array(DIRECTIONS, np.int32)  # [4, 2]


class Direction(IntEnum):
    """Facing, in overcooked_ai_py `Direction.ALL_DIRECTIONS` order."""

    NORTH = 0
    SOUTH = 1
    EAST = 2
    WEST = 3


class Action(IntEnum):
    """Actions, in overcooked_ai_py `Action.ALL_ACTIONS` order (the four moves equal Direction)."""

    NORTH = 0
    SOUTH = 1
    EAST = 2
    WEST = 3
    STAY = 4
    INTERACT = 5


NUM_ACTIONS = len(Action)


class Item(IntEnum):
    """What a player holds or a counter carries. Codes from SOUP up are soups (see module doc)."""

    NONE = 0
    ONION = 1
    TOMATO = 2
    DISH = 3
    SOUP = 4
    SOUP_1 = 5  # soup of 1 onion
    SOUP_2 = 6  # soup of 2 onions
    SOUP_3 = 7  # soup of 3 onions


# One more than the largest soup code (MAX_INGREDIENTS tomatoes): the size of item one-hots.
NUM_ITEMS = Item.SOUP + 1 + (MAX_INGREDIENTS + 1) * MAX_INGREDIENTS


class PotPhase(IntEnum):
    """Phase of a pot, as `pot_phase` computes it."""

    EMPTY = 0  # no ingredient
    FILLING = 1  # 1..MAX-1 ingredients, not cooking (an INTERACT with empty hands starts it)
    FULL = 2  # MAX ingredients, not cooking yet
    COOKING = 3  # cooking started, tick < cook time
    READY = 4  # cooked; a dish takes it


_NAMES = {"onion": Item.ONION, "tomato": Item.TOMATO, "dish": Item.DISH}


def item_from_name(name: str) -> int:
    """Item code of an overcooked_ai_py non-soup object name."""
    if name not in _NAMES:
        raise ValueError(f"unknown Overcooked object {name!r}; expected one of {sorted(_NAMES)} or a soup")
    return int(_NAMES[name])


def soup_item(onions, tomatoes=0):
    """Item code of a soup with these ingredient counts (works on ints and arrays)."""
    return Item.SOUP + onions + (MAX_INGREDIENTS + 1) * tomatoes


def is_soup(item):
    return item > Item.SOUP


def soup_onions(item):
    """Onions in a soup code, 0 for non-soups (works on ints and arrays)."""
    return ((item - Item.SOUP) % (MAX_INGREDIENTS + 1)) * is_soup(item)


def soup_tomatoes(item):
    """Tomatoes in a soup code, 0 for non-soups (works on ints and arrays)."""
    return ((item - Item.SOUP) // (MAX_INGREDIENTS + 1)) * is_soup(item)


def item_name(item: int) -> str:
    """Human-readable name of an item code, e.g. 'soup (3 onions)'."""
    item = int(item)
    if item <= Item.DISH:
        return Item(item).name.lower()
    onions, tomatoes = soup_onions(item), soup_tomatoes(item)
    parts = [f"{n} {kind}{'s' if n != 1 else ''}" for n, kind in ((onions, "onion"), (tomatoes, "tomato")) if n]
    return f"soup ({', '.join(parts)})"
