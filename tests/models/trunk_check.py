"""The trunk split check every family's tests run: starting the forward from `family.trunk` of
the frozen lower layers gives the full forward's logits, with an adapter on the upper layers."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from omjax.config import LORA_TARGETS, LoRAConfig
from omjax.models import lora as lora_lib


def top_adapter(model, n_frozen: int, seed: int = 0) -> tuple[dict, LoRAConfig]:
    """One adapter on every target of the layers >= n_frozen, with random (nonzero) B."""
    lcfg = LoRAConfig(rank=2, alpha=4.0, targets=LORA_TARGETS)
    shapes = [s if i >= n_frozen else {} for i, s in enumerate(model.family.lora_shapes(model.config))]
    bank = lora_lib.init_lora(jax.random.PRNGKey(seed), shapes, lcfg)
    leaves, tree = jax.tree.flatten(bank)
    keys = jax.random.split(jax.random.PRNGKey(seed + 1), len(leaves))
    leaves = [x + 0.1 * jax.random.normal(k, x.shape) for x, k in zip(leaves, keys)]
    return lora_lib.agent(jax.tree.unflatten(tree, leaves), 0), lcfg


def check_trunk_matches_full_forward(model, tokens: np.ndarray, mask: np.ndarray, n_frozen: int) -> None:
    fam, cfg, params = model.family, model.config, model.params
    adapter, lcfg = top_adapter(model, n_frozen)
    tokens, mask = jnp.asarray(tokens), jnp.asarray(mask)
    full, _ = fam.forward(params, cfg, tokens, attention_mask=mask, lora=adapter, lora_scale=lcfg.scale)
    trunk = fam.trunk(params, cfg, tokens, attention_mask=mask, n_layers=n_frozen)
    split, _ = fam.forward(params, cfg, tokens, attention_mask=mask, lora=adapter, lora_scale=lcfg.scale,
                           trunk=trunk)
    real = np.asarray(mask, bool)
    assert np.abs(np.asarray(full) - np.asarray(split))[real].max() < 1e-5
    # The adapter must matter, or the comparison would not see a dropped adapter.
    base, _ = fam.forward(params, cfg, tokens, attention_mask=mask)
    assert np.abs(np.asarray(full) - np.asarray(base))[real].max() > 1e-3
    # An adapter below the split would be skipped: a clear error instead.
    below, _ = top_adapter(model, 0)
    with pytest.raises(ValueError, match="below layer"):
        fam.forward(params, cfg, tokens, attention_mask=mask, lora=below, lora_scale=lcfg.scale, trunk=trunk)
    with pytest.raises(ValueError, match="trunk must stop inside"):
        fam.trunk(params, cfg, tokens, attention_mask=mask, n_layers=cfg.num_layers)


def check_cached_decoding_matches_full_forward(model, forward, tokens, prefill: int, tol: float, cfg=None) -> None:
    """Left-padded rows prefilled for `prefill` tokens into a cache, then decoded one token at
    a time, give the full forward's logits at every real position. `forward` is the family's
    forward (or a jitted wrapper of it); `cfg` replaces `model.config` where given."""
    cfg = model.config if cfg is None else cfg
    left = np.ones(tokens.shape, np.int32)
    left[1, :4] = 0
    full, _ = forward(model.params, cfg, jnp.asarray(tokens), attention_mask=jnp.asarray(left))
    cache = model.family.init_cache(cfg, tokens.shape[0], tokens.shape[1], jnp.float32)
    step, cache = forward(model.params, cfg, jnp.asarray(tokens[:, :prefill]),
                          attention_mask=jnp.asarray(left[:, :prefill]), cache=cache)
    steps = [step]
    for s in range(prefill, tokens.shape[1]):
        step, cache = forward(model.params, cfg, jnp.asarray(tokens[:, s:s + 1]), cache=cache)
        steps.append(step)
    err = np.abs(np.asarray(jnp.concatenate(steps, axis=1)) - np.asarray(full))[left.astype(bool)].max()
    assert err < tol, err
