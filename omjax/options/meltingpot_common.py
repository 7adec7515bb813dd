"""Option machinery shared by the Melting Pot libraries (`cleanup`, `harvest`).

A library is a `MPLibrary`: a `Schema` (the 4-part contract of `omjax.options.schema`) plus, per option,
the executor `kind` and the target class it is instantiated over. This module supplies what the
kinds mean on the real engine's `SymbolicState`:

* instantiation: one instance per target of the class -- `apple` and `dirt`: every apple / dirt
  cell inside the agent's view window (`omjax.envs.meltingpot.text.view_mask`); `patch`: every
  Harvest patch (its anchor cell); target-less options: one instance.
* raw executor (`act`, closed loop: re-planned on every step): shortest walking distances on the
  walkable map (an all-pairs table built once per substrate), a step to a nearer cell that no
  other avatar occupies (else a sidestep, else a wait), moves expressed relative to the facing
  (avatars strafe, so walking never needs a turn), then turns, then the option's final
  primitive. Kinds:
    eat        walk onto the target apple (entering a cell with an apple eats it)
    clean      walk to a firing pose (the target inside the cleaning beam's footprint with a clear
               lane), turn to face, FIRE_CLEAN once
    approach   the same walk and turn, without firing
    fire       FIRE_CLEAN once, where the agent stands
    goto       walk into a goal region (river bank, orchard, open floor) or the target patch
    patch_eat  walk onto the nearest apple of the target patch
    wait       NOOP once
  Explicit failures, checked at initiation only: `TargetAbsent` (the target item is gone) and
  `NoPath` (no route on the static map). A failed initiation costs the agent its step (NOOP).
* termination: the kind's goal reached (after at least one primitive), the target item gone,
  or a timeout of `MAX_OPTION_STEPS` (logged as effect_fail).
* effect: evaluated by `omjax.options.schema.effect_holds` on effect features measured at
  initiation (pre) and at termination (post). Counters are measured relative to the initiation
  (`my_apples` is "more" iff the agent ate during this execution), so every acquire effect is a
  delta: a no-op execution leaves every feature at its initiation value. (The Overcooked library
  takes pre/post around its final INTERACT; here the promised change -- a walk, an apple eaten on
  the way in -- spans the whole execution, so pre is taken at initiation.)

Training-side API (one env, one agent; the trainer loops over its K envs and A agents, see
`omjax.envs.meltingpot`): `menu(lib, ctx, state, agent, guards, rng)`, `start(...)`, `act(...)`,
`advance(...)`. `burnin(...)` is Stage 2 for any library.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable

import numpy as np
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import shortest_path

from omjax.envs.meltingpot.adapter import HEADING, MeltingPotEnv, SymbolicState
from omjax.envs.meltingpot.layout import Layout
from omjax.envs.meltingpot.text import view_mask
from omjax.options import menu as menu_mod
from omjax.options.menu import Instance, MenuItem
from omjax.options.records import NO_TARGET, RecordTable
from omjax.options.schema import EFFECT_FAIL, EXPLICIT_BASE, SUCCESS, Reason, Schema, effect_holds
from omjax.options.synthesis import Guard

# Longer than any walk an option asks for: visible targets lie within 14 steps, regions and
# patches within 34 (the far corner patches of Commons Harvest), plus at most two turns.
MAX_OPTION_STEPS = 40
KINDS = ("eat", "clean", "approach", "fire", "goto", "patch_eat", "wait")
INF = np.iinfo(np.int32).max
# Cleaning beam of clean_up's Cleaner (beamLength 3, beamRadius 1): the centre lane covers 1..3
# cells ahead, the two side lanes start beside the avatar and cover 0..2 cells ahead.
BEAM_LENGTH = 3
CACHE_SIZE = 4096  # memoised firing-pose grids kept before the cache is dropped
_HEAD = tuple((int(d[0]), int(d[1])) for d in HEADING)


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


@dataclasses.dataclass(frozen=True)
class MPOption:
    """How one schema option executes: its kind and, for target-less `goto`, its region."""

    kind: str
    region: str | None = None

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"unknown option kind {self.kind!r}; kinds: {', '.join(KINDS)}")


@dataclasses.dataclass(frozen=True)
class MPLibrary:
    """A Melting Pot option library: schema + executor kinds + feature functions.

    The read set (values at initiation) comes in two parts, so a menu of many targets computes
    the target-independent part once: `agent_features(ctx, state, agent, view)` (`view` is
    `targets(ctx, state, agent)`) and `target_features(ctx, state, agent, target_class, target)`;
    `effect_features(ctx, state, ex, target_class)` -> effect-feature values (pre or post);
    `transient_features(ctx, state, agent)` -> dict of logged-only values.
    """

    name: str
    schema: Schema
    options: tuple[MPOption, ...]
    agent_features: Callable
    target_features: Callable
    effect_features: Callable
    transient_features: Callable

    def __post_init__(self):
        if len(self.options) != len(self.schema.options):
            raise ValueError(f"{self.name}: {len(self.options)} executor kinds for {len(self.schema.options)} options")
        for spec, opt in zip(self.schema.options, self.options):
            wants_target = opt.kind in ("eat", "clean", "approach", "patch_eat") or (
                opt.kind == "goto" and opt.region is None)
            if wants_target != (spec.target_class is not None):
                raise ValueError(f"{self.name}: option {spec.name!r} of kind {opt.kind!r} "
                                 f"{'needs' if wants_target else 'takes no'} target class")

    # Value -> code tables of the three feature sets (cached on the frozen instance).
    @functools.cached_property
    def read_codec(self) -> tuple:
        return _codec(self.schema.read_set)

    @functools.cached_property
    def effect_codec(self) -> tuple:
        return _codec(self.schema.effect_features)

    @functools.cached_property
    def transient_codec(self) -> tuple:
        return _codec(self.schema.transient)

    @functools.cached_property
    def kinds(self) -> tuple[str, ...]:
        return tuple(o.kind for o in self.options)

    @functools.cached_property
    def classes(self) -> tuple[str | None, ...]:
        return tuple(s.target_class for s in self.schema.options)


def make_library(game: str, variant: str, options, read_set, effect_set, transient, agent_features,
                 target_features, effect_features, transient_features) -> MPLibrary:
    """A candidate library `<game>/<variant>`: `options` is a tuple of (OptionSpec, MPOption)
    pairs over the game's shared read / effect / transient feature sets."""
    schema = Schema(game=game, options=tuple(spec for spec, _ in options), read_set=read_set,
                    effect_features=effect_set, transient=transient)
    return MPLibrary(name=f"{game}/{variant}", schema=schema, options=tuple(k for _, k in options),
                     agent_features=agent_features, target_features=target_features,
                     effect_features=effect_features, transient_features=transient_features)


