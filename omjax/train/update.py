"""The PA-MAGRPO update as one jitted function, vmapped over the agent axis of the adapter bank.

The update is written for one agent against an abstract policy function

    policy_fn(base, lora | None, inputs) -> PolicyOut

(`base` is the frozen backbone's parameters, shared by all agents; `lora=None` is the frozen
base alone, i.e. the reference policy), so the same code trains LLM adapters and small test
policies. `make_bank_update` lifts it with `jax.vmap` over a leading
agent axis of the LoRA tree, the optimizer state and the per-agent decision batches; decision
batches are padded to one length and masked, so agents with different decision counts share one
program. Only agent i's adapter sees agent i's decisions; under `shared_lora` the caller stacks
every agent's decisions into a bank of one.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Literal

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import struct

from omjax.train import grpo
from omjax.train.objectives import OBJECTIVE_FNS


@struct.dataclass
class PolicyOut:
    """What a policy function returns for a batch of B decisions."""

    logp: jax.Array
    """[B] log-probability of the chosen reply under the scored policy."""

    dist: jax.Array
    """[B, M]: letter mode, normalised log-probs over the M menu slots; sample mode, the
    log-prob of each of the M reply tokens."""

    dist_mask: jax.Array
    """[B, M] which entries of `dist` are real (menu slots or reply tokens)."""


PolicyFn = Callable[[Any, Any, Any], PolicyOut]


@struct.dataclass
class DecisionBatch:
    """One agent's decisions of a round, padded to a fixed length B."""

    inputs: Any
    """Pytree of [B, ...] arrays the policy function reads (token ids, masks, menu letters)."""

    advantage: jax.Array
    """[B] cohort advantage of the rollout each decision belongs to."""

    valid: jax.Array
    """[B] false on padding rows."""

    old_logp: jax.Array | None = None
    """[B] log-prob of each decision under the policy that collected it (the rollout's); None:
    the update scores the batch under the adapter it starts from (the same numbers, one more
    forward over every decision)."""

    option_advantage: jax.Array | None = None
    """[B, M] letter mode: the advantage of every menu slot, for objectives that read them
    (`objectives.Objective.needs_entries`)."""


@struct.dataclass
class UpdateMetrics:
    """Per gradient step statistics, each [E, n_minibatches] (plus the agent axis when vmapped)."""

    loss: jax.Array
    ratio: jax.Array
    """Mean importance ratio over the minibatch's valid decisions (1 before the first step)."""
    kl: jax.Array
    """Mean KL(pi_theta || pi_ref) over the minibatch's valid decisions."""
    letter_kl: jax.Array
    """KL(letter marginal || uniform) over the minibatch (`grpo.letter_marginal_kl`): how far the
    policy leans on letters rather than options, which a policy that reads its shuffled menu
    does not (a diagnostic; not in the loss)."""
    clip_frac: jax.Array
    grad_norm: jax.Array
    """Global gradient norm before clipping."""
    n_valid: jax.Array
    stepped: jax.Array
    """Whether the optimizer stepped (false on all-padding minibatches)."""


@dataclasses.dataclass(frozen=True)
class UpdateSettings:
    clip_eps: float
    """PPO clip range."""
    kl_coef: float
    """Weight beta of the KL penalty."""
    epochs: int
    """PPO epochs E."""
    minibatch_size: int
    """Decisions per gradient step."""
    kl_kind: Literal["exact", "k3"]
    """`exact` for explicit menu distributions (letter mode), `k3` for sampled token sequences."""
    objective: str = "clip"
    """`train.objective.kind`: the loss of each minibatch (`objectives.OBJECTIVE_FNS`)."""


def make_optimizer(lr: float, max_grad_norm: float, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8):
    """Adam with per-agent global-norm clipping (the clip sits inside the vmapped update)."""
    return optax.chain(optax.clip_by_global_norm(max_grad_norm), optax.adam(lr, b1=b1, b2=b2, eps=eps))


