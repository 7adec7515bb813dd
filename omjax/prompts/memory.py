"""The per-agent Memory block of the prompt: the last few macros and recent team reward."""

from __future__ import annotations

import collections
import dataclasses


@dataclasses.dataclass
class Memory:
    """What one agent remembers within an episode (plain Python; one per agent and rollout)."""

    macros: int = 5
    """How many of the last decided macros to list."""

    window: int = 100
    """Steps over which the team reward is summed."""

    def __post_init__(self) -> None:
        self._macros: collections.deque[str] = collections.deque(maxlen=max(self.macros, 1))
        self._rewards: collections.deque[float] = collections.deque(maxlen=self.window)

    def decided(self, macro: str) -> None:
        self._macros.append(macro)

    def stepped(self, team_reward: float) -> None:
        self._rewards.append(float(team_reward))

    @property
    def last_macros(self) -> list[str]:
        return list(self._macros) if self.macros > 0 else []

    @property
    def recent_reward(self) -> float:
        return float(sum(self._rewards))
