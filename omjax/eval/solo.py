"""The §6.4 solo test of trained LLM policies: each agent alone in the kitchen, on held-out seeds.

`solo_test_policy` plays every held-out seed once with the whole team and once per agent alone
(the rollout engine's `OvercookedOptionsGame` with a mask of acting agents: the others stand still at
their start pose and are never asked to decide), through the same engine, prompts and sampling
as training, and returns a `SoloReport` in deliveries.
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
import numpy as np

from omjax.eval.audits import SoloReport
from omjax.games.overcooked import OvercookedOptionsGame
from omjax.games.registry import guards_file
from omjax.train.rollout import collect


def solo_test_policy(trainer, bank, seeds: Sequence[int]) -> SoloReport:
    """Team and per-agent-alone deliveries of the policy (`trainer`'s model and decider, `bank`'s
    adapters) on every seed, in the trainer's Overcooked layout and horizon."""
    env = trainer.cfg.env
    if env.game != "overcooked":
        raise ValueError(f"the solo test is defined for Overcooked layouts, not {env.game!r}")
    n = env.n_agents
    conditions = [np.ones(n, bool)] + [np.arange(n) == a for a in range(n)]
    totals = np.zeros((len(conditions), len(seeds)))
    for c, active in enumerate(conditions):
        game = OvercookedOptionsGame(env.layout, env.horizon, guards_file(env), active=active)
        for j, seed in enumerate(seeds):
            batch = collect(game, trainer.decider, trainer.model.params, bank, 1, jax.random.PRNGKey(seed), seed, 0)
            totals[c, j] = batch.returns[0] / game.delivery_reward
    return SoloReport(team=totals[0], solo=totals[1:])