def to_union(union: Schema, lib: MPLibrary, table: RecordTable) -> RecordTable:
    """Records of a candidate library re-indexed to the union schema's option order (what files store)."""
    index = np.array([union.option_index(s.name) for s in lib.schema.options], np.int16)
    return dataclasses.replace(table, opt=index[table.opt])


def own_guards(lib: MPLibrary, guards: list[Guard]) -> list[Guard]:
    """The guards that concern this library's options (a union guard file may hold several libraries)."""
    names = set(lib.schema.option_names)
    return [g for g in guards if g.opt in names]


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
    hx, hy = _HEAD[ori]
    if step == (hx, hy):
        return ctx.actions["FORWARD"]
    if step == (-hx, -hy):
        return ctx.actions["BACKWARD"]
    if step == _HEAD[(ori + 1) % 4]:
        return ctx.actions["STEP_RIGHT"]
    return ctx.actions["STEP_LEFT"]


def turn_toward(ctx: Ctx, ori: int, want: int) -> int:
    return ctx.actions["TURN_LEFT"] if (want - ori) % 4 == 3 else ctx.actions["TURN_RIGHT"]


def _inside(layout: Layout, x: int, y: int) -> bool:
    h, w = layout.walls.shape
    return 0 <= x < w and 0 <= y < h


# ---------------------------------------------------------------------- per-step memo
def _memo(state: SymbolicState) -> dict:
    """A scratch dict living on `state` (one env step): what every agent and option of that step
    shares -- targets, features, occupied cells, beam geometry. States are never mutated in place
    (the adapter makes a new one per step; `dataclasses.replace` starts with an empty memo)."""
    memo = state.__dict__.get("_memo")
    if memo is None:
        memo = {}
        object.__setattr__(state, "_memo", memo)
    return memo


def _lib_memo(state: SymbolicState, lib: MPLibrary) -> dict:
    memo = _memo(state)
    entry = memo.get(id(lib))
    if entry is None or entry[0] is not lib:
        entry = memo[id(lib)] = (lib, {})
    return entry[1]


def _occupied(state: SymbolicState) -> set[tuple[int, int]]:
    """Cells held by alive avatars (an agent's own cell is never one of its neighbours)."""
    memo = _memo(state)
    occ = memo.get("occupied")
    if occ is None:
        occ = memo["occupied"] = {(x, y) for (x, y), alive in zip(state.pos.tolist(), state.alive.tolist()) if alive}
    return occ


