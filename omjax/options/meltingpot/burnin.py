"""Stage 2 for a Melting Pot library: uniform random over the guardless menu, one record per execution."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable

import numpy as np

from omjax.envs.meltingpot.adapter import MeltingPotEnv
from omjax.envs.meltingpot.isolated import isolation_available, run_isolated
from omjax.options.meltingpot.executor import Execution, act, advance, start
from omjax.options.meltingpot.library import MPLibrary
from omjax.options.meltingpot.menus import instances_for
from omjax.options.meltingpot.paths import make_ctx
from omjax.options.records import NO_TARGET, RecordTable, load_npz


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


def isolated_burnin(module: str, variant: str, solo_episodes: int, team_episodes: int, seed: int,
                    progress: bool = True, episode_length: int | None = None) -> RecordTable | None:
    """`<module>.LIBRARY.burnin(...)` (a `MeltingPotGameLibrary`) in a fresh fixed-layout process
    (`omjax.envs.meltingpot.isolated`), so the records are the same on every invocation. None
    where that is unavailable (non-Linux, or already inside one): the caller runs the burn-in itself."""
    if not isolation_available():
        return None
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "records.npz")
        code = ("import importlib, sys; from omjax.options.records import save_npz; "
                "m, v, so, te, se, pr, el, out = sys.argv[1:]; "
                "save_npz(out, importlib.import_module(m).LIBRARY.burnin("
                "v, int(so), int(te), int(se), pr == '1', None if el == '-' else int(el)))")
        run_isolated(code, [module, variant, str(solo_episodes), str(team_episodes), str(seed),
                            "1" if progress else "0", "-" if episode_length is None else str(episode_length), out])
        return load_npz(out)
