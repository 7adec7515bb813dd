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


def beam_lanes(pos, ori: int) -> list[list[tuple[int, int]]]:
    """The cleaning beam's three lanes from an avatar at `pos` facing `ori`, cells in firing order."""
    (hx, hy), (rx, ry) = _HEAD[ori], _HEAD[(ori + 1) % 4]
    x, y = int(pos[0]), int(pos[1])
    centre = [(x + k * hx, y + k * hy) for k in range(1, BEAM_LENGTH + 1)]
    sides = [[(x + s * rx + k * hx, y + s * ry + k * hy) for k in range(BEAM_LENGTH)] for s in (-1, 1)]
    return [centre, *sides]


def in_beam(layout: Layout, dirt: np.ndarray, pos, ori: int, target) -> bool:
    """True iff firing from (pos, ori) reaches `target`: it lies in a lane and nothing before it
    in that lane (a wall or another dirt cell) stops the beam."""
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


_POSE_CACHE: dict[tuple, np.ndarray] = {}


def firing_poses(layout: Layout, dirt: np.ndarray, target) -> np.ndarray:
    """bool [4, H, W]: (orientation, cell) poses whose beam reaches `target` (memoised on the
    dirt grid, which changes a few times per episode step at most; treat the result as read-only)."""
    key = (layout.walkable.tobytes(), dirt.tobytes(), int(target[0]), int(target[1]))
    poses = _POSE_CACHE.get(key)
    if poses is None:
        if len(_POSE_CACHE) >= CACHE_SIZE:
            _POSE_CACHE.clear()
        poses = _POSE_CACHE[key] = _firing_poses(layout, dirt, target)
    return poses


def _pose_candidates(target):
    """(orientation, x, y) of every pose whose beam footprint contains `target`."""
    tx, ty = int(target[0]), int(target[1])
    for ori in range(4):
        (hx, hy), (rx, ry) = _HEAD[ori], _HEAD[(ori + 1) % 4]
        for k in range(1, BEAM_LENGTH + 1):
            yield ori, tx - k * hx, ty - k * hy
        for s in (-1, 1):
            for k in range(BEAM_LENGTH):
                yield ori, tx - s * rx - k * hx, ty - s * ry - k * hy


def _firing_poses(layout: Layout, dirt: np.ndarray, target) -> np.ndarray:
    h, w = layout.shape
    poses = np.zeros((4, h, w), bool)
    for ori, x, y in _pose_candidates(target):
        if _inside(layout, x, y) and layout.walkable[y, x] and in_beam(layout, dirt, (x, y), ori, target):
            poses[ori, y, x] = True
    return poses


def has_firing_pose(layout: Layout, dirt: np.ndarray, target, allowed: np.ndarray) -> bool:
    """Whether some firing pose for `target` stands on an `allowed` cell (stops at the first)."""
    for ori, x, y in _pose_candidates(target):
        if _inside(layout, x, y) and allowed[y, x] and layout.walkable[y, x] \
                and in_beam(layout, dirt, (x, y), ori, target):
            return True
    return False


def _others(state: SymbolicState, agent: int) -> set[tuple[int, int]]:
    """Cells held by the other alive avatars."""
    return {(x, y) for a, ((x, y), alive) in enumerate(zip(state.pos.tolist(), state.alive.tolist()))
            if a != agent and alive}


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


def walk_action(ctx: Ctx, state: SymbolicState, agent: int, goal: np.ndarray) -> int | None:
    """First move of a shortest walk into `goal` on the walkable map, or None if the agent
    stands in it, no route exists, or every useful neighbour is occupied.

    Distances from a cell to the goal are read off the precomputed all-pairs table, so a step
    costs five lookups whatever the goal. Partners are avoided locally: if the next cell of every
    shortest route holds another avatar, the agent sidesteps to a free cell no farther from the
    goal, else it waits a step."""
    x, y = (int(v) for v in state.pos[agent])
    if goal[y, x]:
        return None
    goal_idx = np.flatnonzero(goal)
    if not len(goal_idx):
        return None
    h, w = goal.shape
    # Rows: the agent's cell, then its N, E, S, W neighbours (clipped; off-map ones are skipped).
    ys = [y] + [min(max(y + dy, 0), h - 1) for _, dy in _HEAD]
    xs = [x] + [min(max(x + dx, 0), w - 1) for dx, _ in _HEAD]
    near = ctx.dist.reshape(h, w, h * w)[ys, xs][:, goal_idx].min(axis=1).tolist()  # [5]
    here = near[0]
    if here == INF:
        return None
    walkable = ctx.layout.walkable
    occupied = _others(state, agent)
    ori = int(state.ori[agent])
    sidestep = None
    for (dx, dy), there in zip(_HEAD, near[1:]):  # N, E, S, W: deterministic tie-breaking
        nx, ny = x + dx, y + dy
        if not _inside(ctx.layout, nx, ny) or not walkable[ny, nx] or (nx, ny) in occupied:
            continue
        if there < here:
            return relative_move(ctx, ori, (dx, dy))
        if there == here and sidestep is None:
            sidestep = (dx, dy)
    return None if sidestep is None else relative_move(ctx, ori, sidestep)


