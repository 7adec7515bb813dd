"""Games as the rollout engine sees them: K joint episodes stepped together over option menus.

A `Game` holds K episodes of one game. At every env step the engine asks which agents' options
have terminated (`needs_decision`), builds their menus and prompts, gets one batched LLM call,
and steps all K episodes once with the chosen option instances (`step`); agents still executing
an option ignore their choice (macro-action Dec-POMDP: decisions are asynchronous).

`make_game(env_cfg, action_interface, K)` builds the game named in the config under the given
action interface. The option menu of Overcooked is registered here; other games and the
ablation interfaces (`native`, `compound_json`) plug in with `register_game(game, interface,
factory)` — a factory returns any object with the `Game` methods, so a native-action interface
is a `Game` whose menu is the primitive action set and whose options last one step. Games that
live in their own module register on import: `make_game` imports the module `PLUGINS` names for
a game (Melting Pot: `omjax.train.meltingpot_game`, Cleanup and Commons Harvest under `options`
and `native`) the first time it is asked for one.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Sequence
from typing import Callable, Protocol

import jax
import jax.numpy as jnp
import numpy as np

from omjax.config import EnvConfig
from omjax.options.menu import MenuItem
from omjax.prompts.memory import Memory


class Game(Protocol):
    """K joint episodes of a game under the option-menu interface."""

    n_agents: int
    horizon: int
    delivery_reward: float
    """Reward of one unit of the game's task metric (a delivery, an apple), for reporting."""

    def reset(self, seeds: list[int]) -> None:
        """Start len(seeds) episodes; `seeds` fix each episode's initial state."""

    def needs_decision(self) -> np.ndarray:
        """bool [K, A]: agents whose option terminated and who must choose now."""

    def menu(self, k: int, agent: int, rng: np.random.Generator) -> list[MenuItem]:
        """The lettered, feasibility-filtered menu of `agent` in episode k (letters from rng)."""

    def fallback(self, k: int, agent: int, menu: list[MenuItem]) -> int:
        """Position in `menu` of the `wait` option (the default unparsable-reply rule)."""

    def system_message(self) -> str: ...

    def user_message(self, k: int, agent: int, menu: list[MenuItem], memory: Memory) -> str: ...

    def state_labels(self) -> tuple[str, ...]:
        """Every label the reply's `state:` line may take (letter mode scores each)."""

    def state_label(self, k: int, agent: int) -> str:
        """The true label now (written into the prompt under `policy.state_line=oracle`)."""

    def step(self, choices: np.ndarray) -> np.ndarray:
        """Advance every episode one env step; choices int [K, A] instance indices (ignored for
        agents not deciding). Returns the team reward of each episode float [K]."""


# Progress bonuses of the shaped reward (the values of overcooked_ai_py's BASE_REW_SHAPING_PARAMS).
ONION_IN_POT_BONUS = 3.0
DISH_PICKUP_BONUS = 3.0
SOUP_PICKUP_BONUS = 5.0


def progress_rewards(state, next_state) -> jax.Array:
    """Team progress bonus of one step: +3 per onion added to a pot, +3 per dish taken into a
    hand, +5 per soup plated. Read off the state change; used only when `env.reward_shaping` > 0
    (short CPU episodes, where a first delivery is out of reach)."""
    from omjax.envs.overcooked.items import Item

    onions = jnp.sum(jnp.maximum(next_state.pot_onions - state.pot_onions, 0))
    held, after = state.held, next_state.held  # [A]
    dishes = jnp.sum((held != Item.DISH) & (after == Item.DISH))
    plated = jnp.sum((held == Item.DISH) & (after >= Item.SOUP))
    return ONION_IN_POT_BONUS * onions + DISH_PICKUP_BONUS * dishes + SOUP_PICKUP_BONUS * plated


