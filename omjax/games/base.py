"""The `Game` interface: K parallel episodes of one game under one action interface.

At every env step the rollout engine (`omjax.train.rollout.collect`) asks which agents must
choose (`needs_decision`), builds their menus and prompts, gets one batched LLM call, maps each
reply to a menu position (`parse_choice`, else `fallback`) and steps all K episodes once with
the chosen entries (`step`); agents still executing an option ignore their choice (macro-action
Dec-POMDP: decisions are asynchronous). The evaluation recorder reads `positions`,
`agent_returns`, `walls` and `extras` after every step.

An action interface is a `Game` too: under `native` the menu is the primitive action set and
every agent decides at every step; under `compound_json` the menu is the guardless instance list
the free JSON reply is resolved into (`parse_choice`).
"""

from __future__ import annotations

import abc

import numpy as np

from omjax.interfaces.native import NativeActionSet
from omjax.options.menu import MenuItem
from omjax.prompts.memory import Memory
from omjax.prompts.reply import parse_reply


class Game(abc.ABC):
    """K joint episodes of one game under one action interface (see the module docstring).

    Static facts are attributes set by the constructor; episode state lives on the instance
    between `reset` and the last `step`. `k` indexes the K episodes, `agent` the A agents.
    """

    game: str
    """Canonical game name (`overcooked`, `cleanup`, `harvest`)."""
    interface: str
    """The action interface, one of `omjax.prompts.interface.INTERFACES`."""
    n_agents: int
    horizon: int
    """Env steps per episode."""
    delivery_reward: float
    """Reward of one unit of the game's task metric (a delivery, an apple), for reporting."""

    @abc.abstractmethod
    def reset(self, seeds: list[int]) -> None:
        """Start len(seeds) = K episodes; `seeds` fix each episode's initial state."""

    @property
    @abc.abstractmethod
    def n_episodes(self) -> int:
        """K, the episodes of the last `reset`."""

    @abc.abstractmethod
    def needs_decision(self) -> np.ndarray:
        """bool [K, A]: agents whose option terminated and who must choose now."""

    @abc.abstractmethod
    def menu(self, k: int, agent: int, rng: np.random.Generator) -> list[MenuItem]:
        """The lettered menu of `agent` in episode k (letters shuffled from `rng` where the
        interface shuffles); `MenuItem.index` is what `step` receives for that entry."""

    @abc.abstractmethod
    def fallback(self, k: int, agent: int, menu: list[MenuItem]) -> int:
        """Position in `menu` of the do-nothing entry (the default unparsable-reply rule)."""

    @abc.abstractmethod
    def system_message(self) -> str:
        """The fixed system message of this game, team size and interface."""

    @abc.abstractmethod
    def user_message(self, k: int, agent: int, menu: list[MenuItem], memory: Memory) -> str:
        """The per-decision user message of `agent` in episode k."""

    @abc.abstractmethod
    def state_labels(self) -> tuple[str, ...]:
        """Every label the reply's `state:` line may take, in the order the system message lists them."""

    @abc.abstractmethod
    def state_label(self, k: int, agent: int) -> str:
        """The true state label (one of `state_labels()`) of `agent` in episode k."""

    def parse_choice(self, k: int, agent: int, menu: list[MenuItem], reply: str) -> int | None:
        """Menu position a generated reply names, or None when it does not parse. The default
        reads the two-line contract (`state: ...` / `choice: <letter>`)."""
        parsed = parse_reply(reply, [it.letter for it in menu])
        if parsed is None:
            return None
        return next(pos for pos, it in enumerate(menu) if it.letter == parsed.choice)

    @abc.abstractmethod
    def step(self, choices: np.ndarray) -> np.ndarray:
        """Advance every episode one env step; choices int [K, A] (`MenuItem.index` of each
        deciding agent's entry; ignored for agents not deciding). Returns the team reward of
        each episode, float [K]."""

    @abc.abstractmethod
    def positions(self) -> np.ndarray:
        """int [K, A, 2] (x, y) of every agent now."""

    @abc.abstractmethod
    def walls(self) -> np.ndarray:
        """bool [H, W] cells no agent can stand on."""

    @abc.abstractmethod
    def agent_returns(self) -> np.ndarray:
        """float [K, A] each agent's return so far in task units (deliveries, apples)."""

    def snapshot(self, k: int):
        """Episode k's full state now as host pytrees, enough to simulate it on
        (`train.credit: {kind: continuation}`); games that cannot be simulated from a copy say so."""
        raise NotImplementedError(f"{type(self).__name__} keeps no copyable episode state")

    def extras(self) -> dict[str, np.ndarray]:
        """Game-specific probes of every episode now, each an array with leading axis K:
        `deliveries` int [K, A] (Overcooked), `cleaned` / `eaten` int [K, A] (Cleanup),
        `patches_alive` int [K] (Harvest), `invalid_emissions` / `noop_emissions` int [K, A]
        (compound-JSON). A game reports only the keys it has."""
        return {}

    def close(self) -> None:
        """Release engine resources (worker processes); the game can be `reset` again after."""

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class NativeActions:
    """The native-action interface of any `Game` (Ablations A and C): every agent decides at every
    env step among the game's primitive actions, a fixed menu lettered in env action order
    (never filtered or shuffled; `MenuItem.index` is the env action), falling back to `idle`."""

    interface = "native"

    def use_actions(self, actions: NativeActionSet, idle: str) -> None:
        self.actions = actions
        self._menu = [MenuItem(letter=letter, index=k, opt=name, target=None, label=name)
                      for k, (letter, name) in enumerate(zip(actions.letters, actions.names))]
        self._idle = actions.names.index(idle)

    def needs_decision(self) -> np.ndarray:
        return np.ones((self.n_episodes, self.n_agents), bool)

    def menu(self, k: int, agent: int, rng: np.random.Generator) -> list[MenuItem]:
        return list(self._menu)

    def fallback(self, k: int, agent: int, menu: list[MenuItem]) -> int:
        return next(pos for pos, item in enumerate(menu) if item.index == self._idle)
