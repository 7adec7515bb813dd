"""`base.attention`: causal attention in query blocks that score only the keys before them
(`blocked`), or through `jax.nn.dot_product_attention` (`fused`); the two agree."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from omjax.models import base

jax.config.update("jax_default_matmul_precision", "highest")


def _chunk(t=150, prefix=37, extra=6, b=3, hq=4, hkv=2, dh=8, seed=0):
    """A T-token chunk written after `prefix` cached slots of an S = prefix + T + extra cache,
    rows left-padded by different amounts, one row with two branches (`token_positions`)."""
    rng = np.random.RandomState(seed)
    s = prefix + t + extra
    seg = np.ones((b, t), np.int32)
    seg[1, :40] = 0                          # left padding
    seg[2, :5] = 0
    seg[2, t - 30:t - 15], seg[2, t - 15:] = 2, 3    # two branches after a shared part
    q_pos = np.asarray(base.token_positions(jnp.asarray(seg), jnp.full((b,), prefix)))
    kv_pos = np.full((b, s), -1)
    kv_pos[:, :prefix] = np.arange(prefix)
    kv_pos[:, prefix:prefix + t] = q_pos
    kv_seg = np.zeros((b, s), np.int32)
    kv_seg[:, :prefix] = 1
    kv_seg[:, prefix:prefix + t] = seg
    mask = base.attention_mask_from_positions(jnp.arange(t) + prefix, jnp.asarray(q_pos), jnp.asarray(kv_pos),
                                              q_seg=jnp.asarray(seg), kv_seg=jnp.asarray(kv_seg))
    q = jnp.asarray(rng.randn(b, t, hq, dh), jnp.float32)
    k = jnp.asarray(rng.randn(b, s, hkv, dh), jnp.float32)
    v = jnp.asarray(rng.randn(b, s, hkv, dh), jnp.float32)
    return q, k, v, mask, q_pos >= 0


@pytest.mark.parametrize("softcap", [None, 5.0])
def test_blocks_equal_one_pass_over_all_keys_values_and_gradients(softcap):
    q, k, v, mask, real = _chunk()
    assert q.shape[1] > 2 * base.QUERY_BLOCK and q.shape[1] % base.QUERY_BLOCK  # several blocks, a partial one
    w = jnp.asarray(np.random.RandomState(1).randn(*q.shape), jnp.float32) * real[:, :, None, None]

    def loss(fn, q, k, v):
        return jnp.sum(fn(q, k, v, mask, 0.35, softcap) * w)  # only real queries' outputs count

    blocked = lambda q, k, v, m, sc, cap: base.attention(q, k, v, m, scale=sc, softcap=cap)
    one_pass = base._attention_block                          # all T queries against all S keys
    out, ref = blocked(q, k, v, mask, 0.35, softcap), one_pass(q, k, v, mask, 0.35, softcap)
    assert out.shape == ref.shape == q.shape
    np.testing.assert_allclose(np.asarray(out)[real], np.asarray(ref)[real], atol=1e-6, rtol=0)
    g = jax.grad(lambda *a: loss(blocked, *a), argnums=(0, 1, 2))(q, k, v)
    g_ref = jax.grad(lambda *a: loss(one_pass, *a), argnums=(0, 1, 2))(q, k, v)
    for x, y in zip(g, g_ref):
        assert float(jnp.abs(y).max()) > 0
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), atol=1e-5, rtol=0)


def test_a_chunk_that_fills_the_cache_and_an_uncached_sequence_are_covered():
    """The two extremes of the precondition (query t at slot <= S - T + t): a chunk ending at
    the cache's last slot, and no cache (S = T)."""
    for prefix, extra in ((37, 0), (0, 0)):
        q, k, v, mask, real = _chunk(t=130, prefix=prefix, extra=extra)
        out = base.attention(q, k, v, mask, scale=0.35)
        ref = base._attention_block(q, k, v, mask, 0.35, None)
        np.testing.assert_allclose(np.asarray(out)[real], np.asarray(ref)[real], atol=1e-6, rtol=0)


def test_fused_equals_blocked_values_gradients_and_padding_rows():
    """`jax.nn.dot_product_attention` (XLA here, cuDNN on a GPU) with the same mask: branches,
    padding anywhere, grouped heads; a padding query (no visible key) gets a finite output (its
    value is never read), so no NaN reaches a gradient."""
    q, k, v, mask, real = _chunk(prefix=0)                       # no cached prefix: padding sees no key
    assert not bool(jnp.all(jnp.any(mask, axis=-1)))
    w = jnp.asarray(np.random.RandomState(2).randn(*q.shape), jnp.float32) * real[:, :, None, None]
    run = lambda impl, q, k, v: base.attention(q, k, v, mask, scale=0.35, implementation=impl)
    out, ref = run("fused", q, k, v), run("blocked", q, k, v)
    assert bool(jnp.all(jnp.isfinite(out)))
    np.testing.assert_allclose(np.asarray(out)[real], np.asarray(ref)[real], atol=1e-5, rtol=0)
    g = jax.grad(lambda *a: jnp.sum(run("fused", *a) * w), argnums=(0, 1, 2))(q, k, v)
    g_ref = jax.grad(lambda *a: jnp.sum(run("blocked", *a) * w), argnums=(0, 1, 2))(q, k, v)
    for x, y in zip(g, g_ref):
        assert float(jnp.abs(y).max()) > 0 and bool(jnp.all(jnp.isfinite(x)))
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), atol=1e-4, rtol=0)


def test_fused_default_on_accelerators_and_a_bad_name_is_a_clear_error(monkeypatch):
    q, k, v, mask, _ = _chunk(t=10)
    monkeypatch.setattr(jax, "default_backend", lambda: "gpu")
    assert base.attention_implementation() == "fused"
    monkeypatch.setattr(jax, "default_backend", lambda: "cpu")
    assert base.attention_implementation() == "blocked"
    with pytest.raises(ValueError, match="attention implementation 'flash'"):
        base.attention(q, k, v, mask, scale=1.0, implementation="flash")


def test_head_mismatch_is_a_clear_error():
    q, k, v, mask, _ = _chunk(t=10, hq=3, hkv=2)
    with pytest.raises(ValueError, match="3 query heads are not a multiple of 2"):
        base.attention(q, k, v, mask, scale=1.0)
