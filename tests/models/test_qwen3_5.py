"""Parity of the `qwen3_5` family with transformers' `Qwen3_5ForCausalLM` on a tiny random checkpoint.

The PyTorch model runs its reference (pure PyTorch) Gated DeltaNet and causal convolution on the
CPU, so the checkpoint stays tiny: 3 layers (2 Gated DeltaNet, 1 gated attention), hidden 64.
"""

from __future__ import annotations

import copy
import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from omjax import models  # noqa: E402
from omjax.config import LORA_TARGETS, LoRAConfig  # noqa: E402
from omjax.models import lora as lora_lib  # noqa: E402
from omjax.models import qwen3_5  # noqa: E402

TOL = 1e-4


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """(torch model, omjax Model) for one tiny random checkpoint written by transformers."""
    torch.manual_seed(0)
    config = transformers.Qwen3_5TextConfig(
        vocab_size=101, hidden_size=64, intermediate_size=96, num_hidden_layers=3,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, linear_conv_kernel_dim=4,
        linear_key_head_dim=8, linear_value_head_dim=12, linear_num_key_heads=2,
        linear_num_value_heads=4, initializer_range=0.1,
        layer_types=["linear_attention", "linear_attention", "full_attention"])
    ref = transformers.Qwen3_5ForCausalLM(config).eval()
    with torch.no_grad():
        # The init leaves norms at 0 (offset form), dt_bias at 1: move them so a wrong
        # convention (w vs 1 + w, a missed bias) shows in the logits.
        for name, p in ref.named_parameters():
            if "norm" in name or "A_log" in name or "dt_bias" in name:
                p.add_(0.3 * torch.randn_like(p))
    path = tmp_path_factory.mktemp("qwen3_5_tiny")
    ref.save_pretrained(path)
    model = models.load(path, dtype=jnp.float32, with_tokenizer=False)
    # Chunks of 4 tokens: the 11-token batches below run the scan over 3 chunks, the last padded.
    model.config = dataclasses.replace(model.config, chunk_size=4)
    return ref, model


_forward = jax.jit(qwen3_5.forward, static_argnames=("cfg",))


def _batch(cfg, batch=3, length=11, seed=0):
    """Random tokens with row 0 unpadded, row 1 left-padded, row 2 right-padded."""
    rng = np.random.default_rng(seed)
    tokens = rng.integers(0, cfg.vocab_size, (batch, length)).astype(np.int32)
    mask = np.ones((batch, length), np.int32)
    mask[1, :4] = 0
    mask[2, -3:] = 0
    return tokens, mask


def _torch_logits(ref, tokens, mask):
    positions = np.maximum(np.cumsum(mask, axis=1) - 1, 0)
    with torch.no_grad():
        out = ref(input_ids=torch.tensor(tokens, dtype=torch.long),
                  attention_mask=torch.tensor(mask, dtype=torch.long),
                  position_ids=torch.tensor(positions, dtype=torch.long))
    return out.logits.numpy()


def _max_err(a, b, mask):
    return float(np.abs(np.asarray(a) - np.asarray(b))[mask.astype(bool)].max())


def _merged(ref, cfg, adapter, scale):
    """A copy of the torch model with each LoRA delta a @ b * scale added to its weight."""
    merged = copy.deepcopy(ref)
    kd = cfg.key_dim
    with torch.no_grad():
        for i, (kind, layer) in enumerate(zip(cfg.layer_types, lora_lib.to_layers(adapter, qwen3_5.lora_shapes(cfg)))):
            block = merged.model.layers[i]
            for target, ab in layer.items():
                delta = torch.tensor(np.asarray(ab["a"] @ ab["b"]) * scale).T  # [d_out, d_in]
                if target in ("gate", "up", "down"):
                    getattr(block.mlp, f"{target}_proj").weight.add_(delta)
                elif kind == "full_attention":
                    getattr(block.self_attn, f"{target}_proj").weight.add_(delta)
                elif target == "o":
                    block.linear_attn.out_proj.weight.add_(delta)
                else:
                    rows = {"q": slice(0, kd), "k": slice(kd, 2 * kd), "v": slice(2 * kd, None)}[target]
                    block.linear_attn.in_proj_qkv.weight[rows].add_(delta)
    return merged


def test_config_from_hf_reads_layer_types_and_partial_rotary(tiny):
    ref, model = tiny
    cfg = model.config
    assert cfg.layer_types == ("linear_attention",) * 2 + ("full_attention",)
    assert cfg.rotary_dim == 4  # head_dim 16 * partial_rotary_factor 0.25
    assert cfg.n_params == sum(p.numel() for p in ref.parameters())


def test_logits_match_torch_with_left_and_right_padding(tiny):
    ref, model = tiny
    tokens, mask = _batch(model.config)
    expected = _torch_logits(ref, tokens, mask)
    logits, _ = _forward(model.params, model.config, jnp.asarray(tokens),
                         attention_mask=jnp.asarray(mask))
    assert logits.shape == (3, 11, model.config.vocab_size) and logits.dtype == jnp.float32
    assert _max_err(logits, expected, mask) < TOL