# ---------------------------------------------------------------------- cleaning beam
def beam_lanes(pos, ori: int) -> list[list[tuple[int, int]]]:
    """The cleaning beam's three lanes from an avatar at `pos` facing `ori`, cells in firing order."""
    (hx, hy), (rx, ry) = _HEAD[ori], _HEAD[(ori + 1) % 4]
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
    memo = _memo(state)
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


# ---------------------------------------------------------------------- walking
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


def _cell_distance(ctx: Ctx, x: int, y: int) -> np.ndarray:
    """int32 [H, W]: walking steps to the single cell (x, y) (a view of the distance table)."""
    return ctx.dist[y, x]


def _walk(ctx: Ctx, state: SymbolicState, agent: int, dist: np.ndarray) -> int | None:
    """`walk_action` given the goal's distance map."""
    x, y = int(state.pos[agent, 0]), int(state.pos[agent, 1])
    here = int(dist[y, x])
    if here == 0 or here == INF:  # standing in the goal, or no route
        return None
    h, w = dist.shape
    walkable = ctx.layout.walkable
    occupied = _occupied(state)
    ori = int(state.ori[agent])
    sidestep = None
    for dx, dy in _HEAD:  # N, E, S, W: deterministic tie-breaking
        nx, ny = x + dx, y + dy
        if not (0 <= nx < w and 0 <= ny < h) or not walkable[ny, nx] or (nx, ny) in occupied:
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
    return _walk(ctx, state, agent, goal_distance(ctx, goal))


# ---------------------------------------------------------------------- instances and features
def targets(ctx: Ctx, state: SymbolicState, agent: int) -> dict[str, list[tuple[int, int]]]:
    """Targets of every class for `agent`: visible apples and dirt (nearest first), all patches.

    Memoised per state and agent: treat the result as read-only."""
    memo = _memo(state)
    key = ("targets", agent)
    out = memo.get(key)
    if out is not None:
        return out
    view = view_mask(state.pos[agent], int(state.ori[agent]), state.apples.shape)
    out = {}
    for cls, grid in (("apple", state.apples), ("dirt", state.dirt)):
        ys, xs = np.nonzero(grid & view)
        dist = np.abs(xs - state.pos[agent, 0]) + np.abs(ys - state.pos[agent, 1])
        order = np.lexsort((xs, ys, dist))
        out[cls] = list(zip(xs[order].tolist(), ys[order].tolist()))
    anchors = ctx.cache.get("anchors")
    if anchors is None:
        anchors = ctx.cache["anchors"] = [(int(x), int(y)) for x, y in ctx.layout.patch_anchor]
    out["patch"] = anchors
    memo[key] = out
    return out


def _patch_mask(ctx: Ctx, target) -> np.ndarray:
    """bool [H, W]: cells of the patch holding `target` (memoised in `ctx.cache`)."""
    pid = int(ctx.layout.patch_id[target[1], target[0]])
    key = ("patch", pid)
    out = ctx.cache.get(key)
    if out is None:
        out = ctx.cache[key] = ctx.layout.patch_id == pid
        out.flags.writeable = False
    return out


def goal_mask(lib: MPLibrary, ctx: Ctx, state: SymbolicState, opt: int, target) -> np.ndarray:
    """Cells where option `opt`'s walk ends (for `clean`/`approach`: cells of any firing pose).

    The result may be shared: treat it as read-only."""
    kind = lib.options[opt]
    shape = ctx.layout.shape
    if kind.kind == "eat":
        goal = np.zeros(shape, bool)
        goal[target[1], target[0]] = True
        return goal
    if kind.kind in ("clean", "approach"):
        return state_beam(ctx, state).goal(target)
    if kind.kind == "goto" and kind.region is not None:
        return ctx.regions[kind.region]
    if kind.kind in ("goto", "patch_eat"):
        patch = _patch_mask(ctx, target)
        return patch if kind.kind == "goto" else patch & state.apples
    return np.zeros(shape, bool)


def _goal_distance_of(lib: MPLibrary, ctx: Ctx, state: SymbolicState, opt: int, target) -> np.ndarray:
    """`goal_distance` of `goal_mask(...)`, without building single-cell goals."""
    if lib.kinds[opt] == "eat":
        return _cell_distance(ctx, int(target[0]), int(target[1]))
    return goal_distance(ctx, goal_mask(lib, ctx, state, opt, target))


