"""Renderers of one (unbatched) Overcooked state: facts as text, the grid as ASCII, and RGB.

`render_text` lists what the prompts of the paper's §5.1 draw on: each chef's position, facing
and held item, every pot's ingredients and cooking state, every counter's item, plus the fixed
stations. `render_ascii` draws the grid in overcooked_ai_py's layout characters with the chefs
and items on top; `render_rgb` draws coloured cells for notebooks (`plt.imshow`).
"""

from __future__ import annotations

import numpy as np

from omjax.envs.overcooked.env import Overcooked, State, pot_cook_time, pot_phase
from omjax.envs.overcooked.items import (
    DIR_VEC,
    DIRECTION_NAMES,
    Item,
    PotPhase,
    is_soup,
    item_name,
)
from omjax.envs.overcooked.layout import Layout, Terrain

_STATION_NAMES = {Terrain.ONION_DISPENSER: "onion dispensers", Terrain.TOMATO_DISPENSER: "tomato dispensers",
                  Terrain.DISH_DISPENSER: "dish dispensers", Terrain.POT: "pots",
                  Terrain.SERVING: "serving counters"}
_ARROWS = "^v><"  # N, S, E, W
_ITEM_CHARS = {Item.ONION: "o", Item.TOMATO: "t", Item.DISH: "d"}


def _layout(env_or_layout) -> Layout:
    return env_or_layout.layout if isinstance(env_or_layout, Overcooked) else env_or_layout


def _numpy_state(state: State) -> dict:
    values = {name: np.asarray(value) for name, value in vars(state).items()}
    if values["pos"].ndim != 2:
        raise ValueError(f"renderers take one unbatched state; pos has shape {values['pos'].shape}")
    return values


def _pot_lines(layout: Layout, state: State) -> list[str]:
    s = _numpy_state(state)
    phases = np.asarray(pot_phase(layout, state))
    cook = np.asarray(pot_cook_time(layout, state))
    lines = []
    for p, (x, y) in enumerate(layout.pot_pos):
        onions, tomatoes, tick = int(s["pot_onions"][p]), int(s["pot_tomatoes"][p]), int(s["pot_tick"][p])
        contents = ", ".join(f"{n} {kind}{'s' if n != 1 else ''}" for n, kind in
                             ((onions, "onion"), (tomatoes, "tomato")) if n or kind == "onion")
        phase = PotPhase(int(phases[p]))
        if phase == PotPhase.COOKING:
            state_text = f"cooking, {int(cook[p]) - tick} of {int(cook[p])} ticks left"
        elif phase == PotPhase.READY:
            state_text = "ready to plate"
        elif phase == PotPhase.EMPTY:
            state_text = "empty"
        else:
            state_text = f"{phase.name.lower()}, not cooking"
        lines.append(f"pot {p} at ({x}, {y}): {contents}; {state_text}")
    return lines


def render_text(env_or_layout, state: State) -> str:
    """The state's facts as plain text lines (positions are (x, y) = (column, row), y grows south)."""
    layout = _layout(env_or_layout)
    s = _numpy_state(state)
    lines = [f"layout {layout.name}, step {int(s['time'])}"]
    for i in range(layout.num_agents):
        x, y = (int(v) for v in s["pos"][i])
        held = int(s["held"][i])
        lines.append(f"agent_{i} at ({x}, {y}) facing {DIRECTION_NAMES[int(s['facing'][i])]}, "
                     f"holding {'nothing' if held == Item.NONE else item_name(held)}")
    lines += _pot_lines(layout, state)
    items = [(int(x), int(y), int(s["counter"][y, x])) for y, x in zip(*np.nonzero(s["counter"]))]
    if items:
        lines.append("counters: " + "; ".join(f"{item_name(item)} at ({x}, {y})" for x, y, item in items))
    else:
        lines.append("counters: all empty")
    for terrain, name in _STATION_NAMES.items():
        if terrain == Terrain.POT:
            continue
        cells = layout.positions_of(terrain)
        if len(cells):
            lines.append(f"{name}: " + ", ".join(f"({x}, {y})" for x, y in cells))
    return "\n".join(lines)


def _item_char(item: int) -> str:
    if is_soup(item):
        return "s"
    return _ITEM_CHARS[Item(item)]


