"""K option-level rollouts through the worker pool, the way the trainer drives them."""

from __future__ import annotations

import numpy as np

from omjax.envs.meltingpot import CleanUp, SymbolicState
from omjax.envs.meltingpot.probes import probes_decisions, probes_init, probes_step
from omjax.envs.meltingpot.workers import EnvPool
from omjax.options import cleanup
from omjax.options import meltingpot as mp
from omjax.options.menu import episode_rng
from omjax.games.registry import guard_path
from omjax.options.schema import SUCCESS
from omjax.options.synthesis import read_guards


def test_k_option_rollouts_with_asynchronous_termination():
    k_envs, horizon = 2, 20
    lib = cleanup.LIBRARY.library("lib_a")
    guards = [g for g in read_guards(guard_path("cleanup", "lib_a"), cleanup.LIBRARY.SCHEMA) if g.opt in lib.schema.option_names]
    static = CleanUp()  # layout and action names only; the episodes run in the workers
    ctx = mp.make_ctx(static, cleanup.regions(static))
    agents = ctx.num_agents
    rng = np.random.default_rng(0)
    seeds = [30, 31]
    with EnvPool("cleanup", k_envs, episode_length=horizon) as pool:
        states = pool.reset(seeds)
        probes = [probes_init(s, ctx.layout.shape) for s in states]
        letters = [[episode_rng(seeds[k], a) for a in range(agents)] for k in range(k_envs)]
        running = [[None] * agents for _ in range(k_envs)]
        outcomes, end_steps = [], set()
        while not all(s.done for s in states):
            actions = np.full((k_envs, agents), ctx.noop)
            for k in range(k_envs):
                deciding = np.array([running[k][a] is None for a in range(agents)])
                for a in np.nonzero(deciding)[0]:
                    items, insts = mp.menu(lib, ctx, states[k], a, guards, letters[k][a])
                    assert items and len({it.letter for it in items}) == len(items)
                    running[k][a] = mp.start(lib, ctx, states[k], a, insts[items[rng.integers(len(items))].index])
                probes[k] = probes_decisions(probes[k], deciding)
                for a in range(agents):
                    actions[k, a] = mp.act(lib, ctx, running[k][a], states[k])
            states = pool.step(actions)
            for k in range(k_envs):
                assert isinstance(states[k], SymbolicState)
                probes[k] = probes_step(probes[k], actions[k], states[k], ctx.actions["FIRE_CLEAN"])
                for a in range(agents):
                    ex, outcome, _ = mp.advance(lib, ctx, running[k][a], int(actions[k, a]), states[k])
                    running[k][a] = None if outcome is not None else ex
                    if outcome is not None:
                        outcomes.append(outcome)
                        end_steps.add((k, states[k].step))
    assert all(s.step == horizon for s in states)
    # Options end at different steps for different agents: decisions are spread over the episode.
    assert len({step for _, step in end_steps}) > horizon // 2
    assert sum(o == SUCCESS for o in outcomes) > len(outcomes) // 3
    for p in probes:
        assert 0.0 < p.call_ratio < 1.0
        assert p.visits.sum() == agents * (horizon + 1)
        assert p.fire_clean.sum() > 0
