"""Stage 2 for a Melting Pot library: uniform random over the guardless menu, one record per execution.

Each episode is a pure function of its key (solo or team, its index k within its kind) and the
seed: its engine seed and its random stream come from those alone, and in the isolated process
every episode starts from the same address space (`omjax.envs.meltingpot.isolated`). So the
burn-in of n solo + n team episodes is exactly the first n solo and first n team episodes of any
larger one (`assemble`), and two invocations of one burn-in give the same records.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable

import numpy as np

from omjax.envs.meltingpot import engine
from omjax.envs.meltingpot.adapter import MeltingPotEnv
from omjax.envs.meltingpot.isolated import isolation_available, run_tasks
from omjax.options.meltingpot.executor import Execution, act, advance, start
from omjax.options.meltingpot.library import MPLibrary
from omjax.options.meltingpot.menus import instances_for
from omjax.options.meltingpot.paths import Ctx, make_ctx
from omjax.options.records import NO_TARGET, RecordTable

TEAM_SEED_OFFSET = 500_000
"""Team episode k runs on engine seed `seed * 1_000_003 + TEAM_SEED_OFFSET + k`, solo episode k on
`seed * 1_000_003 + k`: neither depends on how many episodes of the other kind the burn-in has."""
_COLUMNS = ("step", "aid", "opt", "target", "features", "transient", "outcome", "changed")

Key = tuple[bool, int]
"""An episode: (solo, k), the k-th solo or team episode of a burn-in."""


def episode_keys(solo_episodes: int, team_episodes: int) -> list[Key]:
    """The episodes of a burn-in of that size, in record order: solo 0 .. solo-1, then team."""
    if solo_episodes < 0 or team_episodes < 0 or max(solo_episodes, team_episodes) > TEAM_SEED_OFFSET:
        raise ValueError(f"burn-in episode counts must lie in 0..{TEAM_SEED_OFFSET}, "
                         f"got solo {solo_episodes}, team {team_episodes}")
    return [(True, k) for k in range(solo_episodes)] + [(False, k) for k in range(team_episodes)]


def episode_records(lib: MPLibrary, env: MeltingPotEnv, ctx: Ctx, task: tuple[int, int, int]) -> dict:
    """The records (column lists, `_COLUMNS`) of one burn-in episode `task` = (solo 0/1, k, seed).

    Solo episode k has agent `k % A` acting and the others standing still; team episodes have
    every agent acting. Executions still running when the episode ends are not records."""
    solo, k, seed = map(int, task)
    state = env.reset(seed * 1_000_003 + (k if solo else TEAM_SEED_OFFSET + k))
    rng = np.random.default_rng([seed, 7, solo, k])
    acting = [k % ctx.num_agents] if solo else list(range(ctx.num_agents))
    cols = {c: [] for c in _COLUMNS}
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
            for key, val in (("step", ex.step0), ("aid", a), ("opt", ex.inst.opt),
                             ("target", [NO_TARGET, NO_TARGET] if tgt is None else list(tgt)),
                             ("features", ex.features), ("transient", ex.transient),
                             ("outcome", outcome), ("changed", changed)):
                cols[key].append(val)
    return cols


def _setup(lib: MPLibrary, make_env: Callable[[], MeltingPotEnv], regions_of: Callable[[MeltingPotEnv], dict],
           episode_length: int | None) -> tuple[MeltingPotEnv, Ctx]:
    env = make_env()
    if episode_length is not None:
        env.episode_length = int(episode_length)
    return env, make_ctx(env, regions_of(env))


def _in_process(lib: MPLibrary, make_env: Callable[[], MeltingPotEnv], regions_of: Callable[[MeltingPotEnv], dict],
                episode_length: int | None, tasks: list[tuple[int, int, int]]) -> Iterable[dict]:
    """The records of each task, in this process, on one engine that is closed afterwards."""
    env, ctx = _setup(lib, make_env, regions_of, episode_length)
    try:
        for task in tasks:
            yield episode_records(lib, env, ctx, task)
    finally:
        env.close()


def episode_runner(arg: str) -> Callable[[tuple[int, int, int]], dict]:
    """`episode_records` bound to a game's library, engine and context; `arg` is
    "<game module> <variant> <episode length or ->" (the isolated server builds this once)."""
    module, variant, length = arg.split()
    game = importlib.import_module(module).LIBRARY
    lib = game.library(variant)
    env, ctx = _setup(lib, game.env, game.regions, None if length == "-" else int(length))
    engine.pin_luajit_seed()
    return lambda task: episode_records(lib, env, ctx, task)


def episodes(lib: MPLibrary, module: str, variant: str, make_env: Callable[[], MeltingPotEnv],
             regions_of: Callable[[MeltingPotEnv], dict], keys: list[Key], seed: int, progress: bool = True,
             episode_length: int | None = None) -> dict[Key, dict]:
    """Key -> records of the burn-in episodes `keys` of `<module>.LIBRARY`'s `variant` (= `lib`).

    On Linux each runs in a fork of one canonical server (`omjax.envs.meltingpot.isolated`), so
    the records are the same on every invocation and in any company of other episodes; elsewhere
    (or inside such a server) in this process, where they depend on its memory layout."""
    tasks = [(int(solo), k, int(seed)) for solo, k in keys]
    if isolation_available():
        arg = f"{module} {variant} {'-' if episode_length is None else int(episode_length)}"
        results: Iterable[dict] = run_tasks(__name__, "episode_runner", arg, tasks)
    else:
        results = _in_process(lib, make_env, regions_of, episode_length, tasks)
    out, records = {}, 0
    for key, cols in zip(keys, results):
        out[key] = cols
        records += len(cols["step"])
        if progress:
            print(f"\r{lib.name} burn-in: episode {len(out)}/{len(keys)}, {records} records", end="", flush=True)
    if progress:
        print()
    return out


def assemble(lib: MPLibrary, results: dict[Key, dict], solo_episodes: int, team_episodes: int) -> RecordTable:
    """The records of the burn-in of `solo_episodes` + `team_episodes` (`episode_keys`), numbered
    `ep` in that order, from per-episode `results` that hold at least those episodes."""
    cols = {c: [] for c in ("ep", "solo", *_COLUMNS)}
    for ep, key in enumerate(episode_keys(solo_episodes, team_episodes)):
        if key not in results:
            raise ValueError(f"assemble: no records of the {'solo' if key[0] else 'team'} episode {key[1]}")
        n = len(results[key]["step"])
        cols["ep"] += [ep] * n
        cols["solo"] += [key[0]] * n
        for c in _COLUMNS:
            cols[c] += results[key][c]
    if not cols["ep"]:
        return RecordTable.empty(len(lib.schema.read_set), len(lib.schema.transient))
    cols["transient"] = np.asarray(cols["transient"], np.int8).reshape(len(cols["ep"]), len(lib.schema.transient))
    return RecordTable.build(**cols)