def render_ascii(env_or_layout, state: State) -> str:
    """The grid in layout characters; chefs as their index with an arrow for facing and the held
    item's letter (o onion, t tomato, d dish, s soup) after; counters show their item's letter;
    pots show their ingredient count, or `~` cooking, `!` ready. Each cell is 3 characters wide."""
    layout = _layout(env_or_layout)
    s = _numpy_state(state)
    phases = np.asarray(pot_phase(layout, state))
    rows = [[f" {char} " for char in row] for row in layout.char_rows()]
    for y, x in zip(*np.nonzero(s["counter"])):
        rows[y][x] = f"X{_item_char(int(s['counter'][y, x]))} "
    for p, (x, y) in enumerate(layout.pot_pos):
        phase = PotPhase(int(phases[p]))
        count = int(s["pot_onions"][p] + s["pot_tomatoes"][p])
        mark = {PotPhase.COOKING: "~", PotPhase.READY: "!"}.get(phase, str(count) if count else " ")
        rows[y][x] = f"P{mark} "
    for i in range(layout.num_agents):
        x, y = (int(v) for v in s["pos"][i])
        held = int(s["held"][i])
        rows[y][x] = f"{i}{_ARROWS[int(s['facing'][i])]}{' ' if held == Item.NONE else _item_char(held)}"
    return "\n".join("".join(row).rstrip() for row in rows)


_TERRAIN_RGB = {Terrain.FLOOR: (230, 230, 220), Terrain.COUNTER: (150, 110, 70),
                Terrain.ONION_DISPENSER: (240, 200, 60), Terrain.TOMATO_DISPENSER: (220, 60, 50),
                Terrain.DISH_DISPENSER: (200, 200, 230), Terrain.POT: (60, 60, 60),
                Terrain.SERVING: (90, 180, 90)}
_ITEM_RGB = {Item.ONION: (250, 220, 80), Item.TOMATO: (230, 70, 60), Item.DISH: (250, 250, 250)}
_SOUP_RGB = (240, 140, 40)
_AGENT_RGB = [(40, 90, 220), (40, 180, 200), (170, 60, 200), (230, 120, 180), (120, 120, 40)]


def render_rgb(env_or_layout, state: State, cell: int = 24) -> np.ndarray:
    """uint8 [H * cell, W * cell, 3]: terrain colours, items as inner squares, chefs as discs with a
    notch toward their facing, pot fill as a bar (orange once cooking, green when ready)."""
    if cell < 8:
        raise ValueError(f"cell must be at least 8 pixels, got {cell}")
    layout = _layout(env_or_layout)
    s = _numpy_state(state)
    phases = np.asarray(pot_phase(layout, state))
    image = np.zeros((layout.height * cell, layout.width * cell, 3), np.uint8)
    yy, xx = np.mgrid[0:cell, 0:cell]
    centre = (cell - 1) / 2

    def paint(x, y, mask, colour):
        block = image[y * cell:(y + 1) * cell, x * cell:(x + 1) * cell]
        block[mask] = colour

    def item_colour(item):
        return _SOUP_RGB if is_soup(item) else _ITEM_RGB[Item(item)]

    inner = (abs(yy - centre) < cell / 4) & (abs(xx - centre) < cell / 4)
    for y in range(layout.height):
        for x in range(layout.width):
            paint(x, y, np.ones_like(inner), _TERRAIN_RGB[Terrain(int(layout.grid[y, x]))])
            if s["counter"][y, x]:
                paint(x, y, inner, item_colour(int(s["counter"][y, x])))
    for p, (x, y) in enumerate(layout.pot_pos):
        count = int(s["pot_onions"][p] + s["pot_tomatoes"][p])
        phase = PotPhase(int(phases[p]))
        colour = {PotPhase.COOKING: _SOUP_RGB, PotPhase.READY: (60, 220, 60)}.get(phase, _ITEM_RGB[Item.ONION])
        bar = (yy >= cell - 1 - count * cell // 4) & (xx > cell // 8) & (xx < cell - cell // 8)
        paint(int(x), int(y), bar, colour)
    disc = (yy - centre) ** 2 + (xx - centre) ** 2 <= (cell * 0.4) ** 2
    for i in range(layout.num_agents):
        x, y = (int(v) for v in s["pos"][i])
        paint(x, y, disc, _AGENT_RGB[i % len(_AGENT_RGB)])
        dx, dy = DIR_VEC[int(s["facing"][i])]
        notch = ((yy - centre - dy * cell * 0.3) ** 2 + (xx - centre - dx * cell * 0.3) ** 2
                 <= (cell * 0.12) ** 2)
        paint(x, y, notch, (20, 20, 20))
        if s["held"][i]:
            paint(x, y, (abs(yy - centre) < cell / 7) & (abs(xx - centre) < cell / 7),
                  item_colour(int(s["held"][i])))
    return image

