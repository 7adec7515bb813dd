"""Static layout of a substrate, parsed from its ASCII map: walls, river, shore, orchard, patches.

Coordinates are `(x, y)` = (column, row) with row 0 at the top (north), exactly as the engine's
`POSITION` observation reports them; grids are indexed `[y, x]`.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from omjax.envs.meltingpot.engine import Substrate

# Map characters of the two substrates (see CHAR_PREFAB_MAP in their config modules).
_CLEANUP_RIVER = set("SHF~")  # river prefab, with or without a dirt container
_CLEANUP_POTENTIAL_DIRT = set("HF")
_CLEANUP_ORCHARD = set("BT")  # potential_apple
_HARVEST_APPLE = set("A")
# Commons Harvest regrowth: an eaten apple regrows with a probability set by the number of
# uneaten apples within this L2 radius (APPLE_RESPAWN_RADIUS of the config).
HARVEST_REGROWTH_RADIUS = 2.0


@dataclasses.dataclass(frozen=True)
class Layout:
    """Static cell classes of a substrate; every grid is bool [H, W]."""

    walls: np.ndarray
    walkable: np.ndarray  # avatars can stand here (everything but walls in both substrates)
    river: np.ndarray  # clean_up: water cells; empty in Harvest
    potential_dirt: np.ndarray  # clean_up: cells where dirt can appear
    shore: np.ndarray  # walkable land cells 4-adjacent to the river
    orchard: np.ndarray  # cells where apples can grow
    patch_id: np.ndarray  # int16 [H, W]: Harvest patch index, -1 elsewhere
    patch_anchor: np.ndarray  # int32 [P, 2]: (x, y) of each patch's central apple cell

    @property
    def num_patches(self) -> int:
        return len(self.patch_anchor)

    @property
    def shape(self) -> tuple[int, int]:
        return self.walls.shape


def _neighbours4(mask: np.ndarray) -> np.ndarray:
    out = np.zeros_like(mask)
    out[1:, :] |= mask[:-1, :]
    out[:-1, :] |= mask[1:, :]
    out[:, 1:] |= mask[:, :-1]
    out[:, :-1] |= mask[:, 1:]
    return out


def _patches(orchard: np.ndarray, radius: float) -> tuple[np.ndarray, np.ndarray]:
    """Connected components of orchard cells under the regrowth neighbourhood.

    Two apple cells belong to one patch iff regrowth can pass between them (L2 distance within
    `radius`), so an emptied patch can never be regrown from outside: this is the engine's own
    notion of a patch, not a visual one."""
    cells = [tuple(c) for c in np.argwhere(orchard)]  # (y, x), row-major
    patch = np.full(orchard.shape, -1, np.int16)
    anchors = []
    for start in cells:
        if patch[start] >= 0:
            continue
        k = len(anchors)
        stack, members = [start], []
        patch[start] = k
        while stack:
            y, x = stack.pop()
            members.append((y, x))
            for yy, xx in cells:
                if patch[yy, xx] < 0 and (yy - y) ** 2 + (xx - x) ** 2 <= radius ** 2:
                    patch[yy, xx] = k
                    stack.append((yy, xx))
        centre = np.mean(members, axis=0)
        y, x = min(members, key=lambda c: ((c[0] - centre[0]) ** 2 + (c[1] - centre[1]) ** 2, c))
        anchors.append((x, y))
    return patch, np.array(anchors, np.int32).reshape(-1, 2)


def parse_layout(substrate: Substrate) -> Layout:
    grid = np.array([list(r) for r in substrate.ascii_map])
    walls = grid == "W"
    walkable = ~walls
    if substrate.dirt_layer is not None:
        river = np.isin(grid, list(_CLEANUP_RIVER))
        potential_dirt = np.isin(grid, list(_CLEANUP_POTENTIAL_DIRT))
        orchard = np.isin(grid, list(_CLEANUP_ORCHARD))
        patch_id = np.full(grid.shape, -1, np.int16)
        anchors = np.zeros((0, 2), np.int32)
    else:
        river = np.zeros(grid.shape, bool)
        potential_dirt = np.zeros(grid.shape, bool)
        orchard = np.isin(grid, list(_HARVEST_APPLE))
        patch_id, anchors = _patches(orchard, HARVEST_REGROWTH_RADIUS)
    shore = walkable & ~river & _neighbours4(river)
    return Layout(walls=walls, walkable=walkable, river=river, potential_dirt=potential_dirt,
                  shore=shore, orchard=orchard, patch_id=patch_id, patch_anchor=anchors)
