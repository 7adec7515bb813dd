"""The `gemma4` family: the Gemma 4 text decoder (transformers `Gemma4ForCausalLM`).

What sets it apart from the dense decoder of `omjax.models.dense`:
  * layers are `sliding_attention` (window `sliding_window`, default RoPE) or `full_attention`
    (proportional RoPE: only the first `partial_rotary_factor` of the frequency pairs rotate),
    and each layer may override `head_dim` / `num_key_value_heads` (`per_layer_config`; the
    full-attention layers use the larger `global_head_dim`);
  * RMSNorms (plain weight w) on q, k and, without a weight, on v; attention logits are not
    scaled (the q norm takes that role);
  * four norms around the two sub-blocks (pre/post attention, pre/post feed-forward), and a
    per-layer `layer_scalar` on the block output;
  * per-layer inputs: a second embedding table (`hidden_size_per_layer_input` P channels per
    layer) plus a projection of the token embedding feed every layer a [B, T, P] signal that
    gates a P-wide residual branch;
  * KV sharing: the last `num_kv_shared_layers` layers compute no keys or values and attend to
    those of the last earlier layer of the same type;
  * optional `attention_k_eq_v` (full-attention values are the raw keys), double-wide MLPs on the
    KV-shared layers, a mixture-of-experts block beside the MLP, and tanh soft-capped logits.
The token embedding is scaled by sqrt(hidden_size) in the parameter dtype, as the reference does.

Layers run as scans over blocks of the sliding/full pattern (`base.scan_blocks`), in two
segments: the layers that write keys and values, and the KV-shared ones, which read the (k, v)
the scan carries from the last writer of their type; params are one stack per `layer_kinds`.

Cache: the common `{"layers", "positions", "index"}` of `omjax.models.base`; `layers` holds
one stack per kind of the layers that compute keys, `k`, `v` [N_kind, B, S, K, Dh]; KV-shared
layers hold nothing.
The full-length cache is masked to the window on sliding layers, so sliding layers keep every
slot (simple and exact; memory grows with max_len, not with the window). Padding may sit
anywhere (e.g. before a cached shared prefix and again before each suffix): keys are masked by
position and the window counts positions, not slots.

LoRA targets: q, k, v, o, gate, up, down; KV-shared layers have no k or v, full-attention
layers with `attention_k_eq_v` no v. The per-layer-input branch, the router and the experts
stay frozen.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np

from omjax.models import base

SLIDING = "sliding_attention"
FULL = "full_attention"

_ACTS: dict[str, Callable] = {
    "gelu_pytorch_tanh": lambda x: jax.nn.gelu(x, approximate=True),
    "gelu": lambda x: jax.nn.gelu(x, approximate=False),
    "silu": jax.nn.silu,
}
_PER_LAYER_KEYS = {"head_dim", "num_key_value_heads"}

SEGMENTS = True
"""Whether `forward` honours branch masks (`omjax.models.base.token_positions`)."""

forward_and_trunk = None
"""Not provided: upper layers also read the keys and values of shared trunk layers, which a
forward does not return; the update computes the trunk itself (`trunk`)."""

TRUNK_CACHE = False
"""Whether `forward` continues a cache from a trunk: no (the trunk's shared keys and values
would have to be written to the cache too), so `lora.scope=reply` needs `lora.top_layers=0`."""


@dataclasses.dataclass(frozen=True)
class Config:
    """Static description of a Gemma 4 text decoder (hashable: a jit static argument).

    Per-layer tuples have one entry per decoder layer."""

    vocab_size: int
    """Rows of the token embedding and of the (tied) output head."""
    hidden_size: int
    """Width D of the residual stream."""
    num_layers: int
    """Number of decoder layers."""
    layer_types: tuple[str, ...]
    """Per layer, `sliding_attention` or `full_attention`."""
    num_heads: int
    """Query heads (every layer)."""
    layer_head_dims: tuple[int, ...]
    """Per layer, channels per attention head."""
    layer_kv_heads: tuple[int, ...]
    """Per layer, key/value heads."""
    layer_intermediate_sizes: tuple[int, ...]
    """Per layer, width of the gated MLP (doubled on KV-shared layers with `use_double_wide_mlp`)."""
    kv_sources: tuple[int, ...]
    """Per layer, the layer whose keys and values it attends to (itself unless KV-shared)."""
    sliding_window: int
    """Keys at most `sliding_window - 1` positions back are visible on sliding layers."""
    rope: tuple[tuple[str, str, float, float, float], ...]
    """Per layer type: (layer type, rope type "default" | "proportional", theta,
    partial_rotary_factor, factor)."""
    rms_eps: float
    """Epsilon of every RMSNorm."""
    hidden_act: str = "gelu_pytorch_tanh"
    """Activation of the MLP, the experts and the per-layer-input gate."""
    per_layer_dim: int = 0
    """P = `hidden_size_per_layer_input` (0: no per-layer inputs)."""
    per_layer_vocab_size: int = 0
    """Rows of the per-layer-input embedding table."""
    attention_k_eq_v: bool = False
    """Full-attention layers take their values from the key projection (no v_proj)."""
    attention_bias: bool = False
    """q/k/v/o projections carry a bias."""
    final_logit_softcapping: float | None = None
    """Logits become cap * tanh(logits / cap) when set."""
    tie_embeddings: bool = True
    """The output head is the transposed token embedding."""
    num_experts: int = 0
    """Experts of the mixture-of-experts block (0: no such block)."""
    top_k_experts: int = 0
    """Experts each token is routed to."""
    moe_intermediate_size: int = 0
    """Width of each expert's gated MLP."""

    def __post_init__(self):
        n = self.num_layers
        for name in ("layer_types", "layer_head_dims", "layer_kv_heads", "layer_intermediate_sizes",
                     "kv_sources"):
            if len(getattr(self, name)) != n:
                raise ValueError(f"gemma4: {name} has {len(getattr(self, name))} entries for {n} layers")
        bad = sorted(set(self.layer_types) - {SLIDING, FULL})
        if bad:
            raise ValueError(f"gemma4: unknown layer types {bad}; expected {SLIDING!r} or {FULL!r}")
        missing = sorted(set(self.layer_types) - {r[0] for r in self.rope})
        if missing:
            raise ValueError(f"gemma4: no rope parameters for layer types {missing}")
        for i, src in enumerate(self.kv_sources):
            if src > i or self.kv_sources[src] != src or self.layer_types[src] != self.layer_types[i]:
                raise ValueError(f"gemma4: layer {i} cannot share the keys/values of layer {src}")
        if self.hidden_act not in _ACTS:
            raise ValueError(f"gemma4: hidden_activation {self.hidden_act!r} is not supported "
                             f"(supported: {sorted(_ACTS)})")
        for i, (kv, hd) in enumerate(zip(self.layer_kv_heads, self.layer_head_dims)):
            if self.num_heads % kv:
                raise ValueError(f"gemma4: layer {i}: {self.num_heads} query heads are not a "
                                 f"multiple of {kv} key/value heads")
            if hd % 2:
                raise ValueError(f"gemma4: layer {i}: head_dim {hd} must be even")
        if self.num_experts and not 0 < self.top_k_experts <= self.num_experts:
            raise ValueError(f"gemma4: top_k_experts {self.top_k_experts} must be in "
                             f"[1, num_experts={self.num_experts}]")

    @property
    def head_dim(self) -> int:
        """The largest per-layer head dim (what shape-level estimates such as `memory` read)."""
        return max(self.layer_head_dims)

    @property
    def num_kv_heads(self) -> int:
        """The largest per-layer key/value head count."""
        return max(self.layer_kv_heads)

    @property
    def intermediate_size(self) -> int:
        """The largest per-layer MLP width."""
        return max(self.layer_intermediate_sizes)

    def shares_kv(self, i: int) -> bool:
        return self.kv_sources[i] != i

    def has_v_proj(self, i: int) -> bool:
        return not (self.attention_k_eq_v and self.layer_types[i] == FULL)

    def inv_freq(self, i: int) -> np.ndarray:
        """RoPE inverse frequencies [head_dim / 2] of layer i (zeros for unrotated pairs)."""
        _, rope_type, theta, partial, factor = next(r for r in self.rope if r[0] == self.layer_types[i])
        hd = self.layer_head_dims[i]
        if rope_type == "default":
            return base.rope_inv_freq(hd, theta)
        rotated = int(partial * hd // 2)
        inv = 1.0 / (theta ** (np.arange(0, 2 * rotated, 2, dtype=np.float64) / hd))
        inv = np.concatenate([inv, np.zeros(hd // 2 - rotated)]) / factor
        return inv.astype(np.float32)

    @property
    def n_params(self) -> int:
        """Parameter count of the frozen base (embeddings counted once when tied)."""
        d, p, h = self.hidden_size, self.per_layer_dim, self.num_heads
        total = self.vocab_size * d * (1 if self.tie_embeddings else 2) + d
        if p:
            total += self.per_layer_vocab_size * self.num_layers * p + d * self.num_layers * p + p
        for i in range(self.num_layers):
            hd, kv = self.layer_head_dims[i], self.layer_kv_heads[i]
            f = self.layer_intermediate_sizes[i]
            total += 2 * d * h * hd + hd + 3 * d * f + 4 * d
            if self.attention_bias:
                total += h * hd + d
            if not self.shares_kv(i):
                n_proj = 2 if self.has_v_proj(i) else 1
                total += n_proj * d * kv * hd + hd + (n_proj * kv * hd if self.attention_bias else 0)
            if p:
                total += 2 * d * p + d
            if self.num_experts:
                e, fe = self.num_experts, self.moe_intermediate_size
                total += 3 * e * fe * d + d * e + d + e + 3 * d
        return total


def config_from_hf(hf_config: dict) -> Config:
    """Config from a `config.json` dict: `gemma4_text`, or `gemma4` whose text_config is used."""
    text = hf_config.get("text_config", hf_config)

    def need(key):
        if key not in text:
            raise ValueError(f"gemma4 config.json lacks {key!r}")
        return text[key]

    if text.get("use_bidirectional_attention") == "all":
        raise ValueError("gemma4: use_bidirectional_attention='all' (a non-causal encoder) is not supported")
    n = need("num_hidden_layers")
    layer_types = list(text.get("layer_types") or
                       [SLIDING if (i + 1) % 6 else FULL for i in range(n)])[:n]
    layer_types[-1] = FULL  # as the reference forces it
    heads = need("num_attention_heads")
    head_dim = text.get("head_dim") or need("hidden_size") // heads
    kv_heads = text.get("num_key_value_heads") or heads
    k_eq_v = bool(text.get("attention_k_eq_v", False))

    overrides = text.get("per_layer_config")
    if overrides is None:
        # Hub configs carry `global_head_dim` (and `num_global_key_value_heads`) for the
        # full-attention layers; transformers turns them into per-layer overrides.
        full = {"head_dim": text.get("global_head_dim", 512)}
        if k_eq_v and text.get("num_global_key_value_heads") is not None:
            full["num_key_value_heads"] = text["num_global_key_value_heads"]
        overrides = {i: full for i, kind in enumerate(layer_types) if kind == FULL}
    overrides = {int(i): dict(o) for i, o in overrides.items()}
    for i, o in overrides.items():
        unknown = sorted(set(o) - _PER_LAYER_KEYS)
        if unknown:
            raise ValueError(f"gemma4: per_layer_config[{i}] overrides {unknown}; only "
                             f"{sorted(_PER_LAYER_KEYS)} are supported")
    layer_head_dims = tuple(overrides.get(i, {}).get("head_dim", head_dim) for i in range(n))
    num_kv = tuple(overrides.get(i, {}).get("num_key_value_heads", kv_heads) for i in range(n))

    # KV sharing (transformers' `kv_sharing_modes`): each of the last `num_kv_shared_layers`
    # layers reuses the last non-shared layer of its own type.
    shared = text.get("num_kv_shared_layers", 0) or 0
    first_shared = n - shared
    sources = []
    for i, kind in enumerate(layer_types):
        if i < first_shared:
            sources.append(i)
            continue
        producers = [j for j in range(first_shared) if layer_types[j] == kind]
        if not producers:
            raise ValueError(f"gemma4: KV-shared layer {i} ({kind}) has no earlier {kind} layer to share")
        sources.append(producers[-1])
    inter = need("intermediate_size")
    double = bool(text.get("use_double_wide_mlp", False))
    inters = tuple(inter * (2 if double and sources[i] != i else 1) for i in range(n))

    rope_params = text.get("rope_parameters") or {
        SLIDING: {"rope_type": "default", "rope_theta": 10_000.0},
        FULL: {"rope_type": "proportional", "partial_rotary_factor": 0.25, "rope_theta": 1_000_000.0},
    }
    rope = []
    for kind in sorted(set(layer_types)):
        rp = rope_params.get(kind)
        if rp is None:
            raise ValueError(f"gemma4: rope_parameters has no entry for {kind!r}")
        rope_type = rp.get("rope_type", "default")
        if rope_type not in ("default", "proportional"):
            raise ValueError(f"gemma4: rope_type {rope_type!r} ({kind}) is not supported "
                             "(supported: default, proportional)")
        rope.append((kind, rope_type, float(rp["rope_theta"]),
                     float(rp.get("partial_rotary_factor", 1.0)), float(rp.get("factor", 1.0))))

    moe = bool(text.get("enable_moe_block", False))
    softcap = text.get("final_logit_softcapping")
    return Config(
        vocab_size=need("vocab_size"), hidden_size=need("hidden_size"), num_layers=n,
        layer_types=tuple(layer_types), num_heads=heads, layer_head_dims=layer_head_dims,
        layer_kv_heads=num_kv, layer_intermediate_sizes=inters, kv_sources=tuple(sources),
        sliding_window=int(text.get("sliding_window", 512)), rope=tuple(rope),
        rms_eps=float(text.get("rms_norm_eps", 1e-6)),
        hidden_act=text.get("hidden_activation", "gelu_pytorch_tanh"),
        per_layer_dim=int(text.get("hidden_size_per_layer_input") or 0),
        per_layer_vocab_size=int(text.get("vocab_size_per_layer_input") or 0),
        attention_k_eq_v=k_eq_v, attention_bias=bool(text.get("attention_bias", False)),
        final_logit_softcapping=None if softcap is None else float(softcap),
        tie_embeddings=bool(text.get("tie_word_embeddings", hf_config.get("tie_word_embeddings", True))),
        num_experts=int(text.get("num_experts") or 0) if moe else 0,
        top_k_experts=int(text.get("top_k_experts") or 0) if moe else 0,
        moe_intermediate_size=int(text.get("moe_intermediate_size") or 0) if moe else 0)


def layer_kinds(cfg: Config) -> tuple[str, ...]:
    """Per layer, the stack its params and cache live in: layers of one kind have the same
    shapes (type, head dim, key/value heads, MLP width, whether it shares keys/values)."""
    return tuple(f"{t}_{hd}x{kv}_{f}" + ("_shared" if cfg.shares_kv(i) else "")
                 for i, (t, hd, kv, f) in enumerate(zip(cfg.layer_types, cfg.layer_head_dims, cfg.layer_kv_heads,
                                                        cfg.layer_intermediate_sizes)))


def params_from_hf(cfg: Config, get: Callable[[str], np.ndarray], dtype) -> dict:
    """Parameter pytree from HF tensors named as in `Gemma4ForCausalLM`; linears as [D_in, D_out].

    The decoder layers are one stack per layer kind (`layer_kinds`),
    `params["layers"][kind][name]` `[N_kind, ...]` (bottom layer first)."""
    d, h, pd = cfg.hidden_size, cfg.num_heads, cfg.per_layer_dim
    kinds = layer_kinds(cfg)
    layers = {}
    for kind in dict.fromkeys(kinds):
        ids = [j for j, k in enumerate(kinds) if k == kind]
        i = ids[0]                                      # every layer of a kind has its shapes
        take = lambda name, shape, transpose=False: base.take_stacked(
            get, [f"model.layers.{j}.{name}" for j in ids], shape, dtype, transpose=transpose)
        vec = lambda name, n: take(name, (n,))                                           # [N, n]
        lin = lambda name, d_out, d_in: take(name + ".weight", (d_out, d_in), True)      # [N, D_in, D_out]
        hd, kv = cfg.layer_head_dims[i], cfg.layer_kv_heads[i]
        f = cfg.layer_intermediate_sizes[i]
        layer = {
            "attn_norm": vec("input_layernorm.weight", d),
            "post_attn_norm": vec("post_attention_layernorm.weight", d),
            "mlp_norm": vec("pre_feedforward_layernorm.weight", d),
            "post_mlp_norm": vec("post_feedforward_layernorm.weight", d),
            "layer_scalar": vec("layer_scalar", 1),
            "q": lin("self_attn.q_proj", h * hd, d), "o": lin("self_attn.o_proj", d, h * hd),
            "q_norm": vec("self_attn.q_norm.weight", hd),
            "gate": lin("mlp.gate_proj", f, d), "up": lin("mlp.up_proj", f, d),
            "down": lin("mlp.down_proj", d, f),
        }
        projections = [("q", h * hd), ("o", d)]
        if not cfg.shares_kv(i):
            layer["k"] = lin("self_attn.k_proj", kv * hd, d)
            layer["k_norm"] = vec("self_attn.k_norm.weight", hd)
            projections.append(("k", kv * hd))
            if cfg.has_v_proj(i):
                layer["v"] = lin("self_attn.v_proj", kv * hd, d)
                projections.append(("v", kv * hd))
        if cfg.attention_bias:
            for t, n in projections:
                layer[t + "_bias"] = vec(f"self_attn.{t}_proj.bias", n)
        if pd:
            layer["ple_gate"] = lin("per_layer_input_gate", pd, d)
            layer["ple_proj"] = lin("per_layer_projection", d, pd)
            layer["ple_norm"] = vec("post_per_layer_input_norm.weight", d)
        if cfg.num_experts:
            e, fe = cfg.num_experts, cfg.moe_intermediate_size
            layer.update(
                router_proj=lin("router.proj", e, d), router_scale=vec("router.scale", d),
                expert_scale=vec("router.per_expert_scale", e),
                experts_gate_up=take("experts.gate_up_proj", (e, 2 * fe, d)),
                experts_down=take("experts.down_proj", (e, d, fe)),
                moe_post_mlp_norm=vec("post_feedforward_layernorm_1.weight", d),
                moe_pre_norm=vec("pre_feedforward_layernorm_2.weight", d),
                moe_post_norm=vec("post_feedforward_layernorm_2.weight", d))
        layers[kind] = layer
    params = {"embed": base.take(get, "model.embed_tokens.weight", (cfg.vocab_size, d), dtype),
              "layers": layers, "norm": base.take(get, "model.norm.weight", (d,), dtype)}
    if pd:
        n = cfg.num_layers * pd
        params["ple_embed"] = base.take(get, "model.embed_tokens_per_layer.weight",
                                        (cfg.per_layer_vocab_size, n), dtype)
        params["ple_model_proj"] = base.take(get, "model.per_layer_model_projection.weight", (n, d),
                                             dtype, transpose=True)
        params["ple_proj_norm"] = base.take(get, "model.per_layer_projection_norm.weight", (pd,), dtype)
    if not cfg.tie_embeddings:
        params["lm_head"] = base.take(get, "lm_head.weight", (cfg.vocab_size, d), dtype,
                                      transpose=True)
    return params


def lora_shapes(cfg: Config) -> list[dict[str, tuple[int, int]]]:
    """Per layer, (d_in, d_out) of each LoRA target (see the module docstring)."""
    d, h = cfg.hidden_size, cfg.num_heads
    shapes = []
    for i in range(cfg.num_layers):
        hd, kv = cfg.layer_head_dims[i], cfg.layer_kv_heads[i]
        f = cfg.layer_intermediate_sizes[i]
        s = {"q": (d, h * hd), "o": (h * hd, d), "gate": (d, f), "up": (d, f), "down": (f, d)}
        if not cfg.shares_kv(i):
            s["k"] = (d, kv * hd)
            if cfg.has_v_proj(i):
                s["v"] = (d, kv * hd)
        shapes.append(s)
    return shapes


def init_cache(cfg: Config, batch: int, max_len: int, dtype=jnp.float32) -> dict:
    """An empty cache for `batch` rows and up to `max_len` tokens (see the module docstring);
    its layers are one stack per kind of the layers that write keys and values,
    `{kind: {"k", "v": [N_kind, B, S, K, Dh]}}`."""
    kinds = layer_kinds(cfg)
    layers = {}
    for i, kind in enumerate(kinds):
        if not cfg.shares_kv(i) and kind not in layers:
            layers[kind] = base.kv_stack_cache(kinds.count(kind), batch, max_len, cfg.layer_kv_heads[i],
                                               cfg.layer_head_dims[i], dtype)
    return base.init_cache_common(layers, batch, max_len)


# ----------------------------------------------------------------------------- layers


def _norm(x, w, eps):
    """Gemma 4's RMSNorm: the stored weight scales directly (Gemma 2/3 and Qwen3.5 use 1 + w)."""
    return base.rms_norm(x, w, eps)


def _unit_rms(x, eps):
    """RMSNorm without a weight (Gemma's v norm and router norm)."""
    xf = x.astype(jnp.float32)
    return (xf * jax.lax.rsqrt(jnp.mean(xf * xf, axis=-1, keepdims=True) + eps)).astype(x.dtype)


def _attention(p: dict, cfg: Config, i: int, h, ctx: base.Context, lora_layer, scale,
               layer_cache, source_kv):
    """Self-attention of layer i on the normed hidden states h [B, T, D].

    source_kv: on a KV-shared layer, the (k, v) [B, S, K, Dh] of the layer it shares. Returns
    (output, layer cache, this layer's (k, v) for the layers sharing them)."""
    b, t, _ = h.shape
    hd, kv_heads = cfg.layer_head_dims[i], cfg.layer_kv_heads[i]
    cos, sin = base.rope_cos_sin(jnp.maximum(ctx.q_pos, 0), cfg.inv_freq(i))   # [B, T, Dh]
    proj = lambda name: base.lora_linear(h, p[name], lora_layer, name, scale, p.get(name + "_bias"))
    q = proj("q").reshape(b, t, cfg.num_heads, hd)                               # [B, T, H, Dh]
    q = base.apply_rope(_norm(q, p["q_norm"], cfg.rms_eps), cos, sin)
    if cfg.shares_kv(i):
        k, v = source_kv
    else:
        k_raw = proj("k").reshape(b, t, kv_heads, hd)                             # [B, T, K, Dh]
        v = proj("v").reshape(b, t, kv_heads, hd) if cfg.has_v_proj(i) else k_raw
        k = base.apply_rope(_norm(k_raw, p["k_norm"], cfg.rms_eps), cos, sin)
        v = _unit_rms(v, cfg.rms_eps)
        if layer_cache is not None:
            layer_cache = base.cache_write(layer_cache, ctx, k=k, v=v)
            k, v = layer_cache["k"], layer_cache["v"]                             # [B, S, K, Dh]
    window = cfg.sliding_window if cfg.layer_types[i] == SLIDING else None
    o = base.attention(q, k, v, ctx.mask(window), scale=1.0).reshape(b, t, cfg.num_heads * hd)
    o = base.lora_linear(o, p["o"], lora_layer, "o", scale, p.get("o_bias"))
    return o, layer_cache, (k, v)


def _experts(p: dict, cfg: Config, residual, act):
    """Mixture-of-experts branch on the pre-MLP residual [B, T, D].

    Every expert runs on every token and the routing weights are zero outside each token's
    top-k: exact, and shape-static for jit, at E times the compute of a routed block."""
    d = cfg.hidden_size
    routed = _unit_rms(residual, cfg.rms_eps) * p["router_scale"] * (d ** -0.5)
    scores = (routed @ p["router_proj"]).astype(jnp.float32)                      # [B, T, E]
    probs = jax.nn.softmax(scores, axis=-1)
    top_w, top_i = jax.lax.top_k(probs, cfg.top_k_experts)                        # [B, T, k]
    top_w = top_w / jnp.sum(top_w, axis=-1, keepdims=True)
    top_w = top_w * p["expert_scale"].astype(jnp.float32)[top_i]
    weights = jnp.sum(jax.nn.one_hot(top_i, cfg.num_experts) * top_w[..., None], axis=-2)  # [B, T, E]
    x = _norm(residual, p["moe_pre_norm"], cfg.rms_eps)
    gate_up = jnp.einsum("btd,efd->btef", x, p["experts_gate_up"])                # [B, T, E, 2F]
    fe = cfg.moe_intermediate_size
    hidden = act(gate_up[..., :fe]) * gate_up[..., fe:]                           # [B, T, E, F]
    out = jnp.einsum("btef,edf->bted", hidden, p["experts_down"])                 # [B, T, E, D]
    out = jnp.einsum("bted,bte->btd", out, weights.astype(out.dtype))
    return _norm(out, p["moe_post_norm"], cfg.rms_eps)


def _layer(p: dict, cfg: Config, i: int, x, per_layer_input, ctx: base.Context, lora_layer, scale,
           layer_cache, source_kv):
    act = _ACTS[cfg.hidden_act]
    h = _norm(x, p["attn_norm"], cfg.rms_eps)
    h, layer_cache, kv = _attention(p, cfg, i, h, ctx, lora_layer, scale, layer_cache, source_kv)
    x = x + _norm(h, p["post_attn_norm"], cfg.rms_eps)

    h = base.swiglu_mlp(_norm(x, p["mlp_norm"], cfg.rms_eps), p, lora_layer, scale, act)
    if cfg.num_experts:
        h = _norm(h, p["moe_post_mlp_norm"], cfg.rms_eps) + _experts(p, cfg, x, act)
    x = x + _norm(h, p["post_mlp_norm"], cfg.rms_eps)

    if cfg.per_layer_dim:
        h = act(x @ p["ple_gate"]) * per_layer_input                               # [B, T, P]
        x = x + _norm(h @ p["ple_proj"], p["ple_norm"], cfg.rms_eps)
    return x * p["layer_scalar"], layer_cache, kv


def _per_layer_inputs(params: dict, cfg: Config, tokens, x):
    """The per-layer input signal [B, T, L, P] from the tokens and the scaled embedding x."""
    b, t = tokens.shape
    pd, n = cfg.per_layer_dim, cfg.num_layers
    table = params["ple_embed"]
    from_tokens = table[tokens] * jnp.asarray(pd ** 0.5, table.dtype)             # [B, T, L*P]
    from_tokens = from_tokens.reshape(b, t, n, pd)
    from_embed = (x @ params["ple_model_proj"]) * (cfg.hidden_size ** -0.5)
    from_embed = _norm(from_embed.reshape(b, t, n, pd), params["ple_proj_norm"], cfg.rms_eps)
    return (from_embed + from_tokens) * (2.0 ** -0.5)


def _layers(params: dict, cfg: Config, tokens: jax.Array, attention_mask, lora, lora_scale: float,
            cache: dict | None, remat: bool | int, trunk: base.Trunk | None, stop: int):
    """Run layers [first, stop) (first = 0, or where `trunk` stopped) as scans over blocks of
    the sliding/full pattern (`base.scan_blocks`) in two segments, the layers that write keys
    and values and those that share them; the per-layer inputs are scanned inputs.

    Returns (x [B, T, D], cache, layer caches, shared): `shared` maps each layer type to the
    (k, v) of its last KV-writing layer run so far (or carried by the trunk), which is what a
    KV-shared layer of that type reads (the scan carries it)."""
    ctx, cache = base.make_context(tokens, attention_mask, cache)
    kinds = layer_kinds(cfg)
    first_shared = next((i for i in range(cfg.num_layers) if cfg.shares_kv(i)), cfg.num_layers)
    for i in range(first_shared, cfg.num_layers):
        last = max(j for j in range(first_shared) if cfg.layer_types[j] == cfg.layer_types[i])
        if cfg.kv_sources[i] != last:
            raise ValueError(f"gemma4: KV-shared layer {i} reads layer {cfg.kv_sources[i]}; the scanned stack "
                             f"supports sharing the last KV-writing layer of its type ({last}) only")
    embed = params["embed"]
    x0 = embed[tokens] * jnp.asarray(cfg.hidden_size ** 0.5, embed.dtype)         # [B, T, D]
    per_layer = None
    if cfg.per_layer_dim:
        per_layer = jnp.moveaxis(_per_layer_inputs(params, cfg, tokens, x0), 2, 0)  # [L, B, T, P]
    b, t = tokens.shape
    s_len = t if cache is None else cache["positions"].shape[1]
    dtype = x0.dtype if cache is None else jax.tree.leaves(cache["layers"])[0].dtype
    needed = sorted({cfg.layer_types[i] for i in range(first_shared, cfg.num_layers)})
    src = {kind: cfg.kv_sources[next(i for i in range(cfg.num_layers) if cfg.shares_kv(i) and
                                     cfg.layer_types[i] == kind)] for kind in needed}
    if trunk is None:
        x, first = x0, 0
        shared_kv = {kind: (jnp.zeros((b, s_len, cfg.layer_kv_heads[j], cfg.layer_head_dims[j]), dtype),) * 2
                     for kind, j in src.items()}
    else:
        x, first, shared_kv = trunk.hidden, trunk.n_layers, dict(trunk.extras["kv"])
    rep = {kind: kinds.index(kind) for kind in kinds}                               # a layer of each kind

    def body(kind, p, carry, lora_layer, layer_cache, pli):
        x, shared_kv = carry
        i = rep[kind]
        source_kv = shared_kv[cfg.layer_types[i]] if cfg.shares_kv(i) else None
        x, layer_cache, kv = _layer(p, cfg, i, x, pli, ctx, lora_layer, lora_scale, layer_cache, source_kv)
        if not cfg.shares_kv(i) and cfg.layer_types[i] in shared_kv:
            shared_kv = {**shared_kv, cfg.layer_types[i]: kv}
        return (x, shared_kv), ({} if layer_cache is None else layer_cache)

    (x, shared_kv), new_layers = base.scan_blocks(
        body, (x, shared_kv), kinds, params["layers"], None if lora is None else lora["layers"],
        base.lora_slots("gemma4", lora, lora_shapes(cfg)), None if cache is None else cache["layers"], first, stop,
        cuts=(first_shared,), layer_xs=per_layer, remat=remat)
    return x, cache, new_layers, shared_kv


def trunk(params: dict, cfg: Config, tokens: jax.Array, *, attention_mask: jax.Array | None = None,
          n_layers: int) -> base.Trunk:
    """The frozen base's residual stream after its first `n_layers` layers (see `base.Trunk`),
    with the keys/values of the trunk's layers that upper layers share."""
    base.check_forward_inputs("gemma4", cfg.num_layers, tokens, attention_mask, None)
    base.check_trunk("gemma4", cfg.num_layers, n_layers)
    x, _, _, shared_kv = _layers(params, cfg, tokens, attention_mask, None, 1.0, None, False, None, n_layers)
    return base.Trunk(hidden=x, extras={"kv": shared_kv}, n_layers=n_layers)


def forward(params: dict, cfg: Config, tokens: jax.Array, *,
            attention_mask: jax.Array | None = None, lora: dict | None = None,
            lora_scale: float = 1.0, cache: dict | None = None, last_only: bool | int = False,
            remat: bool | int = False, trunk: base.Trunk | None = None) -> tuple[jax.Array, dict | None]:
    """Logits `[B, T, V]` f32 (`[B, n, V]`, the final n positions, with `last_only=n`; True
    is 1) and the updated cache.

    tokens: [B, T] int32; attention_mask: [B, T] (1 = real token, 0 = padding, which may sit
    anywhere; `last_only` reads the last slot, so pad on the left there); lora: one adapter
    tree (no agent axis);
    lora_scale: `LoRAConfig.scale`; cache: from `init_cache` or a previous call; remat:
    recompute each layer's activations in the backward pass; trunk: start from the output of
    `trunk(...)` for the same tokens instead of layer 0.
    """
    base.check_forward_inputs("gemma4", cfg.num_layers, tokens, attention_mask, lora, trunk=trunk, cache=cache,
                              lora_shapes=lora_shapes(cfg))
    x, cache, new_layers, _ = _layers(params, cfg, tokens, attention_mask, lora, lora_scale, cache, remat,
                                      trunk, cfg.num_layers)
    if last_only:
        x = x[:, -int(last_only):]
    x = _norm(x, params["norm"], cfg.rms_eps)
    w = params["embed"].T if cfg.tie_embeddings else params["lm_head"]             # [D, V]
    logits = base.unembed(x, w, softcap=cfg.final_logit_softcapping)
    if cache is not None:
        cache = {**cache, "layers": new_layers}
    return logits, cache
