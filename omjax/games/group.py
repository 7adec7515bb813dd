"""Several games of one game and interface as one `Game`: the seeds of a group that drew
different option libraries (`env.library: sampled`) train in one program.

    game = GroupGame([lib_a, lib_a, lib_b])   # seed slots 0 and 1 play lib_a, slot 2 lib_b
    game.reset(episode_seeds)                 # 3 x K seeds: slot s owns episodes s*K .. s*K+K-1

The episodes of a `reset` split into one equal block per seed slot (the layout of
`omjax.train.rollout.collect_group`); slot s's block plays on `parts[s]`, and the slots that
share one `Game` object play together in it, in slot order, so each part sees exactly the
episodes (and episode seeds) its seeds would give it alone. Every per-episode call is answered
by the episode's part and every [K, ...] array is the parts' arrays put back in episode order.

The rollout engine reads one system message, one label set, one horizon and one team size per
rollout, and the evaluation one wall map: the parts must agree on all of them (the libraries of
a game differ in their options and guards, which reach the policy only through the menus of the
user messages), and a group whose parts do not is refused when it is built.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from omjax.games.base import Game
from omjax.options.menu import MenuItem
from omjax.prompts.memory import Memory

_SHARED = ("game", "interface", "n_agents", "horizon", "delivery_reward")
"""Static facts every part of a group must share."""


class GroupGame(Game):
    """The episodes of the seed slots of a group, each slot on its own part (module docstring)."""

    def __init__(self, parts: Sequence[Game]):
        if not parts:
            raise ValueError("a GroupGame needs the game of at least one seed slot")
        self.parts = list(parts)
        self.games: list[Game] = list({id(g): g for g in self.parts}.values())
        """The distinct parts, in the order of their first slot."""
        self._slot_part = [next(j for j, g in enumerate(self.games) if g is part) for part in self.parts]
        """Per seed slot: its part (index into `games`)."""
        first = self.games[0]
        for name in _SHARED:
            values = [getattr(g, name) for g in self.games]
            if len(set(values)) != 1:
                raise ValueError(f"the games of one group must share `{name}`, got {values}")
            setattr(self, name, values[0])
        for what, read in (("system_message()", lambda g: g.system_message()),
                           ("state_labels()", lambda g: tuple(g.state_labels()))):
            if len({read(g) for g in self.games}) != 1:
                raise ValueError(f"the games of one group must share {what}: the rollout engine "
                                 "renders one system message and scores one label set per round")
        if any(not np.array_equal(g.walls(), first.walls()) for g in self.games):
            raise ValueError("the games of one group must share walls(): they play one layout")
        self._which = np.zeros(0, np.int64)
        """[K] the part (index into `games`) of each episode."""
        self._local = np.zeros(0, np.int64)
        """[K] each episode's index within its part."""
        self._episodes: list[np.ndarray] = [np.zeros(0, np.int64) for _ in self.games]
        """Per part: its episodes, in its own order."""

    # ------------------------------------------------------------------ episodes
    def reset(self, seeds: list[int]) -> None:
        n_slots = len(self.parts)
        if not seeds or len(seeds) % n_slots:
            raise ValueError(f"a group of {n_slots} seed slots plays a positive multiple of {n_slots} episodes, "
                             f"got {len(seeds)}")
        self._which = np.repeat(self._slot_part, len(seeds) // n_slots).astype(np.int64)
        self._episodes = [np.flatnonzero(self._which == j) for j in range(len(self.games))]
        self._local = np.zeros(len(seeds), np.int64)
        for g, eps in zip(self.games, self._episodes):
            self._local[eps] = np.arange(len(eps))
            g.reset([seeds[e] for e in eps])

    @property
    def n_episodes(self) -> int:
        return len(self._which)

    def _part(self, k: int) -> tuple[Game, int]:
        return self.games[self._which[k]], int(self._local[k])

    def _gather(self, parts: list[np.ndarray]) -> np.ndarray:
        """One array [K_part, ...] per part (in `games` order) -> [K, ...] in episode order."""
        if not self.n_episodes:
            raise RuntimeError("call reset(seeds) first")
        out = np.zeros((self.n_episodes,) + parts[0].shape[1:], parts[0].dtype)
        for eps, got in zip(self._episodes, parts):
            out[eps] = got
        return out

    def needs_decision(self) -> np.ndarray:
        return self._gather([np.asarray(g.needs_decision()) for g in self.games])

    def step(self, choices: np.ndarray) -> np.ndarray:
        choices = np.asarray(choices)
        return self._gather([np.asarray(g.step(choices[eps])) for g, eps in zip(self.games, self._episodes)])

    def close(self) -> None:
        for g in self.games:
            g.close()

    # ------------------------------------------------------------------ one decision
    def menu(self, k: int, agent: int, rng: np.random.Generator) -> list[MenuItem]:
        g, j = self._part(k)
        return g.menu(j, agent, rng)

    def fallback(self, k: int, agent: int, menu: list[MenuItem]) -> int:
        g, j = self._part(k)
        return g.fallback(j, agent, menu)

    def user_message(self, k: int, agent: int, menu: list[MenuItem], memory: Memory) -> str:
        g, j = self._part(k)
        return g.user_message(j, agent, menu, memory)

    def state_label(self, k: int, agent: int) -> str:
        g, j = self._part(k)
        return g.state_label(j, agent)

    def parse_choice(self, k: int, agent: int, menu: list[MenuItem], reply: str) -> int | None:
        g, j = self._part(k)
        return g.parse_choice(j, agent, menu, reply)

    # ------------------------------------------------------------------ shared by every part
    def system_message(self) -> str:
        return self.games[0].system_message()

    def state_labels(self) -> tuple[str, ...]:
        return self.games[0].state_labels()

    def walls(self) -> np.ndarray:
        return self.games[0].walls()

    # ------------------------------------------------------------------ what the evaluation reads
    def positions(self) -> np.ndarray:
        return self._gather([np.asarray(g.positions()) for g in self.games])

    def agent_returns(self) -> np.ndarray:
        return self._gather([np.asarray(g.agent_returns()) for g in self.games])

    def extras(self) -> dict[str, np.ndarray]:
        per_part = [g.extras() for g in self.games]
        if len({frozenset(e) for e in per_part}) > 1:
            raise ValueError(f"the games of one group report different extras: {[sorted(e) for e in per_part]}")
        return {name: self._gather([np.asarray(e[name]) for e in per_part]) for name in per_part[0]}