def test_lora_matches_torch_with_merged_weights(tiny):
    ref, model = tiny
    cfg = model.config
    lcfg = LoRAConfig(rank=4, alpha=8.0, targets=LORA_TARGETS)
    adapter = lora_lib.agent(lora_lib.init_lora(jax.random.PRNGKey(1), qwen3_5.lora_shapes(cfg), lcfg), 0)
    keys = iter(jax.random.split(jax.random.PRNGKey(2), 1000))
    layers = lora_lib.to_layers(adapter, qwen3_5.lora_shapes(cfg))
    for layer in layers:
        for ab in layer.values():
            ab["b"] = 0.3 * jax.random.normal(next(keys), ab["b"].shape)
    assert all(set(layer) == set(LORA_TARGETS) for layer in layers)
    adapter = lora_lib.from_layers({"layers": layers})
    assert len(adapter["layers"]) == 2                  # one stack for each kind of layer

    merged = _merged(ref, cfg, adapter, lcfg.scale)

    tokens, mask = _batch(cfg, seed=1)
    expected = _torch_logits(merged, tokens, mask)
    logits, _ = _forward(model.params, cfg, jnp.asarray(tokens), attention_mask=jnp.asarray(mask),
                         lora=adapter, lora_scale=lcfg.scale)
    assert _max_err(logits, expected, mask) < TOL
    base_logits, _ = _forward(model.params, cfg, jnp.asarray(tokens), attention_mask=jnp.asarray(mask))
    assert _max_err(base_logits, expected, mask) > 100 * TOL  # the adapter does change the logits


def test_chunked_delta_rule_equals_recurrent():
    rng = np.random.default_rng(3)
    b, t, n, dk, dv = 2, 13, 3, 8, 5
    q = rng.normal(size=(b, t, n, dk)).astype(np.float32)
    k = rng.normal(size=(b, t, n, dk)).astype(np.float32)
    k /= np.linalg.norm(k, axis=-1, keepdims=True)
    v = rng.normal(size=(b, t, n, dv)).astype(np.float32)
    g = -rng.uniform(0.0, 2.0, size=(b, t, n)).astype(np.float32)
    beta = rng.uniform(0.0, 1.0, size=(b, t, n)).astype(np.float32)
    state = rng.normal(size=(b, n, dk, dv)).astype(np.float32)
    out_r, state_r = jax.jit(qwen3_5.gated_delta_recurrent)(q, k, v, g, beta, state)
    chunked = jax.jit(qwen3_5.gated_delta_chunked, static_argnums=6)
    for chunk in (4, 64):  # 4 chunks (the last padded), and one chunk of the whole sequence
        out_c, state_c = chunked(q, k, v, g, beta, state, chunk)
        np.testing.assert_allclose(out_c, out_r, atol=1e-5)
        np.testing.assert_allclose(state_c, state_r, atol=1e-5)


def test_padding_anywhere_and_cached_decoding_match_unpadded(tiny):
    """Padding before, inside and after the real tokens, with and without a cache, computes what
    the unpadded sequence does (the reference itself only handles one padded block)."""
    _, model = tiny
    cfg = model.config
    rng = np.random.default_rng(4)
    tokens = rng.integers(0, cfg.vocab_size, (3, 11)).astype(np.int32)
    mask = np.ones_like(tokens)
    mask[0, 4:6] = 0  # a right-padded prompt, then decoding
    mask[1, :3] = 0   # a left-padded prompt, then a left-padded suffix
    mask[1, 6] = 0
    mask[2, :6] = 0   # an all-padding prompt: the first real token is decoded
    real = mask.astype(bool)
    # The same real tokens, packed to the front of each row.
    order = np.argsort(~real, axis=1, kind="stable")
    packed, packed_mask = np.take_along_axis(tokens, order, 1), np.take_along_axis(mask, order, 1)
    expected, _ = _forward(model.params, cfg, jnp.asarray(packed), attention_mask=jnp.asarray(packed_mask))
    expected = np.asarray(expected)[packed_mask.astype(bool)]

    full, _ = _forward(model.params, cfg, jnp.asarray(tokens), attention_mask=jnp.asarray(mask))
    assert float(np.abs(np.asarray(full)[real] - expected).max()) < TOL

    prefill = 6
    cache = qwen3_5.init_cache(cfg, 3, 16, jnp.float32)
    logits, cache = _forward(model.params, cfg, jnp.asarray(tokens[:, :prefill]),
                             attention_mask=jnp.asarray(mask[:, :prefill]), cache=cache)
    steps = [logits]
    # A 2-token chunk continues the chunked form from the cached states; one-token steps then
    # take the recurrent path.
    logits, cache = _forward(model.params, cfg, jnp.asarray(tokens[:, prefill:prefill + 2]),
                             attention_mask=jnp.asarray(mask[:, prefill:prefill + 2]), cache=cache)
    steps.append(logits)
    for s in range(prefill + 2, tokens.shape[1]):
        logits, cache = _forward(model.params, cfg, jnp.asarray(tokens[:, s:s + 1]), cache=cache)
        steps.append(logits)
    assert int(cache["index"]) == tokens.shape[1]
    decoded = np.asarray(jnp.concatenate(steps, axis=1))[real]
    assert float(np.abs(decoded - expected).max()) < TOL


