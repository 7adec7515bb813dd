"""Overcooked-AI as `Game`s of the rollout engine, one class per action interface.

* `OvercookedOptionsGame` (`options`, the method): the option library of
  `omjax.options.overcooked`; an agent decides when its option has terminated, from its
  guard-filtered, letter-shuffled menu. `active` flags the agents that act; the others stand
  still at their start pose and are never asked to decide (the solo test of §6.4).
* `OvercookedNativeGame` (`native`, Ablations A and C): every agent decides at every env step;
  its "menu" is the fixed primitive action set A-F (N, S, E, W, STAY, INTERACT), never filtered
  or shuffled, and the chosen action is applied for one step.
* `OvercookedCompoundGame` (`compound_json`, Ablation D): decisions as for `options`, but the
  prompt lists the option vocabulary instead of a menu and the reply `{"action": ..., "args":
  ...}` is parsed into an instance of the guardless instantiation and run by the same executor.
  Invalid emissions fall back to `wait`; invalid and no-op emissions are counted per agent.

`OvercookedGame` holds what the three share: K host-side states, per-agent delivery counts, the
team reward (the sum of every agent's deliveries plus `reward_shaping` times Overcooked-AI's
shaped reward), prompts, positions and walls.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from omjax.envs.overcooked.env import initial_state, transition
from omjax.envs.overcooked.items import item_from_name
from omjax.envs.overcooked.layout import Layout, Terrain
from omjax.games.base import Game, NativeActions
from omjax.interfaces.compound_json import EmissionLedger, render_vocabulary
from omjax.interfaces.native import native_action_set
from omjax.options.menu import MenuItem, check_menu_format, items_from_ranks, render_menu
from omjax.options.overcooked import SCHEMA, OvercookedOptions, library
from omjax.options.synthesis import read_guards
from omjax.prompts import overcooked as prompts
from omjax.prompts.memory import Memory

def _stack(tree, k: int):
    return jax.tree.map(lambda x: jnp.broadcast_to(x, (k,) + x.shape), tree)


class OvercookedGame(Game):
    """K episodes on one layout: host-side states, delivery counts, prompts (interface-neutral)."""

    game = "overcooked"

    def __init__(self, layout: str | Layout, horizon: int, interface: str, reward_shaping: float = 0.0,
                 option_library: str = "lib_a", start_held: str = ""):
        """`layout`: a layout name, or a `Layout` (e.g. the solo test's one-player kitchen);
        `option_library`: the candidate library (`omjax.options.overcooked.LIBRARIES`);
        `start_held`: an item every agent holds when an episode starts (`env.start_held`)."""
        self.lib = (library(layout, option_library) if isinstance(layout, str)
                    else OvercookedOptions(layout, library=option_library))
        self.layout = self.lib.layout
        self.n_agents = self.lib.num_agents
        self.horizon = int(horizon)
        self.interface = interface
        self.delivery_reward = self.layout.delivery_reward
        self.reward_shaping = float(reward_shaping)
        self._start_item = item_from_name(start_held) if start_held else None
        self._system = prompts.system_message(self.n_agents, self.delivery_reward, interface)
        self.states = None
        self.deliveries = np.zeros((0, self.n_agents), np.int64)

    def team_reward(self, sparse, shaped) -> jax.Array:
        """The team reward of one step (jittable): every agent's deliveries (sparse [A]), shared,
        plus `reward_shaping` times Overcooked-AI's shaped reward (shaped [A], from `transition`:
        +3 an ingredient potted, +3 a dish taken from the dispenser while a pot needs one
        (`is_dish_pickup_useful`), +5 a soup plated). Shaping is 0 in the paper; short CPU
        episodes, where a first delivery is out of reach, use it to give a cohort a spread."""
        reward = jnp.sum(sparse)
        if self.reward_shaping:
            reward = reward + self.reward_shaping * jnp.sum(shaped)
        return reward

    def reset(self, seeds: list[int]) -> None:
        # Overcooked-AI starts every episode in the layout's standard state (here with
        # `start_held` in every hand, if set); the episode seed acts through letter shuffles and
        # sampling.
        start = initial_state(self.layout)
        if self._start_item is not None:
            start = start.replace(held=jnp.full_like(start.held, self._start_item))
        self.states = _stack(start, len(seeds))
        self._host = jax.tree.map(np.asarray, self.states)
        self.deliveries = np.zeros((len(seeds), self.n_agents), np.int64)

    def _stepped(self, states, sparse, reward) -> np.ndarray:
        """Take the step's new states, count its deliveries (sparse rewards [K, A]); team reward [K]."""
        self.states = states
        self._host = jax.tree.map(np.asarray, states)
        self.deliveries += np.round(np.asarray(sparse) / self.delivery_reward).astype(np.int64)
        return np.asarray(reward, np.float64)

    @property
    def n_episodes(self) -> int:
        return len(self.deliveries)

    def _state(self, k: int):
        return jax.tree.map(lambda x: x[k], self._host)

    def system_message(self) -> str:
        return self._system

    menu_format = "letter_first"  # the option interface's `env.menu_format`

    def _menu_text(self, k: int, agent: int, menu: list[MenuItem]) -> str:
        return render_menu(menu, self.menu_format)

    def user_message(self, k: int, agent: int, menu: list[MenuItem], memory: Memory) -> str:
        return prompts.user_message(self.lib, self._state(k), agent, self._menu_text(k, agent, menu), memory,
                                    self.horizon, self.interface)

    def state_labels(self) -> tuple[str, ...]:
        return prompts.STATES

    def state_label(self, k: int, agent: int) -> str:
        return prompts.state_label(self.lib, self._state(k), agent)

    def positions(self) -> np.ndarray:
        return np.asarray(self._host.pos)

    def walls(self) -> np.ndarray:
        return self.layout.grid != Terrain.FLOOR

    def agent_returns(self) -> np.ndarray:
        """float [K, A] deliveries of each agent so far."""
        return self.deliveries.astype(np.float64)

    def extras(self) -> dict[str, np.ndarray]:
        return {"deliveries": self.deliveries.copy()}