def _in_goal(lib: MPLibrary, ctx: Ctx, state: SymbolicState, opt: int, target, x: int, y: int) -> bool:
    """`goal_mask(...)[y, x]` without building the mask."""
    kind = lib.options[opt]
    if kind.kind == "eat":
        return (x, y) == (int(target[0]), int(target[1]))
    if kind.kind in ("clean", "approach"):
        return bool(state_beam(ctx, state).goal(target)[y, x])
    if kind.kind == "goto" and kind.region is not None:
        return bool(ctx.regions[kind.region][y, x])
    if kind.kind in ("goto", "patch_eat"):
        pid = ctx.layout.patch_id[target[1], target[0]]
        in_patch = ctx.layout.patch_id[y, x] == pid
        return bool(in_patch) if kind.kind == "goto" else bool(in_patch and state.apples[y, x])
    return False


def target_present(lib: MPLibrary, state: SymbolicState, opt: int, target) -> bool:
    kind = lib.options[opt].kind
    if kind == "eat":
        return bool(state.apples[target[1], target[0]])
    if kind in ("clean", "approach"):
        return bool(state.dirt[target[1], target[0]])
    return True


def live_failures(lib: MPLibrary, ctx: Ctx, state: SymbolicState, agent: int, inst: Instance) -> np.ndarray:
    """bool [R]: the typed failures the raw executor would raise for `inst` right now."""
    return _live_memo(lib, ctx, state, agent, inst).copy()


def _live_memo(lib: MPLibrary, ctx: Ctx, state: SymbolicState, agent: int, inst: Instance) -> np.ndarray:
    """`live_failures`, memoised per state (read-only)."""
    memo = _lib_memo(state, lib)
    key = ("live", agent, inst.opt, inst.target)
    live = memo.get(key)
    if live is None:
        live = memo[key] = _live(lib, ctx, state, inst, _component_mask(ctx, state, agent))
        live.flags.writeable = False
    return live


def _component_mask(ctx: Ctx, state: SymbolicState, agent: int) -> np.ndarray:
    """bool [H, W]: the walkable component the agent stands in (memoised per component)."""
    label = int(ctx.component[state.pos[agent, 1], state.pos[agent, 0]])
    key = ("component", label)
    out = ctx.cache.get(key)
    if out is None:
        out = ctx.cache[key] = ctx.component == label
        out.flags.writeable = False
    return out


def _live(lib: MPLibrary, ctx: Ctx, state: SymbolicState, inst: Instance, mine: np.ndarray) -> np.ndarray:
    """`live_failures` given `mine`, the agent's walkable component (bool [H, W])."""
    live = np.zeros(len(Reason), bool)
    if inst.target is not None and not target_present(lib, state, inst.opt, inst.target):
        live[Reason.TargetAbsent] = True
        return live
    kind = lib.options[inst.opt].kind
    if kind in ("wait", "fire"):
        return live
    # A static route exists iff some goal cell lies in the agent's walkable component.
    if kind in ("clean", "approach"):
        reachable = bool(np.any(state_beam(ctx, state).poses(inst.target) & mine[None]))
    elif kind == "eat":
        reachable = bool(mine[inst.target[1], inst.target[0]])
    elif kind == "goto":  # a static goal: memoised per goal and component
        goal = goal_mask(lib, ctx, state, inst.opt, inst.target)
        key = ("reachable", id(goal), mine.tobytes())
        hit = ctx.cache.get(key)
        if hit is None or hit[0] is not goal:
            hit = ctx.cache[key] = (goal, bool(np.any(goal & mine)))
        reachable = hit[1]
    else:
        reachable = bool(np.any(goal_mask(lib, ctx, state, inst.opt, inst.target) & mine))
    live[Reason.NoPath] = not reachable
    return live


def _codec(features) -> tuple:
    return tuple((f, {v: i for i, v in enumerate(f.values)}) for f in features)


def _encode(codec: tuple, values: dict) -> np.ndarray:
    out = []
    for f, table in codec:
        v = values[f.name]
        c = table.get(v)
        out.append(f.code(v) if c is None else c)  # f.code raises the usual error
    return np.array(out, np.int8)


def _codes(features, values: dict) -> np.ndarray:
    return np.array([f.code(values[f.name]) for f in features], np.int8)


def dist_bucket(state: SymbolicState, agent: int, target) -> str:
    """Manhattan distance agent -> target as a read-set value (`none` for target-less options)."""
    if target is None:
        return "none"
    d = abs(int(target[0]) - int(state.pos[agent, 0])) + abs(int(target[1]) - int(state.pos[agent, 1]))
    return "0" if d == 0 else "1" if d == 1 else "2-3" if d <= 3 else "4-6" if d <= 6 else "7+"


DIST_VALUES = ("none", "0", "1", "2-3", "4-6", "7+")


def partner_adjacent(state: SymbolicState, agent: int) -> str:
    """Transient: is another alive avatar on a 4-neighbour cell."""
    x, y = int(state.pos[agent, 0]), int(state.pos[agent, 1])
    occ = _occupied(state)
    return "yes" if any((x + dx, y + dy) in occ for dx, dy in _HEAD) else "no"