# ---------------------------------------------------------------------- instances and features
def targets(ctx: Ctx, state: SymbolicState, agent: int) -> dict[str, list[tuple[int, int]]]:
    """Targets of every class for `agent`: visible apples and dirt (nearest first), all patches."""
    view = view_mask(state.pos[agent], int(state.ori[agent]), state.apples.shape)
    out = {}
    for cls, grid in (("apple", state.apples), ("dirt", state.dirt)):
        ys, xs = np.nonzero(grid & view)
        dist = np.abs(xs - state.pos[agent, 0]) + np.abs(ys - state.pos[agent, 1])
        order = np.lexsort((xs, ys, dist))
        out[cls] = [(int(xs[k]), int(ys[k])) for k in order]
    out["patch"] = [(int(x), int(y)) for x, y in ctx.layout.patch_anchor]
    return out


def goal_mask(lib: MPLibrary, ctx: Ctx, state: SymbolicState, opt: int, target) -> np.ndarray:
    """Cells where option `opt`'s walk ends (for `clean`/`approach`: cells of any firing pose)."""
    kind = lib.options[opt]
    shape = ctx.layout.shape
    if kind.kind == "eat":
        goal = np.zeros(shape, bool)
        goal[target[1], target[0]] = True
        return goal
    if kind.kind in ("clean", "approach"):
        return firing_poses(ctx.layout, state.dirt, target).any(axis=0)
    if kind.kind == "goto" and kind.region is not None:
        return ctx.regions[kind.region]
    if kind.kind in ("goto", "patch_eat"):
        patch = ctx.layout.patch_id == ctx.layout.patch_id[target[1], target[0]]
        return patch if kind.kind == "goto" else patch & state.apples
    return np.zeros(shape, bool)


def target_present(lib: MPLibrary, state: SymbolicState, opt: int, target) -> bool:
    kind = lib.options[opt].kind
    if kind == "eat":
        return bool(state.apples[target[1], target[0]])
    if kind in ("clean", "approach"):
        return bool(state.dirt[target[1], target[0]])
    return True


def live_failures(lib: MPLibrary, ctx: Ctx, state: SymbolicState, agent: int, inst: Instance) -> np.ndarray:
    """bool [R]: the typed failures the raw executor would raise for `inst` right now."""
    x, y = state.pos[agent]
    return _live(lib, ctx, state, inst, ctx.component == ctx.component[y, x])


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
        reachable = has_firing_pose(ctx.layout, state.dirt, inst.target, mine)
    elif kind == "eat":
        reachable = bool(mine[inst.target[1], inst.target[0]])
    else:
        reachable = bool(np.any(goal_mask(lib, ctx, state, inst.opt, inst.target) & mine))
    live[Reason.NoPath] = not reachable
    return live


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
    others = [a for a in np.nonzero(state.alive)[0] if a != agent]
    d = np.abs(state.pos[others] - state.pos[agent]).sum(axis=1)
    return "yes" if np.any(d == 1) else "no"


def at(state: SymbolicState, agent: int, grid: np.ndarray) -> bool:
    return bool(grid[state.pos[agent, 1], state.pos[agent, 0]])


def _read_codes(lib: MPLibrary, ctx: Ctx, state: SymbolicState, agent: int, inst: Instance,
                agent_values: dict) -> np.ndarray:
    cls = lib.schema.options[inst.opt].target_class
    values = {**agent_values, **lib.target_features(ctx, state, agent, cls, inst.target)}
    return _codes(lib.schema.read_set, values)


def _effect_codes(lib: MPLibrary, ctx: Ctx, state: SymbolicState, ex: "Execution") -> np.ndarray:
    cls = lib.schema.options[ex.inst.opt].target_class
    return _codes(lib.schema.effect_features, lib.effect_features(ctx, state, ex, cls))


def instances_for(lib: MPLibrary, ctx: Ctx, state: SymbolicState, agent: int) -> list[Instance]:
    return menu_mod.instantiate(lib.schema, targets(ctx, state, agent))