class OvercookedOptionsGame(OvercookedGame):
    """The option-menu interface: guard-filtered menus, call-and-return options."""

    def __init__(self, layout: str | Layout, horizon: int, guards_path: str, reward_shaping: float = 0.0,
                 active=None, interface: str = "options", option_library: str = "lib_a", start_held: str = "",
                 menu_format: str = "letter_first"):
        super().__init__(layout, horizon, interface, reward_shaping, option_library, start_held)
        check_menu_format(menu_format)
        self.menu_format = menu_format
        self.active = np.ones(self.n_agents, bool) if active is None else np.asarray(active, bool)
        if self.active.shape != (self.n_agents,) or not self.active.any():
            raise ValueError(f"active must flag at least one of the {self.n_agents} agents, got {active}")
        self.guards = read_guards(guards_path, SCHEMA) if guards_path else []
        self._wait = int(np.flatnonzero(self.lib.inst_wait)[0])
        lib, acting = self.lib, jnp.asarray(self.active)

        def one(state, ex, choice):
            nxt, ex, rec, sparse, shaped = lib.option_step(state, ex, choice, acting)
            return nxt, ex, self.team_reward(sparse, shaped), sparse, rec.valid, rec.outcome

        self._step = jax.jit(jax.vmap(one))
        self.execs = None
        self._host_execs = None

    def reset(self, seeds: list[int]) -> None:
        super().reset(seeds)
        self.execs = _stack(self.lib.init_exec(), len(seeds))
        self._host_execs = None

    def needs_decision(self) -> np.ndarray:
        return (np.asarray(self.execs.inst) < 0) & self.active

    def menu(self, k: int, agent: int, rng: np.random.Generator) -> list[MenuItem]:
        return self.lib.menu(self._state(k), agent, self.guards, rng)

    def snapshot(self, k: int):
        """(env `State`, executor `Exec`) of episode k now, host arrays."""
        if self._host_execs is None:
            self._host_execs = jax.tree.map(np.asarray, self.execs)
        return self._state(k), jax.tree.map(lambda x: x[k], self._host_execs)

    def restore(self, snapshots: list) -> None:
        """Start len(snapshots) episodes, episode k from `snapshots[k]` (a `snapshot`), with no
        deliveries counted yet: branches of saved states played on by the same rules."""
        if not snapshots:
            raise ValueError("restore needs at least one snapshot")
        stack = lambda *xs: jnp.asarray(np.stack(xs))
        self.reset([0] * len(snapshots))
        self.states = jax.tree.map(stack, *[s[0] for s in snapshots])
        self._host = jax.tree.map(np.asarray, self.states)
        self.execs = jax.tree.map(stack, *[s[1] for s in snapshots])

    def fallback(self, k: int, agent: int, menu: list[MenuItem]) -> int:
        for pos, item in enumerate(menu):
            if item.index == self._wait:
                return pos
        raise ValueError(f"the menu of agent {agent} has no `wait` entry to fall back on")

    def step(self, choices: np.ndarray) -> np.ndarray:
        states, self.execs, reward, sparse, valid, outcome = self._step(self.states, self.execs,
                                                                        jnp.asarray(choices, jnp.int32))
        self._host_execs = None
        self._ended(np.asarray(valid), np.asarray(outcome))
        return self._stepped(states, sparse, reward)

    def _ended(self, valid: np.ndarray, outcome: np.ndarray) -> None:
        """Hook: the executions that ended this step (valid bool [K, A]) and their outcomes."""


