"""Per-agent text observations (paper §4, §5.1).

"Visible" means inside the avatar's own partial-observation window, as the engine renders it
for that avatar's `RGB`: both substrates configure the avatar view as 5 cells left and right, 9
forward and 1 backward of the avatar, rotated with its facing (11 x 11 cells). Distances are
Manhattan steps ("5st"), the number of moves an unobstructed walk needs (avatars can strafe, so
turning costs nothing on the way).
"""

from __future__ import annotations

import numpy as np

from omjax.envs.meltingpot.adapter import ORIENTATIONS, SymbolicState
from omjax.envs.meltingpot.engine import Substrate
from omjax.envs.meltingpot.layout import Layout

VIEW_LEFT = 5
VIEW_RIGHT = 5
VIEW_FORWARD = 9
VIEW_BACKWARD = 1
NEAREST_SHOWN = 3


# World-frame window of each facing, as (x0, x1, y0, y1) offsets from the avatar, inclusive.
_WINDOW = (
    (-VIEW_LEFT, VIEW_RIGHT, -VIEW_FORWARD, VIEW_BACKWARD),  # North
    (-VIEW_BACKWARD, VIEW_FORWARD, -VIEW_LEFT, VIEW_RIGHT),  # East
    (-VIEW_RIGHT, VIEW_LEFT, -VIEW_BACKWARD, VIEW_FORWARD),  # South
    (-VIEW_FORWARD, VIEW_BACKWARD, -VIEW_RIGHT, VIEW_LEFT),  # West
)


def view_mask(pos, ori: int, shape: tuple[int, int]) -> np.ndarray:
    """bool [H, W]: cells inside the view window of an avatar at `pos` (x, y) facing `ori`."""
    h, w = shape
    x, y = int(pos[0]), int(pos[1])
    x0, x1, y0, y1 = _WINDOW[int(ori)]
    mask = np.zeros((h, w), bool)
    mask[max(0, y + y0):max(0, y + y1 + 1), max(0, x + x0):max(0, x + x1 + 1)] = True
    return mask


def visible_cells(mask: np.ndarray, state: SymbolicState, agent: int) -> list[tuple[int, int]]:
    """(x, y) of the cells of `mask` [H, W] the agent sees, nearest first (ties: reading order)."""
    seen = mask & view_mask(state.pos[agent], state.ori[agent], mask.shape)
    ys, xs = np.nonzero(seen)
    x0, y0 = state.pos[agent]
    dist = np.abs(xs - x0) + np.abs(ys - y0)
    order = np.lexsort((xs, ys, dist))
    return [(int(xs[k]), int(ys[k])) for k in order]


def _nearest(cells, pos) -> str:
    parts = [f"({x}, {y}) {abs(x - int(pos[0])) + abs(y - int(pos[1]))}st" for x, y in cells[:NEAREST_SHOWN]]
    return ", nearest " + ", ".join(parts) if parts else ""


def _rows(mask: np.ndarray) -> tuple[int, int]:
    rows = np.nonzero(mask.any(axis=1))[0]
    return int(rows.min()), int(rows.max())


def _direction(y: int, rows: tuple[int, int]) -> str:
    if y > rows[1]:
        return "to your north"
    if y < rows[0]:
        return "to your south"
    return "level with you"


def layout_hint(substrate: Substrate, layout: Layout, pos) -> str:
    x, y = int(pos[0]), int(pos[1])
    if substrate.dirt_layer is not None:
        where = "RIVER" if layout.river[y, x] else "ORCHARD" if layout.orchard[y, x] else "SAND"
        river, orchard = _rows(layout.potential_dirt), _rows(layout.orchard)
        return (f"Layout: {where}. River is {_direction(y, river)} (rows {river[0]}--{river[1]}); "
                f"orchard is {_direction(y, orchard)} (rows {orchard[0]}--{orchard[1]}).")
    where = "PATCH" if layout.patch_id[y, x] >= 0 else "FLOOR"
    patches = _rows(layout.orchard)
    return f"Layout: {where}. Apple patches are {_direction(y, patches)} (rows {patches[0]}--{patches[1]})."


def observation_text(substrate: Substrate, layout: Layout, state: SymbolicState, agent: int,
                     episode_length: int) -> str:
    """The text observation of `agent` (no menu; the option layer appends it)."""
    if not 0 <= agent < state.num_agents:
        raise ValueError(f"agent must be in 0..{state.num_agents - 1}, got {agent}")
    pos = state.pos[agent]
    lines = [f"You are agent {agent} of {state.num_agents}. World position: ({pos[0]}, {pos[1]}). "
             f"Facing: {ORIENTATIONS[state.ori[agent]]}."]
    if not state.alive[agent]:
        lines.append("You have been zapped and are out of play for now.")
    apples = visible_cells(state.apples, state, agent)
    if substrate.dirt_layer is not None:
        dirt = visible_cells(state.dirt, state, agent)
        lines.append(f"Sensors: Dirt visible {len(dirt)}{_nearest(dirt, pos)}. "
                     f"Apples visible {len(apples)}{_nearest(apples, pos)}.")
    else:
        lines.append(f"Sensors: Apples visible {len(apples)}{_nearest(apples, pos)}.")
        alive = [k for k in range(layout.num_patches) if state.patch_apples[k] > 0]
        desc = ", ".join(f"{k} @ ({layout.patch_anchor[k][0]}, {layout.patch_anchor[k][1]}) "
                         f"{state.patch_apples[k]} apples" for k in alive)
        lines.append(f"Patches alive: {len(alive)} of {layout.num_patches}" + (f": {desc}." if desc else "."))
    lines.append(layout_hint(substrate, layout, pos))
    lines.append(f"Step {state.step}/{episode_length}.")
    return "\n".join(lines)

