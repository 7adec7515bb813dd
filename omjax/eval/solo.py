"""The §6.4 solo test of trained LLM policies: each agent alone in the kitchen, on held-out seeds.

`solo_test_policy` plays every held-out seed once with the whole team and once per agent alone,
through the same engine, prompts and sampling as training, and returns a `SoloReport` in
deliveries. Alone means the partner is ABSENT (`partner="absent"`, the default): the JAX engine
is agent-count generic, so the agent plays a one-player state of the same layout
(`alone_layout`: the same kitchen, only that agent's start pose) with its own adapter.
`partner="still"` keeps the other bodies at their start poses, never deciding (they can block a
corridor; the report says which variant ran).
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
import numpy as np

from omjax.eval.audits import SoloReport
from omjax.eval.option_rollout import alone_layout
from omjax.games.overcooked import OvercookedOptionsGame
from omjax.games.registry import guards_file
from omjax.options.libraries import library_of
from omjax.train.rollout import collect

PARTNER_MODES = ("absent", "still")


def solo_test_policy(trainer, bank, seeds: Sequence[int], partner: str = "absent") -> SoloReport:
    """Team and per-agent-alone deliveries of the policy (`trainer`'s model and decider, `bank`'s
    adapters) on every seed, in the trainer's Overcooked layout, option library and horizon."""
    env = trainer.cfg.env
    if env.game != "overcooked":
        raise ValueError(f"the solo test is defined for Overcooked layouts, not {env.game!r}")
    if partner not in PARTNER_MODES:
        raise ValueError(f"partner must be one of {PARTNER_MODES}, got {partner!r}")
    n, guards, lib = env.n_agents, guards_file(env), library_of(env)
    n_adapters = jax.tree.leaves(bank)[0].shape[0]

    def alone(a):
        if partner == "still":
            return OvercookedOptionsGame(env.layout, env.horizon, guards, active=np.arange(n) == a,
                                         option_library=lib), bank
        # The lone agent is agent 0 of its one-player game: give it agent a's adapter.
        own = jax.tree.map(lambda x: x[a:a + 1], bank) if n_adapters > 1 else bank
        return OvercookedOptionsGame(alone_layout(env.layout, a), env.horizon, guards, option_library=lib), own

    conditions = [(OvercookedOptionsGame(env.layout, env.horizon, guards, option_library=lib), bank)]
    conditions += [alone(a) for a in range(n)]
    totals = np.zeros((len(conditions), len(seeds)))
    for c, (game, adapters) in enumerate(conditions):
        for j, seed in enumerate(seeds):
            collect(game, trainer.decider, trainer.model.params, adapters, 1, jax.random.PRNGKey(seed), seed, 0)
            totals[c, j] = game.agent_returns()[0].sum()  # deliveries, whatever the reward shaping
    return SoloReport(team=totals[0], solo=totals[1:], partner=partner)
