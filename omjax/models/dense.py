"""The dense grouped-query-attention decoder shared by the `llama` and `qwen3` families.

Both are pre-norm decoders with rotary attention and a SwiGLU MLP; Qwen3 adds a per-head
RMSNorm on queries and keys before the rotary embedding (`qk_norm`). The family modules only
translate their HF config into `DenseConfig`; everything else lives here.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np

from omjax.models import base


@dataclasses.dataclass(frozen=True)
class DenseConfig:
    """Static shape and numerics of a dense decoder (hashable: a jit static argument)."""

    model_type: str
    """HF `model_type` this config was read from ("llama" or "qwen3")."""
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rms_eps: float
    rope_theta: float
    rope_scaling_json: str = ""
    """HF `rope_scaling` dict as sorted JSON ("" for none): a string keeps the config hashable."""
    tie_embeddings: bool = False
    """The output projection reuses the input embedding table."""
    attention_bias: bool = False
    mlp_bias: bool = False
    qk_norm: bool = False
    """Per-head RMSNorm on q and k before rotary (Qwen3)."""
    hidden_act: str = "silu"
    max_position_embeddings: int = 8192

    @property
    def rope_scaling(self) -> dict | None:
        return json.loads(self.rope_scaling_json) if self.rope_scaling_json else None

    @property
    def n_params(self) -> int:
        """Parameter count of the frozen base (embeddings counted once when tied)."""
        d, f = self.hidden_size, self.intermediate_size
        attn = d * self.head_dim * (2 * self.num_heads + 2 * self.num_kv_heads)
        per_layer = attn + 3 * d * f + 2 * d + (2 * self.head_dim if self.qk_norm else 0)
        emb = self.vocab_size * d * (1 if self.tie_embeddings else 2)
        return self.num_layers * per_layer + emb + d


_ACTS: dict[str, Callable] = {"silu": jax.nn.silu, "gelu": jax.nn.gelu,
                              "gelu_pytorch_tanh": lambda x: jax.nn.gelu(x, approximate=True)}


def dense_config_from_hf(hf: dict, model_type: str, *, qk_norm: bool) -> DenseConfig:
    """Build a `DenseConfig` from an HF `config.json` dict, with clear errors for gaps."""
    def need(key):
        if key not in hf:
            raise ValueError(f"{model_type} config.json lacks {key!r}")
        return hf[key]

    d, h = need("hidden_size"), need("num_attention_heads")
    act = hf.get("hidden_act", "silu")
    if act not in _ACTS:
        raise ValueError(f"unsupported hidden_act {act!r} (supported: {sorted(_ACTS)})")
    scaling = hf.get("rope_scaling") or None
    rope_params = hf.get("rope_parameters") or {}
    theta = hf.get("rope_theta", rope_params.get("rope_theta", 10000.0))
    if scaling is None and rope_params.get("rope_type", "default") != "default":
        scaling = {k: v for k, v in rope_params.items() if k != "rope_theta"}
    if scaling is not None:
        base.rope_inv_freq(2, 1.0, scaling)  # fail now, not at the first forward
    return DenseConfig(
        model_type=model_type, vocab_size=need("vocab_size"), hidden_size=d,
        intermediate_size=need("intermediate_size"), num_layers=need("num_hidden_layers"),
        num_heads=h, num_kv_heads=hf.get("num_key_value_heads") or h,
        head_dim=hf.get("head_dim") or d // h, rms_eps=float(hf.get("rms_norm_eps", 1e-6)),
        rope_theta=float(theta),
        rope_scaling_json=json.dumps(scaling, sort_keys=True) if scaling else "",
        tie_embeddings=bool(hf.get("tie_word_embeddings", False)),
        attention_bias=bool(hf.get("attention_bias", False)),
        mlp_bias=bool(hf.get("mlp_bias", False)), qk_norm=qk_norm, hidden_act=act,
        max_position_embeddings=int(hf.get("max_position_embeddings", 8192)))


def params_from_hf(cfg: DenseConfig, get: Callable[[str], np.ndarray], dtype) -> dict:
    """Parameter pytree from HF tensors (`get(name)`), linear weights as `[D_in, D_out]`; the
    decoder layers are one stack, every entry `[L, ...]` (see `base.scan_layers`)."""
    d, f, dh = cfg.hidden_size, cfg.intermediate_size, cfg.head_dim
    hq, hkv = cfg.num_heads * dh, cfg.num_kv_heads * dh

    def stacked(name: str, shape: tuple[int, ...], transpose: bool = False) -> jax.Array:
        names = [f"model.layers.{i}.{name}" for i in range(cfg.num_layers)]
        return base.take_stacked(get, names, shape, dtype, transpose=transpose)

    lin = lambda name, d_out, d_in: stacked(name + ".weight", (d_out, d_in), transpose=True)
    layers = {
        "attn_norm": stacked("input_layernorm.weight", (d,)),                            # [L, D]
        "q": lin("self_attn.q_proj", hq, d), "k": lin("self_attn.k_proj", hkv, d),       # [L, D, H*Dh]
        "v": lin("self_attn.v_proj", hkv, d), "o": lin("self_attn.o_proj", d, hq),
        "mlp_norm": stacked("post_attention_layernorm.weight", (d,)),
        "gate": lin("mlp.gate_proj", f, d), "up": lin("mlp.up_proj", f, d),              # [L, D, F]
        "down": lin("mlp.down_proj", d, f),                                              # [L, F, D]
    }
    if cfg.attention_bias:
        for t, n in (("q", hq), ("k", hkv), ("v", hkv), ("o", d)):
            layers[t + "_bias"] = stacked(f"self_attn.{t}_proj.bias", (n,))
    if cfg.mlp_bias:
        for t, n in (("gate", f), ("up", f), ("down", d)):
            layers[t + "_bias"] = stacked(f"mlp.{t}_proj.bias", (n,))
    if cfg.qk_norm:
        layers["q_norm"] = stacked("self_attn.q_norm.weight", (dh,))                     # [L, Dh]
        layers["k_norm"] = stacked("self_attn.k_norm.weight", (dh,))
    params = {"embed": base.take(get, "model.embed_tokens.weight", (cfg.vocab_size, d), dtype),
              "layers": layers, "norm": base.take(get, "model.norm.weight", (d,), dtype)}
    if not cfg.tie_embeddings:
        params["lm_head"] = base.take(get, "lm_head.weight", (cfg.vocab_size, d), dtype,
                                      transpose=True)
    return params


def lora_shapes(cfg: DenseConfig) -> list[dict[str, tuple[int, int]]]:
    d, f = cfg.hidden_size, cfg.intermediate_size
    hq, hkv = cfg.num_heads * cfg.head_dim, cfg.num_kv_heads * cfg.head_dim
    one = {"q": (d, hq), "k": (d, hkv), "v": (d, hkv), "o": (hq, d),
           "gate": (d, f), "up": (d, f), "down": (f, d)}
    return [dict(one) for _ in range(cfg.num_layers)]


def init_cache(cfg: DenseConfig, batch: int, max_len: int, dtype=jnp.float32) -> dict:
    """Empty cache; its layers are one stack `{"k", "v": [L, B, S, Hkv, Dh]}`."""
    layers = base.kv_stack_cache(cfg.num_layers, batch, max_len, cfg.num_kv_heads, cfg.head_dim, dtype)
    return base.init_cache_common(layers, batch, max_len)


def _layer(p: dict, cfg: DenseConfig, x: jax.Array, ctx: base.Context, cos, sin,
           lora_layer: dict | None, scale: float, layer_cache: dict | None):
    b, t, _ = x.shape
    h = base.rms_norm(x, p["attn_norm"], cfg.rms_eps)
    proj = lambda name: base.lora_linear(h, p[name], lora_layer, name, scale, p.get(name + "_bias"))
    q = proj("q").reshape(b, t, cfg.num_heads, cfg.head_dim)       # [B, T, Hq, Dh]
    k = proj("k").reshape(b, t, cfg.num_kv_heads, cfg.head_dim)    # [B, T, Hkv, Dh]
    v = proj("v").reshape(b, t, cfg.num_kv_heads, cfg.head_dim)    # [B, T, Hkv, Dh]
    if cfg.qk_norm:
        q = base.rms_norm(q, p["q_norm"], cfg.rms_eps)
        k = base.rms_norm(k, p["k_norm"], cfg.rms_eps)
    q, k = base.apply_rope(q, cos, sin), base.apply_rope(k, cos, sin)
    if layer_cache is not None:
        layer_cache = base.cache_write(layer_cache, ctx, k=k, v=v)
        k, v = layer_cache["k"], layer_cache["v"]                   # [B, S, Hkv, Dh]
    o = base.attention(q, k, v, ctx.mask(), scale=cfg.head_dim ** -0.5)
    o = o.reshape(b, t, cfg.num_heads * cfg.head_dim)
    x = x + base.lora_linear(o, p["o"], lora_layer, "o", scale, p.get("o_bias"))
    h = base.rms_norm(x, p["mlp_norm"], cfg.rms_eps)
    act = _ACTS[cfg.hidden_act]
    g = base.lora_linear(h, p["gate"], lora_layer, "gate", scale, p.get("gate_bias"))
    u = base.lora_linear(h, p["up"], lora_layer, "up", scale, p.get("up_bias"))
    x = x + base.lora_linear(act(g) * u, p["down"], lora_layer, "down", scale, p.get("down_bias"))
    return x, layer_cache


def _layers(params: dict, cfg: DenseConfig, tokens: jax.Array, attention_mask, lora, lora_scale: float,
            cache: dict | None, remat: bool | int, trunk: base.Trunk | None, stop: int, keep: int = 0):
    """Run layers [first, stop) (first = 0, or where `trunk` stopped): (x [B, T, D], cache, the
    layer stack of the cache (layers below `first` as they were), the residual stream entering
    layer `keep` (None when `keep` is 0)). With a trunk and a cache only layers >= first are
    written: a later chunk continuing that cache must start from a trunk at the same layer; its
    cache may then hold only those layers (`base.cache_layers_above_trunk`)."""
    ctx, cache = base.make_context(tokens, attention_mask, cache)
    cos, sin = base.rope_cos_sin(jnp.maximum(ctx.q_pos, 0),
                                 base.rope_inv_freq(cfg.head_dim, cfg.rope_theta, cfg.rope_scaling))
    if trunk is None:
        x, first = params["embed"][tokens], 0                            # [B, T, D]
    else:
        x, first = trunk.hidden, trunk.n_layers
    stack = None if cache is None else cache["layers"]
    cache_lo = 0 if stack is None else cfg.num_layers - jax.tree.leaves(stack)[0].shape[0]

    def body(p, x, lora_layer, layer_cache):
        return _layer(p, cfg, x, ctx, cos, sin, lora_layer, lora_scale, layer_cache)

    slots = base.lora_slots(cfg.model_type, lora, lora_shapes(cfg))
    x, kept, new_layers = base.scan_layers(body, x, params["layers"], None if lora is None else lora["layers"], slots,
                                           stack, first, stop, cache_lo=cache_lo, keep=keep, remat=remat)
    return x, cache, new_layers, kept


def trunk(params: dict, cfg: DenseConfig, tokens: jax.Array, *, attention_mask: jax.Array | None = None,
          n_layers: int) -> base.Trunk:
    """The frozen base's residual stream after its first `n_layers` layers (see `base.Trunk`)."""
    base.check_forward_inputs(cfg.model_type, cfg.num_layers, tokens, attention_mask, None)
    base.check_trunk(cfg.model_type, cfg.num_layers, n_layers)
    x, _, _, _ = _layers(params, cfg, tokens, attention_mask, None, 1.0, None, False, None, n_layers)
    return base.Trunk(hidden=x, extras={}, n_layers=n_layers)


