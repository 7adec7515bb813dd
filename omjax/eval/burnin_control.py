"""The §5.1 burn-in control: the same burn-in with a frozen LLM choosing instead of the uniform policy.

The paper replaces Stage 2's uniform-over-menu policy with a frozen pretrained LLM and reports that
coverage collapses (2 guards vs 36, at about 400x the cost). `llm_burnin` plays the same solo and
team episodes as `omjax.options.overcooked.burnin` on the guardless menu, but every decision is
the frozen base's (the rollout engine's prompts, letters and sampling), and logs the same records;
`compare_burnins` synthesises guards from both and times them.
"""

from __future__ import annotations

import time

import jax
import jax.numpy as jnp
import numpy as np

from omjax.options import overcooked as oc
from omjax.options.records import RecordTable
from omjax.options.schema import SUCCESS
from omjax.options.synthesis import synthesize
from omjax.games.overcooked import OvercookedOptionsGame
from omjax.train.rollout import collect


class RecordingOvercookedGame(OvercookedOptionsGame):
    """An `OvercookedOptionsGame` on the guardless menu that also keeps every step's option records."""

    def __init__(self, layout: str, horizon: int, active=None, library: str = "lib_a"):
        super().__init__(layout, horizon, "", active=active, option_library=library)
        lib, acting = self.lib, jnp.asarray(self.active)
        self._step_rec = jax.jit(jax.vmap(lambda s, ex, c: lib.option_step(s, ex, c, acting)))

    def reset(self, seeds):
        super().reset(seeds)
        self.records = []  # one StepRecord [K, A] per env step

    def step(self, choices):
        states, self.execs, rec, sparse, _ = self._step_rec(self.states, self.execs, jnp.asarray(choices, jnp.int32))
        self.records.append(rec)
        return self._stepped(states, sparse, jnp.sum(sparse, axis=-1))

    def table(self, ep_offset: int, solo: bool) -> RecordTable:
        """The records of the last reset's K episodes (episode ep_offset + k)."""
        stacked = jax.tree.map(lambda *xs: np.stack(xs, axis=1), *self.records)  # [K, T, A]
        return oc.records_to_table(self.lib, stacked, ep_offset, solo, self.n_episodes)


def llm_burnin(trainer, bank, layout: str, solo_episodes: int, team_episodes: int, seed: int,
               horizon: int, library: str = "lib_a") -> RecordTable:
    """Stage 2 with `trainer`'s decider (under `bank`, e.g. the frozen base) choosing on the
    guardless menu: solo episodes of each agent in turn (the others stand still), then team ones."""
    n = oc.library(layout, library).num_agents
    tables, ep = [], 0
    for a in range(n):
        count = len(range(a, solo_episodes, n))
        if count:
            game = RecordingOvercookedGame(layout, horizon, active=np.arange(n) == a, library=library)
            collect(game, trainer.decider, trainer.model.params, bank, count, jax.random.PRNGKey(seed + a), seed, a)
            tables.append(game.table(ep, solo=True))
            ep += count
    if team_episodes:
        game = RecordingOvercookedGame(layout, horizon, library=library)
        collect(game, trainer.decider, trainer.model.params, bank, team_episodes, jax.random.PRNGKey(seed + n),
                seed, n)
        tables.append(game.table(ep, solo=False))
    return RecordTable.concat(tables)


def compare_burnins(trainer, bank, layout: str, solo_episodes: int, team_episodes: int, seed: int,
                    horizon: int) -> dict:
    """Guards found and wall time of the uniform and the LLM burn-in over the same episodes (the
    uniform one's wall time includes compiling its jitted burn-in)."""
    out = {}
    for name in ("uniform", "llm"):
        t0 = time.perf_counter()
        if name == "uniform":
            table = oc.burnin(layout, solo_episodes, team_episodes, seed, progress=False, horizon=horizon)
        else:
            table = llm_burnin(trainer, bank, layout, solo_episodes, team_episodes, seed, horizon)
        secs = time.perf_counter() - t0
        guards = synthesize(table, oc.SCHEMA)
        succeeded = sorted({oc.SCHEMA.options[o].name for o in np.unique(table.opt[table.outcome == SUCCESS])})
        out[name] = {"records": len(table), "guards": len(guards), "wall_s": round(secs, 2),
                     "options_that_succeeded": succeeded}
    out["cost_ratio"] = round(out["llm"]["wall_s"] / max(out["uniform"]["wall_s"], 1e-9), 1)
    return out