def _chunks(tree: Any, n: int) -> Any:
    """[B, ...] -> [n, B // n, ...] on every leaf."""
    return jax.tree.map(lambda x: x.reshape((n, x.shape[0] // n) + x.shape[1:]), tree)


def _unchunk(tree: Any) -> Any:
    return jax.tree.map(lambda x: x.reshape((-1,) + x.shape[2:]), tree)


def _skippable_map(fn: Callable[[Any], Any], chunks: Any, n_active: jax.Array) -> Any:
    """`lax.map(fn, chunks)` over leading-axis chunks, computing only the first `n_active`
    (zeros for the rest). `n_active` is the same for every agent (not vmapped), so under the
    agent vmap the `cond` stays a real branch and padding chunks cost nothing."""
    first = jax.tree.map(lambda x: x[0], chunks)
    shapes = jax.eval_shape(fn, first)
    skip = lambda _: jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), shapes)
    n = jax.tree.leaves(chunks)[0].shape[0]
    return jax.lax.map(lambda ic: jax.lax.cond(ic[0] < n_active, fn, skip, ic[1]),
                       (jnp.arange(n), chunks))


def make_agent_update(policy_fn: PolicyFn, optimizer: optax.GradientTransformation, settings: UpdateSettings,
                      prepare_fn: Callable[[Any, Any], Any] | None = None, on_step: Callable[[], None] | None = None):
    """Build `update(base, lora, opt_state, batch, key, n_active=None) -> (lora, opt_state,
    UpdateMetrics)` for one agent.

    The batch length B must be a multiple of `settings.minibatch_size`; its valid rows come
    first. `n_active` (int32 [], default all) is how many leading minibatches hold valid rows:
    work on the others is skipped, so a batch padded to a fixed length for one compiled program
    costs what its decisions need. Reference log-probs (and old ones when the batch does not
    carry the rollout's, `DecisionBatch.old_logp`) are computed inside, before the first step,
    by the same policy function, so (for a fresh zero-B adapter) the KL is exactly 0 at the
    first step, and so is log(ratio) when the old log-probs are scored here (within float
    rounding of the rollout's forward when they are the rollout's).

    `prepare_fn(base, inputs) -> inputs` runs once per update on every minibatch before
    anything else, without gradient: the place for work that neither the adapter nor the epoch
    changes (the frozen trunk of `lora.top_layers`, see `omjax.models.base.Trunk`).

    `on_step()` is called on the host after each gradient step that is not skipped (once per
    step, not per agent, under the bank's vmap): the update's progress, for a progress bar.
    """
    mb = settings.minibatch_size
    kl_fn = grpo.kl_exact if settings.kl_kind == "exact" else grpo.kl_k3
    objective = OBJECTIVE_FNS[settings.objective]

    def loss_fn(lora, base, inputs, old_logp, ref, advantage, valid, option_adv=None):
        cur = policy_fn(base, lora, inputs)
        ratio = jnp.exp(cur.logp - old_logp)  # [mb]
        # [mb, M] per menu slot -> [mb, L*M] per (state label, slot) entry of the distribution
        entry_adv = (None if option_adv is None
                     else jnp.tile(option_adv, (1, cur.dist.shape[-1] // option_adv.shape[-1])))
        surrogate, clipped, kl_weight = objective.fn(cur, ref, old_logp, advantage, entry_adv, settings)
        kl = kl_fn(cur.dist, ref.dist, cur.dist_mask)  # [mb]
        loss = grpo.masked_mean(surrogate, valid) + kl_weight * grpo.masked_mean(kl, valid)
        letter_kl = (grpo.letter_marginal_kl(cur.dist, cur.dist_mask, valid) if settings.kl_kind == "exact"
                     else jnp.float32(0.0))
        stats = dict(
            ratio=grpo.masked_mean(ratio, valid),
            kl=grpo.masked_mean(kl, valid),
            letter_kl=letter_kl,
            clip_frac=grpo.masked_mean(clipped.astype(jnp.float32), valid),
        )
        return loss, stats

    grad_fn = jax.value_and_grad(loss_fn, has_aux=True)

    def update(base, lora, opt_state, batch: DecisionBatch, key: jax.Array, n_active: jax.Array | None = None):
        b = batch.valid.shape[0]
        if b % mb:
            raise ValueError(f"decision batch length {b} is not a multiple of minibatch_size {mb}")
        n_mb = b // mb
        n_active = jnp.int32(n_mb) if n_active is None else n_active
        # Minibatch-sized chunks bound activation memory to one gradient step's worth.
        chunks = _chunks(batch.inputs, n_mb)  # [n_mb, mb, ...]
        if prepare_fn is not None:
            chunks = jax.lax.stop_gradient(_skippable_map(lambda x: prepare_fn(base, x), chunks, n_active))
        score = lambda lo: jax.lax.stop_gradient(
            _skippable_map(lambda x: policy_fn(base, lo, x), chunks, n_active))
        inputs, ref = _unchunk(chunks), _unchunk(score(None))
        if objective.needs_entries and batch.option_advantage is None:
            raise ValueError(f"objective {settings.objective!r} reads every menu entry's advantage, "
                             "but the batch has none (DecisionBatch.option_advantage)")
        entries = batch.option_advantage if objective.needs_entries else None
        old_logp = _unchunk(score(lora)).logp if batch.old_logp is None else batch.old_logp

        def epoch(carry, epoch_key):
            # Valid decisions first in a seed-drawn order, padding last, so padding fills whole
            # trailing minibatches that are skipped instead of diluting real ones. Row i's draw
            # depends on the key and i only, so the order of an agent's decisions does not depend
            # on how far the batch is padded (a seed trained in a group pads to the group's longest).
            noise = jax.vmap(lambda i: jax.random.uniform(jax.random.fold_in(epoch_key, i)))(jnp.arange(b))
            order = jnp.argsort(jnp.where(batch.valid, noise, 2.0))  # [B]
            idx = order.reshape(n_mb, mb)  # [n_mb, mb]

            def grad_step(carry, rows):
                if on_step is not None:
                    jax.debug.callback(on_step)
                lora, opt_state = carry
                take = lambda x: x[rows]
                valid = batch.valid[rows]
                (loss, stats), grads = grad_fn(
                    lora, base, jax.tree.map(take, inputs), old_logp[rows], jax.tree.map(take, ref),
                    batch.advantage[rows], valid, None if entries is None else entries[rows])
                updates, new_opt = optimizer.update(grads, opt_state, lora)
                new_lora = optax.apply_updates(lora, updates)
                n_valid = jnp.sum(valid)
                stepped = n_valid > 0
                keep = lambda new, prev: jnp.where(stepped, new, prev)
                carry = (jax.tree.map(keep, new_lora, lora), jax.tree.map(keep, new_opt, opt_state))
                metrics = UpdateMetrics(loss=loss, ratio=stats["ratio"], kl=stats["kl"], letter_kl=stats["letter_kl"],
                                        clip_frac=stats["clip_frac"], grad_norm=optax.tree.norm(grads),
                                        n_valid=n_valid, stepped=stepped)
                return carry, metrics

            def skip_step(carry, rows):
                zero = jnp.float32(0.0)
                return carry, UpdateMetrics(loss=zero, ratio=zero, kl=zero, letter_kl=zero, clip_frac=zero,
                                            grad_norm=zero, n_valid=jnp.int32(0), stepped=jnp.bool_(False))

            def step(carry, j_rows):
                j, rows = j_rows
                return jax.lax.cond(j < n_active, grad_step, skip_step, carry, rows)

            return jax.lax.scan(step, carry, (jnp.arange(n_mb), idx))

        (lora, opt_state), metrics = jax.lax.scan(epoch, (lora, opt_state), jax.random.split(key, settings.epochs))
        return lora, opt_state, metrics

    return update


def make_bank_update(policy_fn: PolicyFn, optimizer: optax.GradientTransformation, settings: UpdateSettings,
                     prepare_fn: Callable[[Any, Any], Any] | None = None, on_step: Callable[[], None] | None = None,
                     in_sequence: bool | None = None):
    """Jitted update of the whole adapter bank: the one-agent update mapped over axis 0 of the
    LoRA tree, optimizer state, decision batches ([A, B, ...]) and keys ([A]); the frozen base
    and `n_active` (the most minibatches any agent needs) are shared (not mapped).

    `in_sequence` (default: on a CPU backend) runs the adapters one after another inside the one
    program (`lax.map`) instead of side by side (`vmap`): the same per-adapter arithmetic,
    without the vmapped program's A-times larger intermediates, which on a CPU cost more in cache
    misses than the batching gains (vmap: 0.77x a Python loop over agents, 7 agents). On an
    accelerator, and when the adapter axis is split over several devices, `vmap` is the one.

    `update(base, bank, opt_state, batch, keys, n_active=None) -> (bank, opt_state,
    UpdateMetrics [A, E, n_mb])`
    """
    one = make_agent_update(policy_fn, optimizer, settings, prepare_fn, on_step)
    if in_sequence is None:
        in_sequence = jax.default_backend() == "cpu"
    if in_sequence:
        def mapped(base, bank, opt_state, batch, keys, n_active):
            return jax.lax.map(lambda x: one(base, *x, n_active), (bank, opt_state, batch, keys))
    else:
        mapped = jax.vmap(one, in_axes=(None, 0, 0, 0, 0, None))

    @jax.jit
    def update(base, bank, opt_state, batch: DecisionBatch, keys, n_active=None):
        if n_active is None:
            n_active = batch.valid.shape[1] // settings.minibatch_size
        return mapped(base, bank, opt_state, batch, keys, jnp.asarray(n_active, jnp.int32))

    return update


def active_minibatches(valid: Any, minibatch_size: int) -> int:
    """How many leading minibatches of a [A, B] valid mask (valid rows first) hold decisions."""
    longest = int(np.asarray(valid).sum(axis=-1).max(initial=0))
    return -(-longest // minibatch_size)


def init_opt_state(optimizer: optax.GradientTransformation, lora_bank: Any) -> Any:
    """Per-agent optimizer state with the same leading agent axis as the bank."""
    return jax.vmap(optimizer.init)(lora_bank)
