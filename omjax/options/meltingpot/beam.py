"""Geometry of Cleanup's cleaning beam: lanes, the beam of every pose on a dirt grid, firing poses."""

from __future__ import annotations

import functools

import numpy as np

from omjax.envs.meltingpot.adapter import SymbolicState
from omjax.envs.meltingpot.layout import Layout
from omjax.options.meltingpot.memo import CACHE_SIZE, state_memo
from omjax.options.meltingpot.paths import HEAD_XY, Ctx

# Cleaning beam of clean_up's Cleaner (beamLength 3, beamRadius 1): the centre lane covers 1..3
# cells ahead, the two side lanes start beside the avatar and cover 0..2 cells ahead.
BEAM_LENGTH = 3


def _inside(layout: Layout, x: int, y: int) -> bool:
    h, w = layout.walls.shape
    return 0 <= x < w and 0 <= y < h


def beam_lanes(pos, ori: int) -> list[list[tuple[int, int]]]:
    """The cleaning beam's three lanes from an avatar at `pos` facing `ori`, cells in firing order."""
    (hx, hy), (rx, ry) = HEAD_XY[ori], HEAD_XY[(ori + 1) % 4]
    x, y = int(pos[0]), int(pos[1])
    centre = [(x + k * hx, y + k * hy) for k in range(1, BEAM_LENGTH + 1)]
    sides = [[(x + s * rx + k * hx, y + s * ry + k * hy) for k in range(BEAM_LENGTH)] for s in (-1, 1)]
    return [centre, *sides]


# Offsets (dx, dy) of the beam's cells from the shooter, [orientation, lane cell j, 2]; lane-major
# (j = 3 * lane + k) in `beam_lanes` order.
_BEAM_OFF = np.array([[c for lane in beam_lanes((0, 0), o) for c in lane] for o in range(4)], np.int64)
_BEAM_PAD = BEAM_LENGTH + 1


@functools.cache
def _beam_cells(h: int, w: int) -> np.ndarray:
    """int [4, 3, BEAM_LENGTH, H*W]: flat index, in the map padded by `_BEAM_PAD`, of lane cell
    (lane, k) of the beam fired from every cell facing each orientation."""
    p, wp = _BEAM_PAD, w + 2 * _BEAM_PAD
    ys, xs = np.divmod(np.arange(h * w), w)
    off = _BEAM_OFF.reshape(4, 3, BEAM_LENGTH, 1, 2)
    return (ys + p + off[..., 1]) * wp + (xs + p + off[..., 0])


def in_beam_reference(layout: Layout, dirt: np.ndarray, pos, ori: int, target) -> bool:
    """`in_beam`, walked lane by lane in Python (the definition the vectorised `BeamMap` is tested against)."""
    target = (int(target[0]), int(target[1]))
    for lane in beam_lanes(pos, ori):
        for x, y in lane:
            if not _inside(layout, x, y) or layout.walls[y, x]:
                break
            if (x, y) == target:
                return True
            if dirt[y, x]:
                break
    return False


