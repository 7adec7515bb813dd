"""Overcooked under the ablation interfaces, as `Game`s of the rollout engine (`omjax.train.games`).

* `NativeOvercookedGame` (`policy.action_interface: native`): every agent decides at every env
  step; its "menu" is the fixed primitive action set A-F (N, S, E, W, STAY, INTERACT), never
  filtered or shuffled, and the chosen action is applied for one step.
* `CompoundOvercookedGame` (`policy.action_interface: compound_json`): the prompt lists the
  option vocabulary instead of a menu; the reply is parsed as `{"action": ..., "args": ...}` into
  an instance of the guardless instantiation and executed with the option executor. Invalid
  emissions fall back to `wait`; invalid and no-op emissions are counted per agent.

Both keep per-agent counters the evaluation reads: deliveries, invalid and no-op emissions.
Importing this module registers both with `omjax.train.games.register_game`.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from omjax.config import EnvConfig
from omjax.envs.overcooked.env import initial_state, transition
from omjax.envs.overcooked.items import DIR_VEC, Item
from omjax.envs.overcooked.layout import Terrain
from omjax.interfaces.compound_json import OUTPUT_FORMAT, EmissionLedger, render_vocabulary
from omjax.interfaces.native import native_action_set
from omjax.options import menu as menu_mod
from omjax.options.menu import MenuItem
from omjax.options.overcooked import library
from omjax.prompts import overcooked as prompts
from omjax.prompts.memory import Memory
from omjax.train.games import register_game

_NATIVE_SYSTEM_TAIL = (
    "Each turn you choose ONE primitive action, applied for one step: the move letters turn you to "
    "face that way and step if the cell is free; interact acts on the cell you face. Pick one letter."
)
_COMPOUND_SYSTEM_TAIL = (
    "Each time your previous action has finished you choose the next one by writing a JSON object "
    "naming an action and its target cell. It is executed only if it is valid; nothing filters "
    "the actions for you."
)


def delivered_by_agent(layout, state, next_state) -> jax.Array:
    """bool [A]: which agents delivered a soup in this step.

    A soup leaves an agent's hands while it faces a serving cell only by being delivered.
    """
    front = state.pos + jnp.asarray(DIR_VEC)[state.facing]  # [A, 2] (x, y)
    grid = jnp.asarray(layout.grid)
    h, w = grid.shape
    inside = (front[:, 0] >= 0) & (front[:, 0] < w) & (front[:, 1] >= 0) & (front[:, 1] < h)
    cell = grid[jnp.clip(front[:, 1], 0, h - 1), jnp.clip(front[:, 0], 0, w - 1)]
    return inside & (cell == Terrain.SERVING) & (state.held >= Item.SOUP) & (next_state.held == Item.NONE)


def _system_message(n_agents: int, delivery_reward: float, tail: str, fmt: str | None = None) -> str:
    """The option-menu system message with its menu paragraph replaced by `tail` and, given
    `fmt`, its two-line reply contract by `fmt`."""
    head, _, two_lines = prompts.system_message(n_agents, delivery_reward).partition("The action menu only lists")
    fmt = fmt or two_lines.partition("\n\n")[2]
    return f"{head}{tail}\n\n{fmt}"


class _OvercookedBase:
    """K episodes on one layout with per-agent delivery counters and host-side states."""

    def __init__(self, layout: str, horizon: int):
        self.lib = library(layout)
        self.layout = self.lib.layout
        self.n_agents = self.lib.num_agents
        self.horizon = int(horizon)
        self.delivery_reward = self.layout.delivery_reward
        self.states = None
        self.deliveries = np.zeros((0, self.n_agents), np.int64)

    def _reset_states(self, k: int) -> None:
        stack = lambda x: jnp.broadcast_to(x, (k,) + x.shape)  # noqa: E731
        self.states = jax.tree.map(stack, initial_state(self.layout))
        self._host = jax.tree.map(np.asarray, self.states)
        self.deliveries = np.zeros((k, self.n_agents), np.int64)

    def _count(self, sparse: np.ndarray) -> np.ndarray:
        """Add a step's sparse rewards [K, A] to the per-agent delivery counts; team reward [K]."""
        self.deliveries += np.round(sparse / self.delivery_reward).astype(np.int64)
        return sparse.sum(axis=1).astype(np.float64)

    def _state(self, k: int):
        return jax.tree.map(lambda x: x[k], self._host)

    def user_message(self, k: int, agent: int, menu: list[MenuItem], memory: Memory) -> str:
        return prompts.user_message(self.lib, self._state(k), agent, menu, memory, self.horizon)

    def state_labels(self) -> tuple[str, ...]:
        return prompts.STATES

    def state_label(self, k: int, agent: int) -> str:
        return prompts.state_label(self.lib, self._state(k), agent)

    def positions(self) -> np.ndarray:
        """int [K, A, 2] (x, y) of every agent now."""
        return np.asarray(self._host.pos)

    def agent_returns(self) -> np.ndarray:
        """float [K, A] deliveries of each agent so far (the per-agent return of the audits)."""
        return self.deliveries.astype(np.float64)

    def walls(self) -> np.ndarray:
        """bool [H, W] cells no agent can stand on."""
        return self.layout.grid != Terrain.FLOOR


