"""PA-MAGRPO numeric core (Algorithm 1, lines 5-7): cohort advantages, clipped surrogate, KL.

Pure functions over arrays; the agent axis never appears here (the update vmaps over it).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

#: Cohort standard deviations at or below this count as zero spread (all rollouts scored alike).
ZERO_SPREAD_TOL = 1e-6


def group_advantages(returns: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Group-relative advantage A_k = (R_k - mean) / std over the K rollouts of one cohort.

    Args:
      returns: [K] team return of each joint rollout.
    Returns:
      advantages [K]; all zero when the cohort has zero spread (no rollout is better than
      another, so there is nothing to learn and dividing would give NaN), and
      zero_spread, a bool scalar saying so.
    """
    returns = jnp.asarray(returns, jnp.float32)  # [K]
    std = jnp.std(returns)
    zero_spread = std <= ZERO_SPREAD_TOL
    safe_std = jnp.where(zero_spread, 1.0, std)
    adv = jnp.where(zero_spread, 0.0, (returns - jnp.mean(returns)) / safe_std)  # [K]
    return adv, zero_spread


def masked_mean(x: jax.Array, mask: jax.Array) -> jax.Array:
    """Mean of x over entries where mask is true; 0 when nothing is valid."""
    mask = mask.astype(x.dtype)
    return jnp.sum(x * mask) / jnp.maximum(jnp.sum(mask), 1.0)


def clipped_surrogate(
    logp: jax.Array, old_logp: jax.Array, advantage: jax.Array, clip_eps: float
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Per-decision PPO objective -min(rho A, clip(rho, 1-eps, 1+eps) A).

    Args:
      logp: [B] log pi_theta(z | o) of the chosen option under the adapter being trained.
      old_logp: [B] the same under the adapter that collected the rollouts.
      advantage: [B] cohort advantage of the rollout each decision came from.
    Returns:
      loss [B], ratio rho [B], clipped [B] (whether the clipped branch was the active one).
    """
    ratio = jnp.exp(logp - old_logp)  # [B]
    unclipped = ratio * advantage
    clipped_ratio = jnp.clip(ratio, 1.0 - clip_eps, 1.0 + clip_eps)
    clipped_obj = clipped_ratio * advantage
    loss = -jnp.minimum(unclipped, clipped_obj)
    was_clipped = clipped_obj < unclipped
    return loss, ratio, was_clipped


def target_kl(dist: jax.Array, ref_dist: jax.Array, dist_mask: jax.Array, option_advantage: jax.Array,
              kl_coef: float) -> jax.Array:
    """KL(pi* || pi_theta) to the KL-regularised optimum pi*(a) ∝ pi_ref(a) exp(A_a / kl_coef) of
    E_pi[A] - kl_coef KL(pi || pi_ref) over an explicit menu distribution (`train.objective: {kind: target}`).

    Not in the paper, whose loss is the clipped surrogate. Both have pi* as their fixed point
    when every entry's advantage is known, but the surrogate's gradient in the logits,
    pi (A - pi.A), vanishes on entries the policy gives little mass to (a base with a favourite
    letter hardly moves toward a well-named option at another letter), while this one's,
    pi_theta - pi*, does not: the regression target of AWR / MPO's projection step, here with the
    frozen base as the prior. The target depends on pi_ref and the advantages only, not on the
    policy that collected the decision.

    Args:
      dist, ref_dist: [B, N] normalised log-probs over the N entries under the adapter being
        trained and the frozen base.
      dist_mask: [B, N] which entries are real.
      option_advantage: [B, N] advantage of each entry.
      kl_coef: the regularisation weight beta (> 0).
    Returns:
      [B] KL(pi* || pi_theta) per decision (0 once the adapter is the target).
    """
    logits = jnp.where(dist_mask, ref_dist + option_advantage / kl_coef, -jnp.inf)
    target = jax.nn.log_softmax(logits, axis=-1)  # [B, N]
    terms = jnp.where(dist_mask, jnp.exp(target) * (target - jnp.where(dist_mask, dist, 0.0)), 0.0)
    return jnp.sum(terms, axis=-1)


def kl_exact(logp_dist: jax.Array, ref_logp_dist: jax.Array, dist_mask: jax.Array) -> jax.Array:
    """Exact KL(pi || pi_ref) between two distributions over the same finite menu.

    Used in letter mode, where the policy is an explicit softmax over the menu letters.

    Args:
      logp_dist, ref_logp_dist: [B, M] normalised log-probabilities over M menu slots.
      dist_mask: [B, M] which slots are real menu entries.
    Returns:
      [B] KL per decision.
    """
    p = jnp.exp(logp_dist)
    terms = jnp.where(dist_mask, p * (logp_dist - ref_logp_dist), 0.0)
    return jnp.sum(terms, axis=-1)


def letter_marginal_kl(logp_dist: jax.Array, dist_mask: jax.Array, valid: jax.Array) -> jax.Array:
    """KL(m || u) between the policy's letter marginal m over a batch of letter-mode decisions
    and the uniform marginal u (the update's `letter_kl` diagnostic).

    m(l) is the mean over the valid decisions of pi(l | o_d); u(l) the mean of 1 / n_d over the
    decisions whose menu has a slot l (n_d menu entries). Under the per-decision letter shuffle a
    policy that reads the menu has m = u in expectation, whatever option it prefers, so the term
    is blind to what the menu says and penalises only a habit for letters: it is 0 for a policy
    uniform over each menu and at most log M for one that always answers the same letter.

    Args:
      logp_dist: [B, M] normalised log-probabilities over M menu slots.
      dist_mask: [B, M] which slots are real menu entries.
      valid: [B] which rows are decisions (not padding).
    Returns:
      [] the KL; 0 when no row is valid.
    """
    rows = (dist_mask & valid[:, None]).astype(logp_dist.dtype)  # [B, M]
    n = jnp.maximum(jnp.sum(valid.astype(logp_dist.dtype)), 1.0)
    m = jnp.sum(jnp.exp(logp_dist) * rows, axis=0) / n  # [M]
    u = jnp.sum(rows / jnp.maximum(jnp.sum(rows, axis=-1, keepdims=True), 1.0), axis=0) / n  # [M]
    real = (m > 0) & (u > 0)
    safe = lambda x: jnp.where(real, x, 1.0)
    return jnp.sum(jnp.where(real, m * (jnp.log(safe(m)) - jnp.log(safe(u))), 0.0))


def kl_k3(token_logp: jax.Array, ref_token_logp: jax.Array, token_mask: jax.Array) -> jax.Array:
    """Per-token k3 estimator of KL(pi || pi_ref) summed over a sampled reply.

    k3 = exp(ref - cur) - (ref - cur) - 1 is unbiased under samples from pi and never negative
    (Schulman's estimator, as used by GRPO). Used in sample mode, where only the sampled tokens'
    log-probs are known.

    Args:
      token_logp, ref_token_logp: [B, L] log-probs of the reply tokens.
      token_mask: [B, L] which positions are reply tokens.
    Returns:
      [B] KL estimate per decision.
    """
    delta = jnp.where(token_mask, ref_token_logp - token_logp, 0.0)
    return jnp.sum(jnp.where(token_mask, jnp.exp(delta) - delta - 1.0, 0.0), axis=-1)
