"""Games: K parallel episodes of one game under one action interface (what the trainer drives).

* `base`: the `Game` interface (reset, step, needs_decision, menu, system / user messages, state
  label and the game's `state_labels()`, fallback, reply parsing, positions, walls, per-agent
  returns, `extras()` for game-specific probes).
* `overcooked`: `OvercookedGame` and its three interfaces (`OvercookedOptionsGame`,
  `OvercookedNativeGame`, `OvercookedCompoundGame`).
* `meltingpot`: `MeltingPotGame` (Cleanup and Commons Harvest, K engines in worker processes)
  and its three interfaces.
* `group`: `GroupGame`, the games of a group of training seeds (one per option library) as one.
* `registry`: canonical game names and aliases, each game's option library and guard files,
  `make_game(env_cfg, interface)`, `make_group_game(seed_envs, interface)`.
* `cli`: `omjax burnin | guards | menu --game <g>` (Stages 2-4 of the option pipeline).
"""

from omjax.games.base import Game
from omjax.games.group import GroupGame
from omjax.games.registry import GAMES, canonical_game, guard_path, guards_file, library, make_game, make_group_game

__all__ = ["GAMES", "Game", "GroupGame", "canonical_game", "guard_path", "guards_file", "library", "make_game",
           "make_group_game"]
