"""The §6.4 solo test of trained LLM policies: each agent alone in the kitchen, on held-out seeds.

`SoloOvercookedGame` is the option-menu Overcooked game of the rollout engine with a mask of
acting agents: the others stand still at their start pose and are never asked to decide (the
solo episodes of the burn-in, §5.1). `solo_test_policy` plays every held-out seed once with the
whole team and once per agent alone, through the same engine, prompts and sampling as training,
and returns a `SoloReport` in deliveries.
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from omjax.eval.audits import SoloReport
from omjax.options.menu import MenuItem
from omjax.prompts.memory import Memory


class SoloOvercookedGame:
    """K option-menu Overcooked episodes in which only the agents in `active` act."""

    def __init__(self, layout: str, horizon: int, guards_path: str, active: Sequence[bool]):
        from omjax.options import overcooked as oc
        from omjax.options.synthesis import read_guards
        from omjax.prompts import overcooked as prompts

        self.lib = oc.library(layout)
        self.layout = self.lib.layout
        self.n_agents = self.lib.num_agents
        self.active = np.asarray(active, bool)
        if self.active.shape != (self.n_agents,) or not self.active.any():
            raise ValueError(f"active must flag at least one of the {self.n_agents} agents, got {list(active)}")
        self.horizon = int(horizon)
        self.delivery_reward = self.layout.delivery_reward
        self.guards = read_guards(guards_path, oc.SCHEMA) if guards_path else []
        self._prompts = prompts
        self._system = prompts.system_message(self.n_agents, self.delivery_reward)
        self._wait = int(np.flatnonzero(self.lib.inst_wait)[0])
        lib, acting = self.lib, jnp.asarray(self.active)

        def one(state, ex, choice):
            nxt, ex, _, sparse = lib.option_step(state, ex, choice, acting)
            return nxt, ex, sparse

        self._step = jax.jit(jax.vmap(one))

    def reset(self, seeds: list[int]) -> None:
        from omjax.envs.overcooked.env import initial_state

        k = len(seeds)
        stack = lambda x: jnp.broadcast_to(x, (k,) + x.shape)  # noqa: E731
        self.states = jax.tree.map(stack, initial_state(self.layout))
        self.execs = jax.tree.map(stack, self.lib.init_exec())
        self._host = jax.tree.map(np.asarray, self.states)
        self.deliveries = np.zeros((k, self.n_agents), np.int64)

    def needs_decision(self) -> np.ndarray:
        return (np.asarray(self.execs.inst) < 0) & self.active

    def _state(self, k: int):
        return jax.tree.map(lambda x: x[k], self._host)

    def menu(self, k: int, agent: int, rng: np.random.Generator) -> list[MenuItem]:
        return self.lib.menu(self._state(k), agent, self.guards, rng)

    def fallback(self, k: int, agent: int, menu: list[MenuItem]) -> int:
        return next(pos for pos, item in enumerate(menu) if item.index == self._wait)

    def system_message(self) -> str:
        return self._system

    def user_message(self, k: int, agent: int, menu: list[MenuItem], memory: Memory) -> str:
        return self._prompts.user_message(self.lib, self._state(k), agent, menu, memory, self.horizon)

    def state_label(self, k: int, agent: int) -> str:
        return self._prompts.state_label(self.lib, self._state(k), agent)

    def step(self, choices: np.ndarray) -> np.ndarray:
        self.states, self.execs, sparse = self._step(self.states, self.execs, jnp.asarray(choices, jnp.int32))
        self._host = jax.tree.map(np.asarray, self.states)
        sparse = np.asarray(sparse)  # [K, A]
        self.deliveries += np.round(sparse / self.delivery_reward).astype(np.int64)
        return sparse.sum(axis=1).astype(np.float64)

    def agent_returns(self) -> np.ndarray:
        return self.deliveries.astype(np.float64)


def guards_path_for(env) -> str:
    """The guard file an Overcooked run's menus use: `env.guards`, none, or the shipped one."""
    from omjax.options.registry import guard_path

    if env.guards == "none":
        return ""
    return env.guards or guard_path("overcooked", env.layout)


def solo_test_policy(trainer, bank, seeds: Sequence[int]) -> SoloReport:
    """Team and per-agent-alone deliveries of the policy (`trainer`'s model and decider, `bank`'s
    adapters) on every seed, in the trainer's Overcooked layout and horizon."""
    from omjax.train.rollout import collect

    env = trainer.cfg.env
    if env.game != "overcooked":
        raise ValueError(f"the solo test is defined for Overcooked layouts, not {env.game!r}")
    n = env.n_agents
    conditions = [np.ones(n, bool)] + [np.arange(n) == a for a in range(n)]
    totals = np.zeros((len(conditions), len(seeds)))
    for c, active in enumerate(conditions):
        game = SoloOvercookedGame(env.layout, env.horizon, guards_path_for(env), active)
        for j, seed in enumerate(seeds):
            batch = collect(game, trainer.decider, trainer.model.params, bank, 1, jax.random.PRNGKey(seed), seed, 0)
            totals[c, j] = batch.returns[0] / game.delivery_reward
    return SoloReport(team=totals[0], solo=totals[1:])
