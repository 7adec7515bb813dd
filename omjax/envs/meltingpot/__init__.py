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

Driving K option-level rollouts (what the trainer does; `tests/envs/test_meltingpot_rollout.py`
runs exactly this loop). Options are call-and-return and end at different steps for different
agents, so the loop runs per env step, and only agents without a running option decide:

    from omjax.options import cleanup, meltingpot_common as mp    # or harvest
    lib = cleanup.library("lib_a"); ctx = mp.make_ctx(CleanUp(), cleanup.regions(...))
    pool = EnvPool("cleanup", K); states = pool.reset(seeds)
    running[k][a] = None for every env k and agent a
    until every state is done:
        for every (k, a) with running[k][a] None:                   # a decision point
            items, insts = mp.menu(lib, ctx, states[k], a, guards, letter_rng[k][a])
            prompt = observation_text(...) + "\n" + render_menu(items); the LLM picks a letter
            running[k][a] = mp.start(lib, ctx, states[k], a, insts[item.index])
        actions[k, a] = mp.act(lib, ctx, running[k][a], states[k])  # one primitive each
        states = pool.step(actions)                                  # K engines in parallel
        for every (k, a):
            running[k][a], outcome, _ = mp.advance(lib, ctx, running[k][a], actions[k, a], states[k])
            if outcome is not None: running[k][a] = None            # decides again next step

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