def at(state: SymbolicState, agent: int, grid: np.ndarray) -> bool:
    return bool(grid[state.pos[agent, 1], state.pos[agent, 0]])


def partner_transient(ctx: Ctx, state: SymbolicState, agent: int) -> dict[str, str]:
    """The transient features both Melting Pot games log: `partner_adjacent`."""
    return {"partner_adjacent": partner_adjacent(state, agent)}


def common_effects(state: SymbolicState, ex: "Execution", cls: str | None) -> dict[str, str]:
    """Effect features both games share: `my_apples` (ate during the execution), `at_target`,
    `tgt_apple` (present / absent; none without an apple target)."""
    a, tgt = ex.agent, ex.inst.target
    return {
        "my_apples": "more" if ex.ate > 0 else "same",
        "at_target": "yes" if tgt is not None and tuple(state.pos[a]) == tuple(tgt) else "no",
        "tgt_apple": ("present" if state.apples[tgt[1], tgt[0]] else "absent") if cls == "apple" else "none",
    }


def _agent_values(lib: MPLibrary, ctx: Ctx, state: SymbolicState, agent: int) -> dict:
    memo = _lib_memo(state, lib)
    key = ("agent", agent)
    values = memo.get(key)
    if values is None:
        values = memo[key] = lib.agent_features(ctx, state, agent, targets(ctx, state, agent))
    return values


def _read_codes(lib: MPLibrary, ctx: Ctx, state: SymbolicState, agent: int, inst: Instance,
                agent_values: dict | None = None) -> np.ndarray:
    """int8 [F] read-set codes of `inst` for `agent` (they depend on the target class and target
    only, so options sharing a class share them; memoised per state)."""
    cls = lib.classes[inst.opt]
    memo = _lib_memo(state, lib)
    key = ("read", agent, cls, inst.target)
    codes = memo.get(key)
    if codes is None:
        if agent_values is None:
            agent_values = _agent_values(lib, ctx, state, agent)
        values = {**agent_values, **lib.target_features(ctx, state, agent, cls, inst.target)}
        codes = memo[key] = _encode(lib.read_codec, values)
        codes.flags.writeable = False
    return codes


def _transient_codes(lib: MPLibrary, ctx: Ctx, state: SymbolicState, agent: int) -> np.ndarray:
    memo = _lib_memo(state, lib)
    key = ("transient", agent)
    codes = memo.get(key)
    if codes is None:
        codes = memo[key] = _encode(lib.transient_codec, lib.transient_features(ctx, state, agent))
        codes.flags.writeable = False
    return codes


def _effect_codes(lib: MPLibrary, ctx: Ctx, state: SymbolicState, ex: "Execution") -> np.ndarray:
    return _encode(lib.effect_codec, lib.effect_features(ctx, state, ex, lib.classes[ex.inst.opt]))


def instances_for(lib: MPLibrary, ctx: Ctx, state: SymbolicState, agent: int) -> list[Instance]:
    return menu_mod.instantiate(lib.schema, targets(ctx, state, agent))


def menu_arrays(lib: MPLibrary, ctx: Ctx, state: SymbolicState, agent: int
                ) -> tuple[list[Instance], np.ndarray, np.ndarray]:
    """(instances, feats int8 [I, F], live bool [I, R]) of `agent`'s guardless menu: what the
    guard evaluators (`menu.hidden_mask`, `menu.hidden_mask_jax`) read."""
    insts = instances_for(lib, ctx, state, agent)
    agent_values = _agent_values(lib, ctx, state, agent)
    feats = np.empty((len(insts), len(lib.schema.read_set)), np.int8)
    live = np.empty((len(insts), len(Reason)), bool)
    for i, inst in enumerate(insts):
        feats[i] = _read_codes(lib, ctx, state, agent, inst, agent_values)
        live[i] = _live_memo(lib, ctx, state, agent, inst)
    return insts, feats, live


def menu(lib: MPLibrary, ctx: Ctx, state: SymbolicState, agent: int, guards: list[Guard],
         rng: np.random.Generator) -> tuple[list[MenuItem], list[Instance]]:
    """The lettered, guard-filtered, shuffled menu of `agent` and the instance list it indexes."""
    insts, feats, live = menu_arrays(lib, ctx, state, agent)
    return menu_mod.assemble_menu(lib.schema, guards, insts, feats, live, rng), insts


