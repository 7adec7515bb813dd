"""The one game registry: canonical names, aliases, option libraries, guard files and `make_game`.

Every game has one canonical name (`omjax.config.GAMES`: `overcooked`, `cleanup`, `harvest`,
the only spellings a config takes); `canonical_game` (the command line) also accepts the names the engines and papers use (`clean_up`, `commons_harvest`,
`commons_harvest__open`, ...). A game brings

* its option library (`library(game)`, a `GameLibrary`: what `omjax burnin | guards | menu`
  drive), whose variants are the Overcooked layouts or the Melting Pot candidate libraries, and
* its rollout games, one per action interface (`make_game(env, interface)`, a `Game`), and
  the game of a group of training seeds whose envs differ in their option library
  (`make_group_game(envs, interface)`, a `GroupGame` of one game per library).

The shipped guard file of a game variant lives at `guard_path(game, variant)`.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from types import MappingProxyType
from typing import Protocol, runtime_checkable

from omjax.config import GAMES, ConfigError, EnvConfig
from omjax.envs.meltingpot.engine import config_module
from omjax.envs.overcooked.layout import layouts_dir, list_layouts, load_layout
from omjax.games.base import Game
from omjax.games.group import GroupGame
from omjax.games.meltingpot import (SUBSTRATES, MeltingPotCompoundGame, MeltingPotNativeGame,
                                    MeltingPotOptionsGame, resolve_library)
from omjax.games.overcooked import OvercookedCompoundGame, OvercookedNativeGame, OvercookedOptionsGame
from omjax.options import cleanup, harvest, overcooked
from omjax.options.libraries import guard_variant, library_of
from omjax.options.menu import MenuItem
from omjax.options.records import RecordTable
from omjax.options.schema import Schema
from omjax.options.synthesis import Guard
from omjax.prompts.interface import INTERFACES

ALIASES = MappingProxyType({
    "clean_up": "cleanup", "commons_harvest": "harvest", "commons_harvest__open": "harvest",
    "overcooked_ai": "overcooked",
})
"""Other accepted spellings -> canonical name."""

GUARD_DIR = os.path.join(os.path.dirname(os.path.abspath(overcooked.__file__)), "guards")


@runtime_checkable
class GameLibrary(Protocol):
    """What a game's option library provides (the Overcooked module, a Melting Pot library set).

    SCHEMA: the option library (options with contracts, read set, effect and transient features).
    VARIANTS: the layouts / candidate libraries it supports; VARIANTS[0] is the default.
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


_LIBRARIES: dict[str, GameLibrary] = {"overcooked": overcooked, "cleanup": cleanup.LIBRARY, "harvest": harvest.LIBRARY}


def canonical_game(name: str) -> str:
    """The canonical name of a game or of one of its aliases."""
    if name in GAMES:
        return name
    if name in ALIASES:
        return ALIASES[name]
    raise ValueError(f"unknown game {name!r}; known games: {', '.join(GAMES)} "
                     f"(also accepted: {', '.join(sorted(ALIASES))})")


def library(game: str) -> GameLibrary:
    """The option library of `game` (canonical name or alias)."""
    return _LIBRARIES[canonical_game(game)]


def resolve_variant(lib: GameLibrary, game: str, variant: str | None) -> str:
    if variant is None:
        return lib.VARIANTS[0]
    if variant not in lib.VARIANTS:
        raise ValueError(f"game {game!r} has no layout/variant {variant!r}; known: {', '.join(lib.VARIANTS)}")
    return variant


HAND_GUARD_DIR = os.path.join(GUARD_DIR, "hand")
"""Hand-selected guard sets (`env.guards=hand`), the interface the paper's ablations ran on
(§6.1): per option only the preconditions a person reads off its contract (Overcooked: the held
item; Melting Pot: being in the region or patch the option walks to), no failure-reason guards,
no target-state guards, no support counts from a burn-in."""


def guard_path(game: str, variant: str, hand: bool = False) -> str:
    """Path of the shipped guard file of a game variant (synthesized, or the hand-selected set)."""
    return os.path.join(HAND_GUARD_DIR if hand else GUARD_DIR, f"{canonical_game(game)}_{variant}.jsonl")