def test_bad_inputs_raise_clear_errors(tiny):
    ref, model = tiny
    state = {k: v.numpy() for k, v in ref.state_dict().items()}
    name = "model.layers.0.linear_attn.conv1d.weight"
    state[name] = state[name][:, :, :3]
    with pytest.raises(ValueError, match="conv1d"):
        qwen3_5.params_from_hf(model.config, state.__getitem__, jnp.float32)
    tokens = jnp.zeros((2, 5), jnp.int32)
    with pytest.raises(ValueError, match="attention_mask"):
        qwen3_5.forward(model.params, model.config, tokens, attention_mask=jnp.ones((2, 4)))
    with pytest.raises(ValueError, match="layer types"):
        dataclasses.replace(model.config, layer_types=("mamba",) * 3)


@pytest.mark.slow
def test_lora_gradients_with_remat_equal_plain(tiny):
    """Gradients flow through the chunked delta rule (triangular solve) and match under remat."""
    _, model = tiny
    cfg = model.config
    lcfg = LoRAConfig(rank=2, alpha=4.0, targets=LORA_TARGETS)
    adapter = lora_lib.agent(lora_lib.init_lora(jax.random.PRNGKey(5), qwen3_5.lora_shapes(cfg), lcfg), 0)
    tokens, mask = _batch(cfg, seed=5)

    def loss(ad, remat):
        logits, _ = qwen3_5.forward(model.params, cfg, jnp.asarray(tokens), attention_mask=jnp.asarray(mask),
                                    lora=ad, lora_scale=lcfg.scale, remat=remat)
        return jnp.sum(jax.nn.log_softmax(logits)[..., 0] * mask)

    grad = jax.jit(jax.grad(loss), static_argnums=1)
    plain, remat = grad(adapter, False), grad(adapter, True)
    leaves = jax.tree.leaves(plain)
    assert all(bool(jnp.isfinite(x).all()) for x in leaves)
    assert float(sum(jnp.sum(x * x) for x in leaves)) > 0
    for a, b in zip(leaves, jax.tree.leaves(remat)):
        np.testing.assert_allclose(a, b, rtol=1e-3, atol=1e-3)  # remat reorders float ops


def test_trunk_split_equals_full_forward(tiny):
    """Split below the full-attention layer: the upper layers restart from the trunk's stream."""
    from trunk_check import check_trunk_matches_full_forward

    _, model = tiny
    tokens, mask = _batch(model.config, seed=4)
    check_trunk_matches_full_forward(model, tokens, mask, n_frozen=2)


def test_stack_of_blocks_and_leftover_layers_match_torch(tmp_path):
    """Seven layers, 2 blocks of (2 Gated DeltaNet + 1 attention) and a leftover Gated DeltaNet:
    the block scan, the shorter scan of the leftover and a top-layers adapter (runs cut where
    the adapter starts) give the reference's logits; cached decoding gives the same."""
    from trunk_check import check_cached_decoding_matches_full_forward

    torch.manual_seed(1)
    kinds = ["linear_attention", "linear_attention", "full_attention"] * 2 + ["linear_attention"]
    config = transformers.Qwen3_5TextConfig(
        vocab_size=101, hidden_size=32, intermediate_size=48, num_hidden_layers=7,
        num_attention_heads=2, num_key_value_heads=1, head_dim=16, linear_conv_kernel_dim=4,
        linear_key_head_dim=8, linear_value_head_dim=8, linear_num_key_heads=2,
        linear_num_value_heads=2, initializer_range=0.1, layer_types=kinds)
    ref = transformers.Qwen3_5ForCausalLM(config).eval()
    ref.save_pretrained(tmp_path)
    model = models.load(tmp_path, dtype=jnp.float32, with_tokenizer=False)
    cfg = dataclasses.replace(model.config, chunk_size=4)
    assert model.params["layers"]["linear_attention"]["qkv"].shape[0] == 5
    assert model.params["layers"]["full_attention"]["q"].shape[0] == 2
    lcfg = LoRAConfig(rank=2, alpha=4.0, targets=LORA_TARGETS, top_layers=2)
    adapter = lora_lib.agent(lora_lib.init_lora(jax.random.PRNGKey(7), qwen3_5.lora_shapes(cfg), lcfg), 0)
    adapter = jax.tree.map(lambda x: x + 0.3 * jnp.ones_like(x), adapter)
    tokens, mask = _batch(cfg, seed=7)
    expected = _torch_logits(_merged(ref, cfg, adapter, lcfg.scale), tokens, mask)
    logits, _ = _forward(model.params, cfg, jnp.asarray(tokens), attention_mask=jnp.asarray(mask),
                         lora=adapter, lora_scale=lcfg.scale)
    assert _max_err(logits, expected, mask) < TOL
    assert qwen3_5.init_cache(cfg, 3, 12, jnp.float32)["layers"]["full_attention"]["k"].shape == (2, 3, 12, 1, 16)
    check_cached_decoding_matches_full_forward(model, _forward, tokens, 8, TOL, cfg=cfg)