@dataclasses.dataclass(frozen=True)
class MenuBatch:
    """Guardless menus of many (state, agent) decisions as padded arrays, for the JAX evaluator.

    N decisions, I = the longest instance list; row n's first `count[n]` slots are its instances."""

    instances: list[list[Instance]]
    inst_opt: np.ndarray  # int32 [N, I]
    feats: np.ndarray  # int8 [N, I, F]
    live: np.ndarray  # bool [N, I, R]
    valid: np.ndarray  # bool [N, I]


def menu_batch(lib: MPLibrary, ctx: Ctx, decisions) -> MenuBatch:
    """`menu_arrays` of every (state, agent) in `decisions`, padded into one `MenuBatch`."""
    rows = [menu_arrays(lib, ctx, state, agent) for state, agent in decisions]
    n, i_max = len(rows), max((len(r[0]) for r in rows), default=0)
    inst_opt = np.zeros((n, i_max), np.int32)
    feats = np.zeros((n, i_max, len(lib.schema.read_set)), np.int8)
    live = np.zeros((n, i_max, len(Reason)), bool)
    valid = np.zeros((n, i_max), bool)
    for k, (insts, f, lv) in enumerate(rows):
        m = len(insts)
        inst_opt[k, :m] = [inst.opt for inst in insts]
        feats[k, :m], live[k, :m], valid[k, :m] = f, lv, True
    return MenuBatch([r[0] for r in rows], inst_opt, feats, live, valid)


def hidden_mask_batch_jax(table: "menu_mod.GuardTable", batch: MenuBatch):
    """bool [N, I]: `menu.hidden_mask_jax` of every row of `batch` in one jitted call (instance
    lists differ per decision, so the option index is batched too); padding slots are False."""
    import jax  # noqa: PLC0415

    hidden = _hidden_batch_fn()(table, batch.inst_opt, batch.feats, batch.live)
    return np.asarray(jax.device_get(hidden)) & batch.valid


@functools.cache
def _hidden_batch_fn():
    import jax  # noqa: PLC0415

    return jax.jit(jax.vmap(menu_mod.hidden_mask_jax, in_axes=(None, 0, 0, 0)))


# ---------------------------------------------------------------------- executions
@dataclasses.dataclass(frozen=True)
class Execution:
    """One running option of one agent (call-and-return: it runs until `advance` ends it)."""

    agent: int
    inst: Instance
    step0: int  # env step at initiation
    features: np.ndarray  # int8 [F] read set at initiation
    transient: np.ndarray  # int8 [G]
    pre: np.ndarray  # int8 [E] effect features at initiation
    failure: Reason | None  # explicit failure at initiation: the execution is a single NOOP
    steps: int = 0  # primitives emitted
    ate: int = 0  # apples this agent ate during the execution
    cleaned: int = 0  # dirt cells this agent cleaned during the execution
    fired: bool = False  # the final FIRE_CLEAN has been emitted


def _evolve(ex: Execution, **changes) -> Execution:
    """`dataclasses.replace` for Execution without re-running __init__ (a hot path)."""
    new = object.__new__(Execution)
    new.__dict__.update(ex.__dict__)
    new.__dict__.update(changes)
    return new


def start(lib: MPLibrary, ctx: Ctx, state: SymbolicState, agent: int, inst: Instance) -> Execution:
    live = _live_memo(lib, ctx, state, agent, inst)
    failure = Reason(int(np.argmax(live))) if live.any() else None
    ex = Execution(agent=agent, inst=inst, step0=state.step,
                   features=_read_codes(lib, ctx, state, agent, inst).copy(),
                   transient=_transient_codes(lib, ctx, state, agent).copy(),
                   pre=np.zeros(len(lib.schema.effect_features), np.int8), failure=failure)
    return _evolve(ex, pre=_effect_codes(lib, ctx, state, ex))


def act(lib: MPLibrary, ctx: Ctx, ex: Execution, state: SymbolicState) -> int:
    """The primitive action `ex`'s agent takes in `state` (NOOP when it has nothing to do)."""
    agent = ex.agent
    if ex.failure is not None or not state.alive[agent]:
        return ctx.noop
    kind = lib.kinds[ex.inst.opt]
    if kind == "wait":
        return ctx.noop
    if kind == "fire":
        return ctx.actions["FIRE_CLEAN"]
    target = ex.inst.target
    if kind in ("clean", "approach"):
        beam = state_beam(ctx, state)
        poses = beam.poses(target)
        x, y = int(state.pos[agent, 0]), int(state.pos[agent, 1])
        ori = int(state.ori[agent])
        if poses[ori, y, x]:
            return ctx.actions["FIRE_CLEAN"] if kind == "clean" else ctx.noop
        if poses[:, y, x].any():
            # Fewest turns (a half turn costs two); ties go to the lower orientation index.
            want = min(np.nonzero(poses[:, y, x])[0], key=lambda o: (min((o - ori) % 4, (ori - o) % 4), o))
            return turn_toward(ctx, ori, int(want))
        move = _walk(ctx, state, agent, goal_distance(ctx, beam.goal(target)))
        return ctx.noop if move is None else move
    move = _walk(ctx, state, agent, _goal_distance_of(lib, ctx, state, ex.inst.opt, target))
    return ctx.noop if move is None else move


