"""Static substrate facts and walking: all-pairs shortest paths, goal distance maps, moves.

Shortest walking distances on the walkable map come from an all-pairs table built once per
substrate; a step goes to a nearer cell that no other avatar occupies (else a sidestep, else a
wait), expressed relative to the facing (avatars strafe, so walking never needs a turn).
"""

from __future__ import annotations

import dataclasses

import numpy as np
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import shortest_path

from omjax.envs.meltingpot.adapter import HEADING, MeltingPotEnv, SymbolicState
from omjax.envs.meltingpot.layout import Layout
from omjax.options.meltingpot.memo import CACHE_SIZE, occupied

INF = np.iinfo(np.int32).max
HEAD_XY = tuple((int(d[0]), int(d[1])) for d in HEADING)
"""(dx, dy) of each orientation: N, E, S, W."""


@dataclasses.dataclass(frozen=True)
class Ctx:
    """Static facts of one substrate that executors and features need."""

    layout: Layout
    actions: dict[str, int]  # primitive name -> env action index
    num_agents: int
    episode_length: int
    regions: dict[str, np.ndarray]  # goal regions of `goto` options without a target, bool [H, W]
    component: np.ndarray  # int32 [H, W] connected component of each walkable cell (-1: wall)
    dist: np.ndarray  # int32 [H, W, H, W] static walking distance between any two cells
    cache: dict = dataclasses.field(default_factory=dict, compare=False, repr=False)
    """distance-to-goal maps (`goal_distance`), shared by every agent, option and step"""

    @property
    def noop(self) -> int:
        return self.actions["NOOP"]


def make_ctx(env: MeltingPotEnv, regions: dict[str, np.ndarray]) -> Ctx:
    dist = all_pairs_distance(env.layout.walkable)
    return Ctx(layout=env.layout, actions={n: i for i, n in enumerate(env.substrate.action_names)},
               num_agents=env.num_agents, episode_length=env.episode_length, regions=regions,
               component=components(env.layout.walkable, dist), dist=dist)


def components(walkable: np.ndarray, dist: np.ndarray) -> np.ndarray:
    """int32 [H, W]: component label (its smallest cell index) of each walkable cell, -1 elsewhere."""
    h, w = walkable.shape
    reach = dist.reshape(h * w, h * w) < INF
    label = np.where(walkable.ravel(), np.argmax(reach, axis=1), -1)
    return label.reshape(h, w).astype(np.int32)


def relative_move(ctx: Ctx, ori: int, step) -> int:
    """The move action that displaces an avatar facing `ori` by `step` (dx, dy)."""
    step = (int(step[0]), int(step[1]))
    hx, hy = HEAD_XY[ori]
    if step == (hx, hy):
        return ctx.actions["FORWARD"]
    if step == (-hx, -hy):
        return ctx.actions["BACKWARD"]
    if step == HEAD_XY[(ori + 1) % 4]:
        return ctx.actions["STEP_RIGHT"]
    return ctx.actions["STEP_LEFT"]


def turn_toward(ctx: Ctx, ori: int, want: int) -> int:
    return ctx.actions["TURN_LEFT"] if (want - ori) % 4 == 3 else ctx.actions["TURN_RIGHT"]


def all_pairs_distance(walkable: np.ndarray) -> np.ndarray:
    """int32 [H, W, H, W]: walking steps between every two cells of the static map (INF across
    walls or between components). Computed once per substrate (a BFS per cell, in C)."""
    h, w = walkable.shape
    idx = np.arange(h * w).reshape(h, w)
    pairs = [(idx[:, :-1], idx[:, 1:], walkable[:, :-1] & walkable[:, 1:]),
             (idx[:-1, :], idx[1:, :], walkable[:-1, :] & walkable[1:, :])]
    src = np.concatenate([a[m] for a, _, m in pairs])
    dst = np.concatenate([b[m] for _, b, m in pairs])
    graph = coo_matrix((np.ones(len(src)), (src, dst)), shape=(h * w, h * w)).tocsr()
    dist = shortest_path(graph, method="D", directed=False, unweighted=True)
    dist = np.where(np.isfinite(dist), dist, INF).astype(np.int64).clip(max=INF).astype(np.int32)
    return dist.reshape(h, w, h, w)


def goal_distance(ctx: Ctx, goal: np.ndarray) -> np.ndarray:
    """int32 [H, W]: walking steps from every cell to the nearest cell of `goal` (INF: none
    reachable). Memoised on the goal grid in `ctx.cache`, so all agents, options and steps
    walking to the same goal share one map (the distance table is symmetric)."""
    key = goal.tobytes()
    out = ctx.cache.get(key)
    if out is None:
        h, w = goal.shape
        idx = np.flatnonzero(goal)
        if len(idx):
            out = ctx.dist.reshape(h * w, h * w)[idx].min(axis=0).reshape(h, w)
        else:
            out = np.full((h, w), INF, np.int32)
        if len(ctx.cache) >= CACHE_SIZE:
            ctx.cache.clear()
        out.flags.writeable = False
        ctx.cache[key] = out
    return out


def cell_distance(ctx: Ctx, x: int, y: int) -> np.ndarray:
    """int32 [H, W]: walking steps to the single cell (x, y) (a view of the distance table)."""
    return ctx.dist[y, x]


def walk_step(ctx: Ctx, state: SymbolicState, agent: int, dist: np.ndarray) -> int | None:
    """`walk_action` given the goal's distance map."""
    x, y = int(state.pos[agent, 0]), int(state.pos[agent, 1])
    here = int(dist[y, x])
    if here == 0 or here == INF:  # standing in the goal, or no route
        return None
    h, w = dist.shape
    walkable = ctx.layout.walkable
    taken = occupied(state)
    ori = int(state.ori[agent])
    sidestep = None
    for dx, dy in HEAD_XY:  # N, E, S, W: deterministic tie-breaking
        nx, ny = x + dx, y + dy
        if not (0 <= nx < w and 0 <= ny < h) or not walkable[ny, nx] or (nx, ny) in taken:
            continue
        there = int(dist[ny, nx])
        if there < here:
            return relative_move(ctx, ori, (dx, dy))
        if there == here and sidestep is None:
            sidestep = (dx, dy)
    return None if sidestep is None else relative_move(ctx, ori, sidestep)


def walk_action(ctx: Ctx, state: SymbolicState, agent: int, goal: np.ndarray) -> int | None:
    """First move of a shortest walk into `goal` on the walkable map, or None if the agent
    stands in it, no route exists, or every useful neighbour is occupied.

    Distances to the goal come from `goal_distance` (one map per goal, shared), so a step costs
    five lookups. Partners are avoided locally: if the next cell of every shortest route holds
    another avatar, the agent sidesteps to a free cell no farther from the goal, else it waits a
    step."""
    return walk_step(ctx, state, agent, goal_distance(ctx, goal))
