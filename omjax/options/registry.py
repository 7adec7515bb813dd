"""Game registry for `omjax burnin|guards|menu --game <g>`: game name -> library module.

A game library is a module (imported lazily, so `--game overcooked` never imports Melting Pot)
exposing at module level the `GameLibrary` interface below. The shipped guard file of a game
variant lives at `guard_path(game, variant)`.
"""

from __future__ import annotations

import importlib
import os
from typing import Protocol, runtime_checkable

from omjax.options.menu import MenuItem
from omjax.options.records import RecordTable
from omjax.options.schema import Schema
from omjax.options.synthesis import Guard

GAMES: dict[str, str] = {
    "overcooked": "omjax.options.overcooked",
    "cleanup": "omjax.options.cleanup",
    "harvest": "omjax.options.harvest",
}

GUARD_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "guards")


@runtime_checkable
class GameLibrary(Protocol):
    """What a game's option-library module provides (module-level names).

    SCHEMA: the option library (options with contracts, read set, effect and transient features).
    VARIANTS: the layouts / substrates it supports; VARIANTS[0] is the default.
    DEFAULT_EPISODES: (solo, team) burn-in episode counts that produce the shipped guard files.
    """

    SCHEMA: Schema
    VARIANTS: tuple[str, ...]
    DEFAULT_EPISODES: tuple[int, int]

    def burnin(self, variant: str, solo_episodes: int, team_episodes: int, seed: int,
               progress: bool = True) -> RecordTable:
        """Stage 2: uniform random over the instantiated, guardless menu; one record per
        completed execution. Solo episodes have one acting agent (episode index modulo the
        number of agents, the others stand still); team episodes have every agent acting.
        Episode indices `ep` run over solo episodes first, then team episodes. A game with
        solo-only options (no private effect part) must fill the `contested` column."""
        ...

    def start_menu(self, variant: str, seed: int, agent: int, guards: list[Guard]) -> list[MenuItem]:
        """The lettered menu `agent` sees at the start state of the episode seeded `seed`."""
        ...


def load_game(game: str) -> GameLibrary:
    if game not in GAMES:
        raise ValueError(f"unknown game {game!r}; known games: {', '.join(GAMES)}")
    module = importlib.import_module(GAMES[game])
    missing = [n for n in ("SCHEMA", "VARIANTS", "DEFAULT_EPISODES", "burnin", "start_menu")
               if not hasattr(module, n)]
    if missing:
        raise TypeError(f"game library {GAMES[game]} lacks {missing} (see omjax.options.registry.GameLibrary)")
    return module


def resolve_variant(lib: GameLibrary, game: str, variant: str | None) -> str:
    if variant is None:
        return lib.VARIANTS[0]
    if variant not in lib.VARIANTS:
        raise ValueError(f"game {game!r} has no layout/variant {variant!r}; known: {', '.join(lib.VARIANTS)}")
    return variant


def guard_path(game: str, variant: str) -> str:
    """Path of the shipped guard file of a game variant."""
    return os.path.join(GUARD_DIR, f"{game}_{variant}.jsonl")