def _finished(lib: MPLibrary, ctx: Ctx, ex: Execution, state: SymbolicState) -> bool:
    if ex.failure is not None or ex.steps >= MAX_OPTION_STEPS:
        return True
    kind = lib.kinds[ex.inst.opt]
    if kind in ("wait", "fire"):
        return True
    if kind == "clean":
        return ex.fired or not target_present(lib, state, ex.inst.opt, ex.inst.target)
    if kind == "patch_eat":
        return ex.ate > 0 or not bool(np.any(_patch_mask(ctx, ex.inst.target) & state.apples))
    if ex.inst.target is not None and not target_present(lib, state, ex.inst.opt, ex.inst.target):
        return True
    x, y = int(state.pos[ex.agent, 0]), int(state.pos[ex.agent, 1])
    if kind == "approach":
        return bool(state_beam(ctx, state).poses(ex.inst.target)[int(state.ori[ex.agent]), y, x])
    return _in_goal(lib, ctx, state, ex.inst.opt, ex.inst.target, x, y)


def advance(lib: MPLibrary, ctx: Ctx, ex: Execution, action: int, state: SymbolicState
            ) -> tuple[Execution, int | None, bool]:
    """Account for the step `action` -> `state`. Returns (execution, outcome or None while it
    runs, changed): the outcome is SUCCESS / EFFECT_FAIL / EXPLICIT_BASE + reason once it ends;
    `changed` says whether any effect feature moved from its initiation value."""
    agent = ex.agent
    ex = _evolve(ex, steps=ex.steps + 1, ate=ex.ate + int(state.ate[agent]),
                 cleaned=ex.cleaned + int(state.cleaned[agent]),
                 fired=ex.fired or action == ctx.actions.get("FIRE_CLEAN", -1))
    if not _finished(lib, ctx, ex, state):
        return ex, None, False
    post = _effect_codes(lib, ctx, state, ex)
    changed = bool(np.any(post != ex.pre))
    if ex.failure is not None:
        return ex, EXPLICIT_BASE + int(ex.failure), changed
    ok = ex.steps < MAX_OPTION_STEPS or _finished_before_timeout(lib, ctx, ex, state)
    if ok and effect_holds(lib.schema, ex.inst.opt, ex.pre, post):
        return ex, SUCCESS, changed
    return ex, EFFECT_FAIL, changed


def _finished_before_timeout(lib: MPLibrary, ctx: Ctx, ex: Execution, state: SymbolicState) -> bool:
    """At the step limit, an execution that also met its own goal on that step is not a timeout."""
    return _finished(lib, ctx, _evolve(ex, steps=0), state)


# ---------------------------------------------------------------------- burn-in (Stage 2)
def burnin(lib: MPLibrary, make_env: Callable[[], MeltingPotEnv], regions_of: Callable[[MeltingPotEnv], dict],
           solo_episodes: int, team_episodes: int, seed: int, progress: bool = True,
           episode_length: int | None = None) -> RecordTable:
    """Uniform random over the instantiated, guardless menu; one record per completed execution.

    Episode `ep` runs on engine seed `seed * 1_000_003 + ep`; solo episodes (first) have agent
    `ep % A` acting and the others standing still, team episodes have every agent acting.
    Executions still running when the episode ends are not records (they never completed)."""
    env = make_env()
    if episode_length is not None:
        env.episode_length = int(episode_length)
    ctx = make_ctx(env, regions_of(env))
    rng = np.random.default_rng([int(seed), 7])
    cols = {k: [] for k in ("ep", "step", "aid", "opt", "target", "features", "transient", "outcome",
                            "solo", "changed")}
    episodes = [(ep, True) for ep in range(solo_episodes)]
    episodes += [(solo_episodes + ep, False) for ep in range(team_episodes)]
    for ep, solo in episodes:
        state = env.reset(int(seed) * 1_000_003 + ep)
        acting = [ep % ctx.num_agents] if solo else list(range(ctx.num_agents))
        running: dict[int, Execution] = {}
        while not state.done:
            actions = np.full(ctx.num_agents, ctx.noop, np.int64)
            for a in acting:
                if a not in running and state.alive[a]:
                    insts = instances_for(lib, ctx, state, a)
                    running[a] = start(lib, ctx, state, a, insts[rng.integers(len(insts))])
                if a in running:
                    actions[a] = act(lib, ctx, running[a], state)
            state = env.step(actions)
            for a, ex in list(running.items()):
                ex, outcome, changed = advance(lib, ctx, ex, int(actions[a]), state)
                if outcome is None:
                    running[a] = ex
                    continue
                del running[a]
                tgt = ex.inst.target
                for key, val in (("ep", ep), ("step", ex.step0), ("aid", a), ("opt", ex.inst.opt),
                                 ("target", [NO_TARGET, NO_TARGET] if tgt is None else list(tgt)),
                                 ("features", ex.features), ("transient", ex.transient),
                                 ("outcome", outcome), ("solo", solo), ("changed", changed)):
                    cols[key].append(val)
        if progress:
            print(f"\r{lib.name} burn-in: episode {ep + 1}/{len(episodes)}, {len(cols['ep'])} records",
                  end="", flush=True)
    if progress:
        print()
    env.close()
    if not cols["ep"]:
        return RecordTable.empty(len(lib.schema.read_set), len(lib.schema.transient))
    cols["transient"] = np.asarray(cols["transient"], np.int8).reshape(len(cols["ep"]), len(lib.schema.transient))
    return RecordTable.build(**cols)