class NativeOvercookedGame(_OvercookedBase):
    """Primitive actions, one LLM decision per agent per env step."""

    def __init__(self, layout: str, horizon: int):
        super().__init__(layout, horizon)
        self.actions = native_action_set("overcooked")
        self._menu = [
            MenuItem(letter=letter, index=k, opt=name, target=None, label=name)
            for k, (letter, name) in enumerate(zip(self.actions.letters, self.actions.names))
        ]
        self._system = _system_message(self.n_agents, self.delivery_reward, _NATIVE_SYSTEM_TAIL)
        lay = self.layout

        def one(state, actions):
            nxt, sparse, _, _ = transition(lay, state, actions)
            return nxt, sparse

        self._step = jax.jit(jax.vmap(one))

    def reset(self, seeds: list[int]) -> None:
        # Overcooked-AI starts every episode in the layout's standard state; the seed acts
        # through sampling.
        self._reset_states(len(seeds))

    def needs_decision(self) -> np.ndarray:
        return np.ones((len(self.deliveries), self.n_agents), bool)

    def menu(self, k: int, agent: int, rng: np.random.Generator) -> list[MenuItem]:
        return list(self._menu)

    def fallback(self, k: int, agent: int, menu: list[MenuItem]) -> int:
        return next(pos for pos, item in enumerate(menu) if item.opt == "stay")

    def system_message(self) -> str:
        return self._system

    def step(self, choices: np.ndarray) -> np.ndarray:
        self.states, sparse = self._step(self.states, jnp.asarray(choices, jnp.int32))
        self._host = jax.tree.map(np.asarray, self.states)
        return self._count(np.asarray(sparse))


class CompoundOvercookedGame(EmissionLedger, _OvercookedBase):
    """Free compound-JSON actions executed by the option executor, no feasibility filter."""

    def __init__(self, layout: str, horizon: int):
        super().__init__(layout, horizon)
        lib = self.lib
        self._system = _system_message(self.n_agents, self.delivery_reward, _COMPOUND_SYSTEM_TAIL, OUTPUT_FORMAT)
        # Every guardless instance, in construction order: the table replies are resolved in.
        self._menu = [
            MenuItem(letter=menu_mod.letter(k), index=k, opt=lib.schema.options[inst.opt].name,
                     target=inst.target, label=menu_mod.label(lib.schema, inst))
            for k, inst in enumerate(lib.instances)
        ]
        self._wait = int(np.flatnonzero(lib.inst_wait)[0])
        active = jnp.ones(self.n_agents, bool)

        def one(state, ex, choice):
            nxt, ex, rec, sparse = lib.option_step(state, ex, choice, active)
            return nxt, ex, rec.valid, rec.outcome, sparse

        self._step = jax.jit(jax.vmap(one))
        self.execs = None
        self.reset_ledger(0, self.n_agents)

    def reset(self, seeds: list[int]) -> None:
        k = len(seeds)
        self._reset_states(k)
        stack = lambda x: jnp.broadcast_to(x, (k,) + x.shape)  # noqa: E731
        self.execs = jax.tree.map(stack, self.lib.init_exec())
        self.reset_ledger(k, self.n_agents)

    def needs_decision(self) -> np.ndarray:
        return np.asarray(self.execs.inst) < 0

    def menu(self, k: int, agent: int, rng: np.random.Generator) -> list[MenuItem]:
        return list(self._menu)

    def fallback(self, k: int, agent: int, menu: list[MenuItem]) -> int:
        return self._wait

    def system_message(self) -> str:
        return self._system

    def user_message(self, k: int, agent: int, menu: list[MenuItem], memory: Memory) -> str:
        text = super().user_message(k, agent, [], memory)
        head = text.partition("\n\nAction menu:")[0]
        vocabulary = render_vocabulary(self.lib.schema, self.lib.instances)
        return f"{head}\n\n{vocabulary}\n\nReply with the JSON object only."

    def parse_choice(self, k: int, agent: int, menu: list[MenuItem], reply: str) -> int | None:
        """Menu position of the instance the reply names, or None (invalid: counted, falls back)."""
        return self.parse_reply(k, agent, reply, self.lib.schema, self.lib.instances)

    def step(self, choices: np.ndarray) -> np.ndarray:
        self.states, self.execs, valid, outcome, sparse = self._step(
            self.states, self.execs, jnp.asarray(choices, jnp.int32))
        self._host = jax.tree.map(np.asarray, self.states)
        valid, outcome = np.asarray(valid), np.asarray(outcome)
        for k, agent in self.pending():
            if valid[k, agent]:
                self.executed(k, agent, int(outcome[k, agent]))
        return self._count(np.asarray(sparse))


def _native(env: EnvConfig, n_rollouts: int) -> NativeOvercookedGame:
    game = NativeOvercookedGame(env.layout, env.horizon)
    _check_agents(env, game.n_agents)
    return game


def _compound(env: EnvConfig, n_rollouts: int) -> CompoundOvercookedGame:
    game = CompoundOvercookedGame(env.layout, env.horizon)
    _check_agents(env, game.n_agents)
    return game


def _check_agents(env: EnvConfig, n_agents: int) -> None:
    if n_agents != env.n_agents:
        raise ValueError(f"env.n_agents={env.n_agents} but layout {env.layout!r} has {n_agents} agents")


register_game("overcooked", "native", _native)
register_game("overcooked", "compound_json", _compound)