def menu(lib: MPLibrary, ctx: Ctx, state: SymbolicState, agent: int, guards: list[Guard],
         rng: np.random.Generator) -> tuple[list[MenuItem], list[Instance]]:
    """The lettered, guard-filtered, shuffled menu of `agent` and the instance list it indexes."""
    view = targets(ctx, state, agent)
    insts = menu_mod.instantiate(lib.schema, view)
    agent_values = lib.agent_features(ctx, state, agent, view)
    feats = np.stack([_read_codes(lib, ctx, state, agent, i, agent_values) for i in insts])
    x, y = state.pos[agent]
    mine = ctx.component == ctx.component[y, x]
    live = np.stack([_live(lib, ctx, state, i, mine) for i in insts])
    return menu_mod.assemble_menu(lib.schema, guards, insts, feats, live, rng), insts


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


def start(lib: MPLibrary, ctx: Ctx, state: SymbolicState, agent: int, inst: Instance) -> Execution:
    live = live_failures(lib, ctx, state, agent, inst)
    failure = Reason(int(np.argmax(live))) if live.any() else None
    ex = Execution(agent=agent, inst=inst, step0=state.step,
                   features=_read_codes(lib, ctx, state, agent, inst,
                                        lib.agent_features(ctx, state, agent, targets(ctx, state, agent))),
                   transient=_codes(lib.schema.transient, lib.transient_features(ctx, state, agent)),
                   pre=np.zeros(len(lib.schema.effect_features), np.int8), failure=failure)
    return dataclasses.replace(ex, pre=_effect_codes(lib, ctx, state, ex))


def act(lib: MPLibrary, ctx: Ctx, ex: Execution, state: SymbolicState) -> int:
    """The primitive action `ex`'s agent takes in `state` (NOOP when it has nothing to do)."""
    agent = ex.agent
    if ex.failure is not None or not state.alive[agent]:
        return ctx.noop
    kind = lib.options[ex.inst.opt].kind
    if kind == "wait":
        return ctx.noop
    if kind == "fire":
        return ctx.actions["FIRE_CLEAN"]
    target = ex.inst.target
    if kind in ("clean", "approach"):
        poses = firing_poses(ctx.layout, state.dirt, target)
        x, y = (int(v) for v in state.pos[agent])
        ori = int(state.ori[agent])
        if poses[ori, y, x]:
            return ctx.actions["FIRE_CLEAN"] if kind == "clean" else ctx.noop
        if poses[:, y, x].any():
            # Fewest turns (a half turn costs two); ties go to the lower orientation index.
            want = min(np.nonzero(poses[:, y, x])[0], key=lambda o: (min((o - ori) % 4, (ori - o) % 4), o))
            return turn_toward(ctx, ori, int(want))
        move = walk_action(ctx, state, agent, poses.any(axis=0))
        return ctx.noop if move is None else move
    move = walk_action(ctx, state, agent, goal_mask(lib, ctx, state, ex.inst.opt, target))
    return ctx.noop if move is None else move


def _finished(lib: MPLibrary, ctx: Ctx, ex: Execution, state: SymbolicState) -> bool:
    if ex.failure is not None or ex.steps >= MAX_OPTION_STEPS:
        return True
    kind = lib.options[ex.inst.opt].kind
    if kind in ("wait", "fire"):
        return True
    if kind == "clean":
        return ex.fired or not target_present(lib, state, ex.inst.opt, ex.inst.target)
    if kind == "patch_eat":
        return ex.ate > 0 or not goal_mask(lib, ctx, state, ex.inst.opt, ex.inst.target).any()
    if ex.inst.target is not None and not target_present(lib, state, ex.inst.opt, ex.inst.target):
        return True
    x, y = (int(v) for v in state.pos[ex.agent])
    if kind == "approach":
        return bool(firing_poses(ctx.layout, state.dirt, ex.inst.target)[int(state.ori[ex.agent]), y, x])
    return bool(goal_mask(lib, ctx, state, ex.inst.opt, ex.inst.target)[y, x])


def advance(lib: MPLibrary, ctx: Ctx, ex: Execution, action: int, state: SymbolicState
            ) -> tuple[Execution, int | None, bool]:
    """Account for the step `action` -> `state`. Returns (execution, outcome or None while it
    runs, changed): the outcome is SUCCESS / EFFECT_FAIL / EXPLICIT_BASE + reason once it ends;
    `changed` says whether any effect feature moved from its initiation value."""
    agent = ex.agent
    ex = dataclasses.replace(ex, steps=ex.steps + 1, ate=ex.ate + int(state.ate[agent]),
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
    return _finished(lib, ctx, dataclasses.replace(ex, steps=0), state)


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