class OvercookedNativeGame(NativeActions, OvercookedGame):
    """Primitive actions (N, S, E, W, STAY, INTERACT), one LLM decision per agent per env step."""

    def __init__(self, layout: str, horizon: int, reward_shaping: float = 0.0, start_held: str = ""):
        super().__init__(layout, horizon, "native", reward_shaping, start_held=start_held)
        self.use_actions(native_action_set("overcooked"), idle="stay")
        lay = self.layout

        def one(state, actions):
            nxt, sparse, shaped, _ = transition(lay, state, actions)
            return nxt, self.team_reward(sparse, shaped), sparse

        self._step = jax.jit(jax.vmap(one))

    def step(self, choices: np.ndarray) -> np.ndarray:
        states, reward, sparse = self._step(self.states, jnp.asarray(choices, jnp.int32))
        return self._stepped(states, sparse, reward)


class OvercookedCompoundGame(EmissionLedger, OvercookedOptionsGame):
    """Free compound-JSON actions executed by the option executor, no feasibility filter."""

    def __init__(self, layout: str, horizon: int, reward_shaping: float = 0.0, option_library: str = "lib_a",
                 start_held: str = ""):
        super().__init__(layout, horizon, guards_path="", reward_shaping=reward_shaping, interface="compound_json",
                         option_library=option_library, start_held=start_held)
        schema, instances = self.lib.schema, self.lib.instances
        # Every guardless instance, in construction order: the table replies are resolved in.
        self._menu = items_from_ranks(schema, instances, np.arange(len(instances)))
        self._vocabulary = render_vocabulary(schema, instances)
        self.reset_ledger(0, self.n_agents)

    def reset(self, seeds: list[int]) -> None:
        super().reset(seeds)
        self.reset_ledger(len(seeds), self.n_agents)

    def menu(self, k: int, agent: int, rng: np.random.Generator) -> list[MenuItem]:
        """The guardless instances in construction order (never shown; replies resolve into it)."""
        return list(self._menu)

    def fallback(self, k: int, agent: int, menu: list[MenuItem]) -> int:
        return self._wait

    def _menu_text(self, k: int, agent: int, menu: list[MenuItem]) -> str:
        return self._vocabulary

    def parse_choice(self, k: int, agent: int, menu: list[MenuItem], reply: str) -> int | None:
        """Menu position of the instance the reply names, or None (invalid: counted, falls back)."""
        return self.parse_reply(k, agent, reply, self.lib.schema, self.lib.instances)

    def _ended(self, valid: np.ndarray, outcome: np.ndarray) -> None:
        for k, agent in self.pending():
            if valid[k, agent]:
                self.executed(k, agent, int(outcome[k, agent]))

    def extras(self) -> dict[str, np.ndarray]:
        return {**super().extras(), "invalid_emissions": self.invalid_counts(), "noop_emissions": self.noop_counts()}
