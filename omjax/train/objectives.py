"""Policy-objective plug-ins: what the update minimises over a minibatch of decisions.

Each kind is a pure function of one minibatch, selected by `train.objective.kind`
(`make_agent_update` reads it from `UpdateSettings.objective`):

    surrogate, clipped, kl_weight = OBJECTIVE_FNS[kind](cur, ref, old_logp, advantage, entry_adv, settings)

`cur`, `ref` are the adapter's and the frozen base's `PolicyOut` over the minibatch; the update's
loss is `masked_mean(surrogate) + kl_weight * masked_mean(KL(cur || ref))`, and `clipped` [mb]
feeds the clip-fraction metric. `entry_adv` is [mb, N], every entry of each decision's menu
distribution, for kinds that declare `needs_entries` (None otherwise).

`clip` is the paper's (PPO clip + KL); `target` (not in the paper; docs/departures.md) regresses
onto the KL-regularised optimum over the whole menu. A new kind is added with `register_objective`.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp

from omjax.config import OBJECTIVES
from omjax.train import grpo


def clip_objective(cur: Any, ref: Any, old_logp: jax.Array, advantage: jax.Array, entry_adv: jax.Array | None,
                   settings: Any) -> tuple[jax.Array, jax.Array, float]:
    """The paper's: -min(rho A, clip(rho, 1 +- eps) A) at each sampled decision, plus kl_coef x KL."""
    del ref, entry_adv
    surrogate, _, clipped = grpo.clipped_surrogate(cur.logp, old_logp, advantage, settings.clip_eps)  # [mb] each
    return surrogate, clipped, settings.kl_coef


def target_objective(cur: Any, ref: Any, old_logp: jax.Array, advantage: jax.Array, entry_adv: jax.Array,
                     settings: Any) -> tuple[jax.Array, jax.Array, float]:
    """KL(pi* || pi_theta), pi* ∝ pi_ref exp(A / kl_coef) over every entry (`grpo.target_kl`); the
    KL to the reference sits inside the target, so it gets no weight of its own."""
    del old_logp, advantage
    surrogate = grpo.target_kl(cur.dist, ref.dist, cur.dist_mask, entry_adv, settings.kl_coef)  # [mb]
    return surrogate, jnp.zeros(surrogate.shape, bool), 0.0


class Objective(NamedTuple):
    fn: Callable[..., tuple[jax.Array, jax.Array, float]]
    needs_entries: bool
    """Whether it reads every menu entry's advantage (`DecisionBatch.option_advantage`)."""


OBJECTIVE_FNS: dict[str, Objective] = {"clip": Objective(clip_objective, False),
                                       "target": Objective(target_objective, True)}
"""`train.objective.kind` -> its loss."""


def register_objective(kind: str, settings: type, fn: Callable[..., tuple[jax.Array, jax.Array, float]],
                       needs_entries: bool = False) -> None:
    """Add an objective kind: `settings`, a frozen dataclass whose `kind` field defaults to
    `kind` (the `train.objective` section), and `fn` with `clip_objective`'s signature."""
    if kind in OBJECTIVE_FNS:
        raise ValueError(f"objective kind {kind!r} is already registered")
    OBJECTIVES[kind] = settings
    OBJECTIVE_FNS[kind] = Objective(fn, needs_entries)