def forward(params: dict, cfg: DenseConfig, tokens: jax.Array, *,
            attention_mask: jax.Array | None = None, lora: dict | None = None,
            lora_scale: float = 1.0, cache: dict | None = None, last_only: bool | int = False,
            remat: bool | int = False, trunk: base.Trunk | None = None) -> tuple[jax.Array, dict | None]:
    """Logits `[B, T, V]` f32 (`[B, n, V]`, the final n positions, with `last_only=n`; True
    is 1) and the updated cache.

    tokens: [B, T] int32; attention_mask: [B, T] (1 = real token, 0 = padding, left padding
    expected when a cache or `last_only` is used); lora: one adapter tree (no agent axis; vmap
    over a bank for several agents); lora_scale: `LoRAConfig.scale`; cache: from `init_cache`
    or a previous call; remat: recompute each layer's activations in the backward pass;
    trunk: start from the output of `trunk(...)` for the same tokens instead of layer 0 (with a
    cache too: a chunk of a longer sequence whose earlier chunks were run from a trunk at the
    same layer, as the letter policy's `lora.scope=reply` does).
    """
    logits, cache, _ = _forward(params, cfg, tokens, attention_mask, lora, lora_scale, cache, last_only, remat,
                                trunk, 0)
    return logits, cache


def forward_and_trunk(params: dict, cfg: DenseConfig, tokens: jax.Array, *, n_layers: int,
                      attention_mask: jax.Array | None = None, lora: dict | None = None,
                      lora_scale: float = 1.0, cache: dict | None = None,
                      last_only: bool | int = False) -> tuple[jax.Array, dict | None, base.Trunk]:
    """`forward`, also returning the residual stream of all T tokens entering layer `n_layers`
    (the `base.Trunk` that `trunk(...)` computes, when `lora` has no weights below that layer).
    With a cache the trunk is that of the tokens after it, which is what a trunk of the whole
    sequence holds at their positions: a decision scored after a cached prefix yields the trunk
    its update would otherwise recompute."""
    base.check_trunk(cfg.model_type, cfg.num_layers, n_layers, base.lora_slots(cfg.model_type, lora, lora_shapes(cfg)))
    logits, cache, kept = _forward(params, cfg, tokens, attention_mask, lora, lora_scale, cache, last_only, False,
                                   None, n_layers)
    return logits, cache, base.Trunk(hidden=kept, extras={}, n_layers=n_layers)


def _forward(params, cfg, tokens, attention_mask, lora, lora_scale, cache, last_only, remat, trunk, keep):
    base.check_forward_inputs(cfg.model_type, cfg.num_layers, tokens, attention_mask, lora, trunk=trunk, cache=cache,
                              trunk_cache=True, lora_shapes=lora_shapes(cfg))
    x, cache, new_layers, kept = _layers(params, cfg, tokens, attention_mask, lora, lora_scale, cache, remat,
                                         trunk, cfg.num_layers, keep)
    if last_only:
        x = x[:, -int(last_only):]
    x = base.rms_norm(x, params["norm"], cfg.rms_eps)
    w = params["embed"].T if cfg.tie_embeddings else params["lm_head"]    # [D, V]
    logits = base.unembed(x, w)
    if cache is not None:
        cache = {**cache, "layers": new_layers}
    return logits, cache, kept
