"""One Melting Pot game's option libraries as one value: Cleanup and Commons Harvest are instances.

A `MeltingPotGameLibrary` holds a game's candidate libraries (variant -> options over the game's
shared read / effect / transient feature sets, as two samples of the Stage-1 prompt would give),
its feature functions and goal regions, and provides the `GameLibrary` interface of
`omjax.games.registry`: `SCHEMA` (the union of the candidates: option and feature names never
collide, which is what records and guard files are read with), `VARIANTS`, `DEFAULT_EPISODES`,
`burnin` (also as `burnin_episodes` + `assemble`), `start_menu`, plus `library(variant)` and `to_union`.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Mapping

import numpy as np

from omjax.envs.meltingpot.adapter import MeltingPotEnv
from omjax.options.meltingpot.burnin import Key, assemble, episode_keys, episodes
from omjax.options.meltingpot.library import MPLibrary, MPOption, make_library, own_guards, to_union
from omjax.options.meltingpot.menus import start_menu
from omjax.options.menu import MenuItem
from omjax.options.records import RecordTable
from omjax.options.schema import Feature, OptionSpec, Schema
from omjax.options.synthesis import Guard


@dataclasses.dataclass(frozen=True)
class MeltingPotGameLibrary:
    """The candidate option libraries of one Melting Pot game (see the module docstring)."""

    game: str
    """Canonical game name (`cleanup`, `harvest`)."""
    module: str
    """The module that holds this value as `LIBRARY` (the isolated burn-in process imports it)."""
    env: Callable[[], MeltingPotEnv]
    """Builds the game's engine adapter (`CleanUp`, `CommonsHarvest`)."""
    candidates: Mapping[str, tuple[tuple[OptionSpec, MPOption], ...]]
    """Variant name -> its (option contract, executor kind) pairs; the first is the default."""
    read_set: tuple[Feature, ...]
    effect_set: tuple[Feature, ...]
    transient: tuple[Feature, ...]
    agent_features: Callable
    target_features: Callable
    effect_features: Callable
    transient_features: Callable
    regions: Callable[[MeltingPotEnv], dict[str, np.ndarray]]
    """Goal regions (bool [H, W]) of the target-less `goto` options, from the engine's layout."""
    DEFAULT_EPISODES: tuple[int, int]
    """(solo, team) burn-in episodes that produce the shipped guard files."""

    @functools.cached_property
    def VARIANTS(self) -> tuple[str, ...]:  # noqa: N802  (the GameLibrary protocol's name)
        return tuple(self.candidates)

    @functools.cached_property
    def SCHEMA(self) -> Schema:  # noqa: N802
        return Schema(game=self.game, options=tuple(spec for opts in self.candidates.values() for spec, _ in opts),
                      read_set=self.read_set, effect_features=self.effect_set, transient=self.transient)

    @functools.cached_property
    def _libraries(self) -> dict[str, MPLibrary]:
        return {variant: make_library(self.game, variant, opts, self.read_set, self.effect_set, self.transient,
                                      self.agent_features, self.target_features, self.effect_features,
                                      self.transient_features)
                for variant, opts in self.candidates.items()}

    def library(self, variant: str) -> MPLibrary:
        if variant not in self.candidates:
            raise ValueError(f"{self.game} has no library {variant!r}; known: {', '.join(self.candidates)}")
        return self._libraries[variant]

    def to_union(self, lib: MPLibrary, table: RecordTable) -> RecordTable:
        """Records of a candidate library re-indexed to SCHEMA's option order (what files store)."""
        return to_union(self.SCHEMA, lib, table)

    def burnin(self, variant: str, solo_episodes: int, team_episodes: int, seed: int, progress: bool = True,
               episode_length: int | None = None) -> RecordTable:
        """Stage 2 burn-in of `solo_episodes` + `team_episodes` (union-indexed records), each
        episode in a fork of a canonical process: the same records on every invocation, and the
        first n + n episodes of every larger burn-in (`omjax.options.meltingpot.burnin`)."""
        results = self.burnin_episodes(variant, episode_keys(solo_episodes, team_episodes), seed, progress,
                                       episode_length)
        return self.assemble(variant, results, solo_episodes, team_episodes)

    def burnin_episodes(self, variant: str, keys: list[Key], seed: int, progress: bool = True,
                        episode_length: int | None = None) -> dict[Key, dict]:
        """(solo, k) -> the records of that burn-in episode (`omjax.options.meltingpot.burnin.episodes`)."""
        return episodes(self.library(variant), self.module, variant, self.env, self.regions, keys, seed, progress,
                        episode_length)

    def assemble(self, variant: str, results: dict[Key, dict], solo_episodes: int, team_episodes: int) -> RecordTable:
        """What `burnin(variant, solo_episodes, team_episodes, seed)` returns, from `burnin_episodes` results."""
        lib = self.library(variant)
        return self.to_union(lib, assemble(lib, results, solo_episodes, team_episodes))

    def start_menu(self, variant: str, seed: int, agent: int, guards: list[Guard]) -> list[MenuItem]:
        """The lettered menu `agent` sees at the start state of the episode seeded `seed`."""
        env = self.env()
        lib = self.library(variant)
        return start_menu(lib, env, self.regions(env), seed, agent, own_guards(lib, guards))