class BeamMap:
    """The cleaning beam on one dirt grid, for every pose at once.

    `reach[o, j, y, x]`: firing from (x, y) facing o reaches lane cell j (`_BEAM_OFF`): the cell
    lies on the map, is no wall, and no earlier cell of its lane is off the map, a wall or dirt
    (the first dirt cell of a lane is reached and stops the beam). Built with 36 shifted grid
    ANDs; firing poses of a target are 36 gathers from it."""

    def __init__(self, layout: Layout, dirt: np.ndarray):
        h, w = layout.shape
        p = _BEAM_PAD
        ok = np.zeros((h + 2 * p, w + 2 * p), bool)
        ok[p:p + h, p:p + w] = ~layout.walls
        passes = ok.copy()
        passes[p:p + h, p:p + w] &= ~dirt
        dirt_pad = np.zeros_like(ok)
        dirt_pad[p:p + h, p:p + w] = dirt
        cells = _beam_cells(h, w)  # [4, 3, BEAM_LENGTH, H*W] flat padded index of each lane cell
        reach = ok.ravel()[cells]  # [4, 3, K, HW]
        run = passes.ravel()[cells]
        for k in range(1, BEAM_LENGTH):  # a cell is reached if every earlier cell of its lane lets the beam pass
            run[:, :, k] &= run[:, :, k - 1]
            reach[:, :, k] &= run[:, :, k - 1]
        self.reach = reach.reshape(4, 3 * BEAM_LENGTH, h, w)
        self.hits_dirt = np.any(reach & dirt_pad.ravel()[cells], axis=(1, 2)).reshape(4, h, w)
        self.layout = layout
        self._poses: dict[tuple[int, int], np.ndarray] = {}
        self._goal: dict[tuple[int, int], np.ndarray] = {}

    def in_beam(self, pos, ori: int, target) -> bool:
        dx, dy = int(target[0]) - int(pos[0]), int(target[1]) - int(pos[1])
        j = np.nonzero((_BEAM_OFF[ori, :, 0] == dx) & (_BEAM_OFF[ori, :, 1] == dy))[0]
        return bool(len(j)) and bool(self.reach[ori, j[0], int(pos[1]), int(pos[0])])

    def poses(self, target) -> np.ndarray:
        """bool [4, H, W]: walkable poses whose beam reaches `target` (read-only)."""
        key = (int(target[0]), int(target[1]))
        out = self._poses.get(key)
        if out is None:
            h, w = self.layout.shape
            px = key[0] - _BEAM_OFF[..., 0]
            py = key[1] - _BEAM_OFF[..., 1]
            on = (px >= 0) & (px < w) & (py >= 0) & (py < h)
            o, j = np.nonzero(on)
            px, py = px[on], py[on]
            out = np.zeros((4, h, w), bool)
            out[o, py, px] = self.reach[o, j, py, px] & self.layout.walkable[py, px]
            out.flags.writeable = False
            self._poses[key] = out
        return out

    def goal(self, target) -> np.ndarray:
        """bool [H, W]: cells of any firing pose of `target` (read-only)."""
        key = (int(target[0]), int(target[1]))
        out = self._goal.get(key)
        if out is None:
            out = self._goal[key] = self.poses(key).any(axis=0)
            out.flags.writeable = False
        return out


_BEAM_CACHE: dict[tuple[bytes, bytes], BeamMap] = {}


def beam_map(layout: Layout, dirt: np.ndarray) -> BeamMap:
    """The `BeamMap` of a dirt grid (memoised across steps: dirt changes a few times per step at most)."""
    key = (layout.walls.tobytes(), dirt.tobytes())
    beam = _BEAM_CACHE.get(key)
    if beam is None:
        if len(_BEAM_CACHE) >= CACHE_SIZE:
            _BEAM_CACHE.clear()
        beam = _BEAM_CACHE[key] = BeamMap(layout, dirt)
    return beam


def state_beam(ctx: Ctx, state: SymbolicState) -> BeamMap:
    """`beam_map` of this state's dirt, looked up once per state."""
    memo = state_memo(state)
    beam = memo.get("beam")
    if beam is None:
        beam = memo["beam"] = beam_map(ctx.layout, state.dirt)
    return beam


def in_beam(layout: Layout, dirt: np.ndarray, pos, ori: int, target) -> bool:
    """True iff firing from (pos, ori) reaches `target`: it lies in a lane and nothing before it
    in that lane (a wall or another dirt cell) stops the beam."""
    return beam_map(layout, dirt).in_beam(pos, int(ori), target)


def firing_poses(layout: Layout, dirt: np.ndarray, target) -> np.ndarray:
    """bool [4, H, W]: (orientation, cell) poses whose beam reaches `target` (memoised on the
    dirt grid, which changes a few times per episode step at most; the result is read-only)."""
    return beam_map(layout, dirt).poses(target)


def has_firing_pose(layout: Layout, dirt: np.ndarray, target, allowed: np.ndarray) -> bool:
    """Whether some firing pose for `target` stands on an `allowed` cell."""
    return bool(np.any(beam_map(layout, dirt).poses(target) & allowed[None]))


def dirt_in_beam(ctx: Ctx, state: SymbolicState, agent: int) -> bool:
    """Would firing now, from the agent's pose, hit some dirt."""
    x, y = int(state.pos[agent, 0]), int(state.pos[agent, 1])
    return bool(state_beam(ctx, state).hits_dirt[int(state.ori[agent]), y, x])