class OvercookedGame:
    """K Overcooked-AI episodes with the option library of `omjax.options.overcooked`.

    `active` (default: everyone) flags the agents that act; the others stand still at their
    start pose and are never asked to decide (the solo test of §6.4 and the solo burn-in).
    """

    def __init__(self, layout: str, horizon: int, guards_path: str, reward_shaping: float = 0.0,
                 active: Sequence[bool] | None = None):
        from omjax.options import overcooked as oc
        from omjax.options.synthesis import read_guards
        from omjax.prompts import overcooked as prompts

        self.lib = oc.library(layout)
        self.layout = self.lib.layout
        self.n_agents = self.lib.num_agents
        self.active = np.ones(self.n_agents, bool) if active is None else np.asarray(active, bool)
        if self.active.shape != (self.n_agents,) or not self.active.any():
            raise ValueError(f"active must flag at least one of the {self.n_agents} agents, got {active}")
        self.horizon = int(horizon)
        self.delivery_reward = self.layout.delivery_reward
        self.guards = read_guards(guards_path, oc.SCHEMA) if guards_path else []
        self._prompts = prompts
        self._system = prompts.system_message(self.n_agents, self.delivery_reward)
        self._wait = int(np.nonzero(self.lib.inst_wait)[0][0])
        lib, acting = self.lib, jnp.asarray(self.active)
        shaping = float(reward_shaping)

        def one(state, ex, choice):
            nxt, ex, _, sparse = lib.option_step(state, ex, choice, acting)
            reward = jnp.sum(sparse)  # the team reward: every agent's deliveries, shared
            if shaping:
                reward = reward + shaping * progress_rewards(state, nxt)
            return nxt, ex, reward, sparse

        self._step = jax.jit(jax.vmap(one))
        self.states = None
        self.execs = None

    def reset(self, seeds: list[int]) -> None:
        from omjax.envs.overcooked.env import initial_state

        # Overcooked-AI starts every episode in the layout's standard state; the episode seed
        # acts through letter shuffles and sampling.
        k = len(seeds)
        stack = lambda x: jnp.broadcast_to(x, (k,) + x.shape)
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
        for pos, item in enumerate(menu):
            if item.index == self._wait:
                return pos
        raise ValueError(f"the menu of agent {agent} has no `wait` entry to fall back on")

    def system_message(self) -> str:
        return self._system

    def user_message(self, k: int, agent: int, menu: list[MenuItem], memory: Memory) -> str:
        return self._prompts.user_message(self.lib, self._state(k), agent, menu, memory, self.horizon)

    def state_labels(self) -> tuple[str, ...]:
        return self._prompts.STATES

    def state_label(self, k: int, agent: int) -> str:
        return self._prompts.state_label(self.lib, self._state(k), agent)

    def step(self, choices: np.ndarray) -> np.ndarray:
        self.states, self.execs, reward, sparse = self._step(self.states, self.execs,
                                                             jnp.asarray(choices, jnp.int32))
        self._host = jax.tree.map(np.asarray, self.states)
        self.deliveries += np.round(np.asarray(sparse) / self.delivery_reward).astype(np.int64)  # [K, A]
        return np.asarray(reward, np.float64)

    def agent_returns(self) -> np.ndarray:
        """float [K, A] deliveries of each agent so far."""
        return self.deliveries.astype(np.float64)


_GAMES: dict[tuple[str, str], Callable[[EnvConfig, int], Game]] = {}


def register_game(game: str, interface: str, factory: Callable[[EnvConfig, int], Game]) -> None:
    """Make `env.game: <game>` with `policy.action_interface: <interface>` buildable;
    `factory(env_cfg, n_rollouts) -> Game`."""
    _GAMES[(game, interface)] = factory


def guards_file(env: EnvConfig, variant: str | None = None) -> str:
    """The guard file an options game's menus use: `env.guards`, "" for `none`, or the shipped
    file of the game's layout / option library `variant` (default `env.layout`); a file that
    does not exist is an error."""
    from omjax.options.registry import guard_path

    if env.guards == "none":
        return ""
    variant = variant or env.layout
    path = env.guards or guard_path(env.game, variant)
    if not os.path.exists(path):
        raise FileNotFoundError(
            f"guard file {path} not found: run `omjax guards --game {env.game} --layout {variant}` "
            "or set env.guards=none for the unfiltered menu")
    return path


def _overcooked(env: EnvConfig, n_rollouts: int) -> Game:
    game = OvercookedGame(env.layout, env.horizon, guards_file(env), env.reward_shaping)
    if game.n_agents != env.n_agents:
        raise ValueError(f"env.n_agents={env.n_agents} but layout {env.layout!r} has {game.n_agents} agents")
    return game


register_game("overcooked", "options", _overcooked)

PLUGINS: dict[str, str] = {
    "overcooked": "omjax.interfaces.overcooked",  # the native and compound-JSON ablation interfaces
    "cleanup": "omjax.train.meltingpot_game",
    "harvest": "omjax.train.meltingpot_game",
}
"""Game -> module whose import registers its (other) rollout games; imported on first use."""


def make_game(env: EnvConfig, action_interface: str, n_rollouts: int) -> Game:
    key = (env.game, action_interface)
    if key not in _GAMES and env.game in PLUGINS:
        importlib.import_module(PLUGINS[env.game])
    if key not in _GAMES:
        known = ", ".join(f"{g}/{i}" for g, i in sorted(_GAMES))
        raise ValueError(f"no rollout adapter for game {env.game!r} with action interface {action_interface!r} "
                         f"(registered: {known}); see omjax.train.games.register_game")
    return _GAMES[key](env, n_rollouts)