def guards_file(env: EnvConfig, variant: str | None = None) -> str:
    """The guard file an options game's menus use: `env.guards`, "" for `none`, the hand-selected
    set for `hand`, or the shipped file of registry variant `variant` (default: the layout and
    option library of `env`, `omjax.options.libraries.guard_variant`); a file that does not exist
    is an error."""
    if env.guards == "none":
        return ""
    variant = variant or guard_variant(env)
    if env.guards == "hand":
        path = guard_path(env.game, variant, hand=True)
        if not os.path.exists(path):
            raise FileNotFoundError(f"no hand-selected guard set for {env.game} {variant}: "
                                    f"{', '.join(sorted(os.listdir(HAND_GUARD_DIR)))}")
        return path
    path = env.guards or guard_path(env.game, variant)
    if not os.path.exists(path):
        raise FileNotFoundError(
            f"guard file {path} not found: run `omjax guards --game {env.game} --layout {variant}` "
            "or set env.guards=none for the unfiltered menu")
    return path


def _overcooked(env: EnvConfig, interface: str) -> Game:
    lib = library_of(env)
    if interface == "options":
        return OvercookedOptionsGame(env.layout, env.horizon, guards_file(env), env.reward_shaping,
                                     option_library=lib, start_held=env.start_held, menu_format=env.menu_format)
    if interface == "native":
        return OvercookedNativeGame(env.layout, env.horizon, env.reward_shaping, start_held=env.start_held)
    return OvercookedCompoundGame(env.layout, env.horizon, env.reward_shaping, option_library=lib,
                                  start_held=env.start_held)


def _meltingpot(env: EnvConfig, interface: str) -> Game:
    game = canonical_game(env.game)
    resolve_library(game, env.layout)  # the layout must be the substrate or a library name
    variant = library_of(env)
    if interface == "options":
        return MeltingPotOptionsGame(game, env.horizon, variant, guards_file(env, variant), env.reward_shaping,
                                     env.prompt_advice, env.menu_format)
    if interface == "native":
        return MeltingPotNativeGame(game, env.horizon, env.reward_shaping, env.prompt_advice)
    return MeltingPotCompoundGame(game, env.horizon, variant, env.reward_shaping, env.prompt_advice)


_FACTORIES = {"overcooked": _overcooked, "cleanup": _meltingpot, "harvest": _meltingpot}


def layout_agents(game: str, layout: str) -> int:
    """How many agents play `layout` of `game`, read from the Overcooked layout file or the
    Melting Pot substrate config (no engine is built). A Melting Pot layout is the substrate
    name or one of the game's option-library variants. ValueError naming what is accepted."""
    game = canonical_game(game)
    if game == "overcooked":
        known = list_layouts()
        if layout not in known:
            raise ValueError(f"no Overcooked layout {layout!r}; with shipped guards: {', '.join(overcooked.VARIANTS)} "
                             f"(all {len(known)} layouts are the *.layout files in {layouts_dir()})")
        return load_layout(layout).num_agents
    resolve_library(game, layout)
    return len(config_module(SUBSTRATES[game]).get_config().default_player_roles)


def check_env(env: EnvConfig) -> None:
    """`env.layout` exists for `env.game` and has `env.n_agents` agents, else a ConfigError
    naming the key (what the CLIs check before any model or engine loads)."""
    try:
        agents = layout_agents(env.game, env.layout)
    except ValueError as err:
        raise ConfigError(f"env.layout: {err}") from None
    if env.n_agents != agents:
        raise ConfigError(f"env.n_agents: must be {agents}: {env.game} layout {env.layout!r} has {agents} agents, "
                          f"got {env.n_agents}")


def make_game(env: EnvConfig, interface: str) -> Game:
    """The `Game` of `env.game` under the action interface `interface` (every game has all of
    `omjax.prompts.interface.INTERFACES`); `env` must pass `check_env`."""
    if interface not in INTERFACES:
        raise ValueError(f"no action interface {interface!r} for game {env.game!r}; known: {', '.join(INTERFACES)}")
    check_env(env)
    return _FACTORIES[canonical_game(env.game)](env, interface)


def make_group_game(envs: Sequence[EnvConfig], interface: str) -> Game:
    """The game of a group of training seeds, seed slot s playing `envs[s]` (its seed's env, the
    library drawn): the one game of every slot when the envs are equal, else a `GroupGame` of one
    game per distinct env, shared by the slots that play it."""
    built: dict[EnvConfig, Game] = {}
    for env in envs:
        if env not in built:
            built[env] = make_game(env, interface)
    return next(iter(built.values())) if len(built) == 1 else GroupGame([built[env] for env in envs])
