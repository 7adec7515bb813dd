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

SUBSTRATES: dict[str, str] = {"cleanup": "clean_up", "harvest": "commons_harvest__open"}
"""Melting Pot game -> the substrate it plays (also accepted as its `env.layout`)."""

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


def layout_agents(game: str, layout: str) -> int:
    """How many agents play `layout` of `game`, read from the Overcooked layout file or the
    Melting Pot substrate config (no engine is built). A Melting Pot layout is the substrate
    name or one of the game's option-library variants. ValueError naming what is accepted."""
    if game == "overcooked":
        layouts = importlib.import_module("omjax.envs.overcooked.layout")
        known = layouts.list_layouts()
        if layout not in known:
            shipped = ", ".join(load_game(game).VARIANTS)
            raise ValueError(f"no Overcooked layout {layout!r}; with shipped guards: {shipped} (all {len(known)} "
                             f"layouts are the *.layout files in {layouts.layouts_dir()})")
        return layouts.load_layout(layout).num_agents
    accepted = (SUBSTRATES[game], *load_game(game).VARIANTS) if game in SUBSTRATES else ()
    if layout not in accepted:
        raise ValueError(f"game {game!r} has no layout {layout!r}; accepted: {', '.join(accepted) or 'none'}")
    engine = importlib.import_module("omjax.envs.meltingpot.engine")
    return len(engine.config_module(SUBSTRATES[game]).get_config().default_player_roles)