ADDR_NO_RANDOMIZE = 0x0040000  # personality(2) flag: this process's address space is not randomised


# Sets the flag, then re-executes the interpreter (the flag survives exec) on the real command:
# no preexec_fn, so a multithreaded parent (JAX) never runs Python code in a forked child.
_NO_ASLR_LAUNCHER = ("import ctypes, os, sys; ctypes.CDLL(None).personality(%d); "
                     "os.execv(sys.executable, [sys.executable] + sys.argv[1:])" % ADDR_NO_RANDOMIZE)


def isolated_burnin(game: str, variant: str, solo_episodes: int, team_episodes: int, seed: int,
                    progress: bool = True, episode_length: int | None = None) -> RecordTable | None:
    """`<game>.burnin(...)` run in a fresh Python process with a fixed memory layout (no address
    randomisation, PYTHONHASHSEED=0, a single thread), so the records are the same on every invocation.

    With LuaJIT's PRNG pinned (`engine.pin_luajit_seed`) most episodes already are pure functions
    of their seed, but LuaJIT's first address probe still meets the process's randomised memory
    map now and then, and object-keyed Lua tables iterate in address order; a fresh process with
    a fixed layout removes that last source. Falls back to this process where personality(2) is
    unavailable (non-Linux): None, and the caller runs the burn-in itself."""
    import os  # noqa: PLC0415
    import subprocess  # noqa: PLC0415
    import sys  # noqa: PLC0415
    import tempfile  # noqa: PLC0415

    from omjax.options.records import load_npz  # noqa: PLC0415

    if not sys.platform.startswith("linux") or os.environ.get("OMJAX_BURNIN_CHILD") == "1":
        return None
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "records.npz")
        code = ("import sys; from omjax.options.registry import load_game; from omjax.options.records import save_npz; "
                "g, v, so, te, se, pr, el, out = sys.argv[1:]; "
                "save_npz(out, load_game(g).burnin(v, int(so), int(te), int(se), pr == '1', None if el == '-' else int(el)))")
        # One thread: a BLAS / OpenMP worker that mallocs maps its arena whenever it gets scheduled,
        # which moves LuaJIT's later mappings, and with them Lua's object-keyed iteration order.
        env = {**os.environ, "PYTHONHASHSEED": "0", "OMJAX_BURNIN_CHILD": "1", "OPENBLAS_NUM_THREADS": "1",
               "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        subprocess.run([sys.executable, "-c", _NO_ASLR_LAUNCHER, "-c", code, game, variant, str(solo_episodes),
                        str(team_episodes), str(seed),
                        "1" if progress else "0", "-" if episode_length is None else str(episode_length), out],
                       check=True, env=env)
        return load_npz(out)


def start_menu(lib: MPLibrary, env: MeltingPotEnv, regions: dict, seed: int, agent: int,
               guards: list[Guard]) -> list[MenuItem]:
    """The menu `agent` sees at the start of the episode seeded `seed` (letters: `episode_rng`)."""
    if not 0 <= agent < env.num_agents:
        raise ValueError(f"agent must be in 0..{env.num_agents - 1}, got {agent}")
    state = env.reset(seed)
    ctx = make_ctx(env, regions)
    items, _ = menu(lib, ctx, state, agent, guards, menu_mod.episode_rng(seed, agent))
    env.close()
    return items
