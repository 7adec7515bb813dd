"""Shortest interact plans on a static Overcooked layout, precomputed as lookup tables.

Overcooked movement: action d turns the agent to face d and moves it one cell if that cell is
floor; facing a non-floor cell and pressing INTERACT acts on it. A target (pot, dispenser,
serving station, counter) is acted on from an interact pose: a floor cell next to it, facing it.

For every target t and every pose (x, y, facing) the tables hold the length of the shortest plan
that ends with INTERACT on t (`dist`, INTERACT included) and its first action (`next_action`).
They are computed once per layout by relaxation over the (cell, facing) graph, so one executor
step is a single gather: O(1) and jittable. Unreachable poses have `dist == UNREACHABLE`.

The other agents are not part of the static graph. The executor treats them as dynamic obstacles
by the rule "if the planned move enters a cell another agent stands on now, STAY this step";
NoPath is therefore decided on the static layout only, and a blocked agent just waits, which the
option's timeout turns into a failure if the block persists.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from omjax.envs.overcooked.items import DIR_VEC, Action
from omjax.envs.overcooked.layout import Layout, Terrain

UNREACHABLE = 10_000


@dataclasses.dataclass(frozen=True)
class PlanTables:
    """Plans to T targets on an H x W layout."""

    targets: np.ndarray  # int32 [T, 2] (x, y)
    dist: np.ndarray  # int32 [T, H, W, 4] steps to finish (INTERACT included); UNREACHABLE if none
    next_action: np.ndarray  # int32 [T, H, W, 4] Action of the first step (STAY where unreachable)
    reachable: np.ndarray  # bool [T, H, W] some plan exists from this cell (any facing)


def plan_tables(layout: Layout, targets: np.ndarray) -> PlanTables:
    grid = layout.grid  # [H, W]
    height, width = grid.shape
    floor = grid == Terrain.FLOOR
    targets = np.asarray(targets, np.int32).reshape(-1, 2)
    num_t = len(targets)
    ys, xs = np.meshgrid(np.arange(height), np.arange(width), indexing="ij")  # [H, W]
    # Cell reached by action d from each cell (stay if not floor): [4, H, W].
    succ_y = np.empty((4, height, width), np.int64)
    succ_x = np.empty((4, height, width), np.int64)
    for d, (dx, dy) in enumerate(DIR_VEC):
        ny, nx = np.clip(ys + dy, 0, height - 1), np.clip(xs + dx, 0, width - 1)
        moves = floor[ny, nx]
        succ_y[d] = np.where(moves, ny, ys)
        succ_x[d] = np.where(moves, nx, xs)
    # Poses facing each target: [T, H, W, 4].
    facing_cell_x = xs[None, :, :, None] + DIR_VEC[None, None, None, :, 0]
    facing_cell_y = ys[None, :, :, None] + DIR_VEC[None, None, None, :, 1]
    at_goal = ((facing_cell_x == targets[:, 0, None, None, None])
               & (facing_cell_y == targets[:, 1, None, None, None]) & floor[None, :, :, None])
    dist = np.where(at_goal, 1, UNREACHABLE).astype(np.int64)
    action = np.where(at_goal, int(Action.INTERACT), int(Action.STAY)).astype(np.int64)
    # Bellman relaxation: dist(c, f) = min(1 if facing target, 1 + min_d dist(succ(c, d), d)).
    for _ in range(4 * height * width):
        cand = np.stack([dist[:, succ_y[d], succ_x[d], d] + 1 for d in range(4)], axis=-1)  # [T, H, W, 4(d)]
        best_d = np.argmin(cand, axis=-1)  # ties: N, S, E, W order
        best = np.min(cand, axis=-1)  # [T, H, W]
        better = (best[..., None] < dist) & floor[None, :, :, None]
        if not better.any():
            break
        dist = np.where(better, best[..., None], dist)
        action = np.where(better, best_d[..., None], action)
    dist = np.minimum(dist, UNREACHABLE)
    reachable = (dist < UNREACHABLE).any(axis=-1)
    return PlanTables(targets=targets, dist=dist.astype(np.int32), next_action=action.astype(np.int32),
                      reachable=reachable)
