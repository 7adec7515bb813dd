"""Option machinery shared by the Melting Pot libraries (`omjax.options.cleanup`, `harvest`).

A library is an `MPLibrary` (`library`): a `Schema` (the 4-part contract of
`omjax.options.schema`) plus, per option, the executor `kind` and the target class it is
instantiated over; a game's candidate libraries form one `MeltingPotGameLibrary` (`game`). The
modules supply what the kinds mean on the real engine's `SymbolicState`:

* `paths`: static substrate facts (`Ctx`, `make_ctx`), all-pairs walking distances, goal
  distance maps and the walk step (avoid other avatars locally, strafe instead of turning).
* `beam`: Cleanup's cleaning beam (lanes, `BeamMap` of every pose on a dirt grid, firing poses).
* `features`, `encoding`, `memo`: targets per class (`apple` and `dirt`: the cells inside the
  agent's view window; `patch`: every Harvest patch anchor), read-set / transient feature values
  and their int8 codes, memoised per env step on the state.
* `goals`, `executor`: where each kind's walk ends, live failures (`TargetAbsent`, `NoPath`),
  and the raw closed-loop executor (`start`, `act`, `advance`; see `executor` for the kinds).
* `menus`: the guardless instantiation, guard-filtered lettered menus, batched menus for the JAX
  guard evaluator, the start-state menu.
* `burnin`: Stage 2 (uniform random over the guardless menu), each episode a pure function of
  its key, run in a fork of a canonical process (`omjax.envs.meltingpot.isolated`) so the
  records are reproducible and a burn-in of n + n episodes is a prefix of every larger one.

Effects are evaluated by `omjax.options.schema.effect_holds` on effect features measured at
initiation (pre) and at termination (post). Counters are measured relative to the initiation
(`my_apples` is "more" iff the agent ate during this execution), so every acquire effect is a
delta: a no-op execution leaves every feature at its initiation value. (The Overcooked library
takes pre/post around its final INTERACT; here the promised change -- a walk, an apple eaten on
the way in -- spans the whole execution, so pre is taken at initiation.)

Training-side API (one env, one agent; the game loops over its K envs and A agents, see
`omjax.games.meltingpot`), re-exported here: `menu(lib, ctx, state, agent, guards, rng)`,
`start(...)`, `act(...)`, `advance(...)`.
"""

from omjax.options.meltingpot.beam import BeamMap, dirt_in_beam, in_beam, in_beam_reference, state_beam
from omjax.options.meltingpot.burnin import assemble, episode_keys, episodes
from omjax.options.meltingpot.executor import MAX_OPTION_STEPS, Execution, act, advance, common_effects, start
from omjax.options.meltingpot.features import DIST_VALUES, at, dist_bucket, partner_transient, targets
from omjax.options.meltingpot.game import MeltingPotGameLibrary
from omjax.options.meltingpot.goals import live_failures
from omjax.options.meltingpot.library import MPLibrary, MPOption, make_library, own_guards, to_union
from omjax.options.meltingpot.menus import hidden_mask_batch_jax, instances_for, menu, menu_batch, start_menu
from omjax.options.meltingpot.paths import Ctx, make_ctx

__all__ = [
    "DIST_VALUES", "MAX_OPTION_STEPS", "BeamMap", "Ctx", "Execution", "MPLibrary", "MPOption", "MeltingPotGameLibrary",
    "act", "advance", "assemble", "at", "common_effects", "dirt_in_beam", "dist_bucket", "episode_keys", "episodes",
    "hidden_mask_batch_jax", "in_beam", "in_beam_reference", "instances_for", "live_failures", "make_ctx",
    "make_library", "menu", "menu_batch", "own_guards", "partner_transient", "start", "start_menu", "state_beam",
    "targets", "to_union",
]
