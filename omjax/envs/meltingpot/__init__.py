"""Melting Pot `clean_up` and `commons_harvest__open` through the real dm-meltingpot engine.

Pieces (each module's docstring has the details):

* `adapter`: `CleanUp()`, `CommonsHarvest()` (or `make("cleanup" | "harvest")`) with
  `reset(seed) -> SymbolicState` and `step(actions int [A]) -> SymbolicState`. The state holds
  avatar positions/facings/alive, apple and dirt grids, per-Harvest-patch apple counts, and the
  last step's per-agent reward, apples eaten and dirt cleaned; `layout` holds walls, river,
  shore, orchard and patches. Actions are indices into `substrate.action_names`.
* `text`: the per-agent text observation (`observation_text`) and the primitive-letter
  interface (`primitive_actions`: A-I in clean_up, A-H in Harvest).
* `probes`: per-agent apples, cleaning, visit counts, Harvest patches alive per step, call ratio.
* `workers`: `EnvPool(game, K)`, K episodes stepped concurrently in worker processes; a crashed
  worker is reported as a `WorkerCrash` (slot, seed, step, message) and the others carry on.

Driving K option-level rollouts (what the trainer does). Options are call-and-return and end
at different steps for different agents, so the loop is per env step, not per decision:

    pool = EnvPool("cleanup", K); states = pool.reset(seeds)
    lib = omjax.options.cleanup                   # or omjax.options.harvest
    running = [[None] * A for _ in range(K)]      # current Execution per env and agent
    while any(s.done is False for s in live states):
        for k, a with running[k][a] is None:     # only these agents decide this step
            menu = lib.menu(states[k], a, guards, rng_k_a)  -> MenuItem list (+ instances)
            text = observation_text(...) + render_menu(menu); LLM picks an item
            running[k][a] = lib.start(states[k], a, item)    # Execution (records initiation)
        actions[k, a] = lib.act(running[k][a], states[k])    # one primitive per agent
        states = pool.step(actions)
        for each (k, a): done, outcome = lib.finish_if_done(running[k][a], states[k])
            if done: running[k][a] = None        # that agent decides again next step

Executors re-plan every step on the current state (BFS over the walkable map with the other
avatars as obstacles, then turns), so an agent whose option ends early is free at the very next
step while its partners keep executing theirs.

Reproducibility. Melting Pot 2.4.1 is not a pure function of its seed: Lua iterates game objects
in address-hash order, so which avatar gets which spawn cell, where a zapped avatar respawns and
which apple a regrowth draw goes to vary between builds of the same seed. The adapter numbers
agents by spawn cell (see `adapter`), which makes clean_up reproducible as long as no avatar is
zapped and no apple regrows; Commons Harvest's spawn cells themselves vary with the build.
Whatever varies, the symbolic state is always the engine's own truth.
"""

from omjax.envs.meltingpot.adapter import (ORIENTATIONS, CleanUp, CommonsHarvest, MeltingPotEnv,
                                           SymbolicState, make)

__all__ = ["ORIENTATIONS", "CleanUp", "CommonsHarvest", "MeltingPotEnv", "SymbolicState", "make"]
