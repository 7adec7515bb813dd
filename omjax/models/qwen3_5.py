"""Qwen3.5 text decoder (transformers `Qwen3_5ForCausalLM`) as pure JAX functions.

Layers alternate, per `layer_types`, between
  * `linear_attention`: a Gated DeltaNet. A fused q/k/v projection goes through a causal
    depthwise convolution and SiLU; q and k are L2-normalised; a per-head recurrent state
    S [Dk, Dv] is decayed by exp(g_t) and corrected by the delta rule
    S <- S + k_t (beta_t (v_t - S^T k_t))^T; the read-out S^T q_t goes through an RMSNorm gated
    by SiLU(z). Prefill runs the chunked form (a `lax.scan` over chunks of the sequence, exact
    within each chunk through a unit-triangular solve); decoding runs the one-token recurrence.
  * `full_attention`: grouped-query attention whose q projection also yields a per-channel
    output gate (sigmoid), with zero-centred RMSNorms on q and k and RoPE on the first
    `rotary_dim` channels of each head only.
Every RMSNorm of the residual stream is zero-centred (scale 1 + w).

Padding: positions are `cumsum(attention_mask) - 1`, so a left-padded row computes what the
unpadded row would. Padded tokens are zeroed before the Gated DeltaNet (as the reference does) and
are also exact no-ops on its recurrent state (their decay and write strength are masked to 0).

Cache (one per batch, from `init_cache`): `index` counts the slots written so far (shared by
the batch), `positions` [B] the next position id of each row, `key_mask` [B, S] which slots hold
real tokens; per layer either `{"k", "v"}` [B, S, K, H] (full attention) or
`{"conv" [B, kernel-1, C], "state" [B, Hv, Dk, Dv]}` (linear attention, state kept in f32).
Decoding after a prefill expects left padding (the conv state holds the last kernel-1 inputs).

LoRA targets: full-attention layers q, k, v, o, gate, up, down (the q target adapts the whole
q projection, query and gate halves). Linear-attention layers q, k, v, o, gate, up, down where
q, k, v adapt their slices of the fused `in_proj_qkv` (so a rank-r adapter per part) and o
adapts `out_proj`; `in_proj_z`, `in_proj_a`, `in_proj_b` and the convolution stay frozen.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np

Params = dict[str, Any]
Cache = dict[str, Any]

LINEAR = "linear_attention"
FULL = "full_attention"


@dataclasses.dataclass(frozen=True)
class Config:
    """Static description of a Qwen3.5 text decoder; hashable, so usable as a jit static arg."""

    vocab_size: int
    """Rows of the token embedding and of the output head."""
    hidden_size: int
    """Width D of the residual stream."""
    intermediate_size: int
    """Width of the SwiGLU MLP."""
    num_layers: int
    """Number of decoder layers."""
    layer_types: tuple[str, ...]
    """Per layer, `linear_attention` or `full_attention`."""
    num_heads: int
    """Query heads of the full-attention layers."""
    num_kv_heads: int
    """Key/value heads of the full-attention layers (grouped-query attention)."""
    head_dim: int
    """Channels per full-attention head."""
    rotary_dim: int
    """Leading channels of each full-attention head that RoPE rotates (head_dim * partial_rotary_factor)."""
    rope_theta: float
    """RoPE base."""
    rms_norm_eps: float
    """Epsilon of every RMSNorm."""
    attention_bias: bool
    """Whether the full-attention q/k/v/o projections carry a bias."""
    linear_num_key_heads: int
    """Query/key heads of the Gated DeltaNet."""
    linear_num_value_heads: int
    """Value heads (and recurrent states) of the Gated DeltaNet; a multiple of the key heads."""
    linear_key_head_dim: int
    """Channels Dk per Gated DeltaNet query/key head."""
    linear_value_head_dim: int
    """Channels Dv per Gated DeltaNet value head."""
    linear_conv_kernel: int
    """Taps of the causal depthwise convolution over the fused q/k/v stream."""
    tie_word_embeddings: bool
    """Whether the output head is the transposed token embedding."""
    weight_prefix: str = "model."
    """Prefix of the decoder's tensor names: `model.` for a text checkpoint,
    `model.language_model.` for the multimodal one."""
    chunk_size: int = 64
    """Chunk length of the chunked Gated DeltaNet prefill."""

    def __post_init__(self):
        if len(self.layer_types) != self.num_layers:
            raise ValueError(f"layer_types has {len(self.layer_types)} entries for {self.num_layers} layers")
        bad = sorted(set(self.layer_types) - {LINEAR, FULL})
        if bad:
            raise ValueError(f"unknown qwen3_5 layer types {bad}; expected {LINEAR!r} or {FULL!r}")
        if self.num_heads % self.num_kv_heads:
            raise ValueError(f"num_heads {self.num_heads} is not a multiple of num_kv_heads {self.num_kv_heads}")
        if self.linear_num_value_heads % self.linear_num_key_heads:
            raise ValueError(
                f"linear_num_value_heads {self.linear_num_value_heads} is not a multiple of "
                f"linear_num_key_heads {self.linear_num_key_heads}"
            )
        if self.rotary_dim % 2 or not 0 < self.rotary_dim <= self.head_dim:
            raise ValueError(f"rotary_dim {self.rotary_dim} must be even and in (0, head_dim={self.head_dim}]")

    @property
    def key_dim(self) -> int:
        return self.linear_num_key_heads * self.linear_key_head_dim

    @property
    def value_dim(self) -> int:
        return self.linear_num_value_heads * self.linear_value_head_dim

    @property
    def conv_dim(self) -> int:
        return 2 * self.key_dim + self.value_dim


def config_from_hf(hf_config: dict) -> Config:
    """Builds the Config from a `config.json` dict (`qwen3_5_text`, or `qwen3_5` with a text_config)."""
    multimodal = "text_config" in hf_config
    text = hf_config["text_config"] if multimodal else hf_config
    act = text.get("hidden_act", "silu")
    if act != "silu":
        raise ValueError(f"qwen3_5: hidden_act {act!r} is not supported (only 'silu')")
    rope = dict(text.get("rope_parameters") or {})
    rope_type = rope.get("rope_type", "default")
    if rope_type != "default":
        raise ValueError(f"qwen3_5: rope_type {rope_type!r} is not supported (only 'default')")
    partial = rope.get("partial_rotary_factor", text.get("partial_rotary_factor", 0.25))
    theta = rope.get("rope_theta", text.get("rope_theta", 10000.0))
    n_layers = text["num_hidden_layers"]
    head_dim = text.get("head_dim") or text["hidden_size"] // text["num_attention_heads"]
    layer_types = text.get("layer_types")
    if layer_types is None:
        interval = text.get("full_attention_interval", 4)
        layer_types = [LINEAR if (i + 1) % interval else FULL for i in range(n_layers)]
    tie = hf_config.get("tie_word_embeddings", text.get("tie_word_embeddings", False))
    return Config(
        vocab_size=text["vocab_size"],
        hidden_size=text["hidden_size"],
        intermediate_size=text["intermediate_size"],
        num_layers=n_layers,
        layer_types=tuple(layer_types[:n_layers]),
        num_heads=text["num_attention_heads"],
        num_kv_heads=text["num_key_value_heads"],
        head_dim=head_dim,
        rotary_dim=int(head_dim * partial),
        rope_theta=float(theta),
        rms_norm_eps=text.get("rms_norm_eps", 1e-6),
        attention_bias=bool(text.get("attention_bias", False)),
        linear_num_key_heads=text["linear_num_key_heads"],
        linear_num_value_heads=text["linear_num_value_heads"],
        linear_key_head_dim=text["linear_key_head_dim"],
        linear_value_head_dim=text["linear_value_head_dim"],
        linear_conv_kernel=text["linear_conv_kernel_dim"],
        tie_word_embeddings=bool(tie),
        weight_prefix="model.language_model." if multimodal else "model.",
    )


def params_from_hf(cfg: Config, get: Callable[[str], np.ndarray], dtype) -> Params:
    """Maps HF tensors to the params pytree; linear weights become [D_in, D_out]."""

    def load(name: str, shape: tuple[int, ...], transpose: bool = False) -> jnp.ndarray:
        arr = np.asarray(get(name))
        if transpose:
            arr = arr.T
        if arr.shape != shape:
            raise ValueError(f"qwen3_5: tensor {name} has shape {arr.shape}, expected {shape}")
        return jnp.asarray(arr, dtype=dtype)

    def linear(name: str, d_in: int, d_out: int) -> jnp.ndarray:
        return load(name + ".weight", (d_in, d_out), transpose=True)

    D, F, p = cfg.hidden_size, cfg.intermediate_size, cfg.weight_prefix
    layers = []
    for i, kind in enumerate(cfg.layer_types):
        lp = f"{p}layers.{i}."
        layer = {
            "input_norm": load(lp + "input_layernorm.weight", (D,)),
            "post_norm": load(lp + "post_attention_layernorm.weight", (D,)),
            "gate": linear(lp + "mlp.gate_proj", D, F),
            "up": linear(lp + "mlp.up_proj", D, F),
            "down": linear(lp + "mlp.down_proj", F, D),
        }
        if kind == FULL:
            ap = lp + "self_attn."
            H, K, Hd = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
            layer.update(
                q=linear(ap + "q_proj", D, 2 * H * Hd),
                k=linear(ap + "k_proj", D, K * Hd),
                v=linear(ap + "v_proj", D, K * Hd),
                o=linear(ap + "o_proj", H * Hd, D),
                q_norm=load(ap + "q_norm.weight", (Hd,)),
                k_norm=load(ap + "k_norm.weight", (Hd,)),
            )
            if cfg.attention_bias:
                layer.update(
                    q_bias=load(ap + "q_proj.bias", (2 * H * Hd,)),
                    k_bias=load(ap + "k_proj.bias", (K * Hd,)),
                    v_bias=load(ap + "v_proj.bias", (K * Hd,)),
                    o_bias=load(ap + "o_proj.bias", (D,)),
                )
        else:
            ap = lp + "linear_attn."
            Hv = cfg.linear_num_value_heads
            conv = load(ap + "conv1d.weight", (cfg.conv_dim, 1, cfg.linear_conv_kernel))
            layer.update(
                qkv=linear(ap + "in_proj_qkv", D, cfg.conv_dim),
                z=linear(ap + "in_proj_z", D, cfg.value_dim),
                b=linear(ap + "in_proj_b", D, Hv),
                a=linear(ap + "in_proj_a", D, Hv),
                conv=conv[:, 0, :].T,  # [kernel, C]
                dt_bias=load(ap + "dt_bias", (Hv,)),
                A_log=load(ap + "A_log", (Hv,)),
                norm=load(ap + "norm.weight", (cfg.linear_value_head_dim,)),
                o=linear(ap + "out_proj", cfg.value_dim, D),
            )
        layers.append(layer)
    params = {
        "embed": load(p + "embed_tokens.weight", (cfg.vocab_size, D)),
        "final_norm": load(p + "norm.weight", (D,)),
        "layers": layers,
    }
    if not cfg.tie_word_embeddings:
        params["lm_head"] = linear("lm_head", D, cfg.vocab_size)
    return params


def lora_shapes(cfg: Config) -> list[dict[str, tuple[int, int]]]:
    """Per layer, the (d_in, d_out) of each LoRA target (see the module docstring)."""
    D, F = cfg.hidden_size, cfg.intermediate_size
    mlp = {"gate": (D, F), "up": (D, F), "down": (F, D)}
    shapes = []
    for kind in cfg.layer_types:
        if kind == FULL:
            H, K, Hd = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
            mix = {"q": (D, 2 * H * Hd), "k": (D, K * Hd), "v": (D, K * Hd), "o": (H * Hd, D)}
        else:
            mix = {"q": (D, cfg.key_dim), "k": (D, cfg.key_dim), "v": (D, cfg.value_dim), "o": (cfg.value_dim, D)}
        shapes.append({**mix, **mlp})
    return shapes


def init_cache(cfg: Config, batch: int, max_len: int, dtype) -> Cache:
    """An empty cache for `batch` rows and up to `max_len` tokens."""
    layers = []
    for kind in cfg.layer_types:
        if kind == FULL:
            kv = jnp.zeros((batch, max_len, cfg.num_kv_heads, cfg.head_dim), dtype)  # [B, S, K, H]
            layers.append({"k": kv, "v": kv})
        else:
            layers.append(
                {
                    "conv": jnp.zeros((batch, cfg.linear_conv_kernel - 1, cfg.conv_dim), dtype),
                    "state": jnp.zeros(
                        (batch, cfg.linear_num_value_heads, cfg.linear_key_head_dim, cfg.linear_value_head_dim),
                        jnp.float32,
                    ),
                }
            )
    return {
        "index": jnp.zeros((), jnp.int32),
        "positions": jnp.zeros((batch,), jnp.int32),
        "key_mask": jnp.zeros((batch, max_len), bool),
        "layers": layers,
    }


# ----------------------------------------------------------------------------- building blocks


def _lora_linear(x, w, adapter, scale, bias=None):
    """x @ w (+ bias) plus the low-rank update (x @ a) @ b * scale when an adapter is given."""
    y = x @ w
    if bias is not None:
        y = y + bias
    if adapter is not None:
        y = y + ((x @ adapter["a"].astype(x.dtype)) @ adapter["b"].astype(x.dtype)) * scale
    return y


def _rms(x, eps):
    x32 = x.astype(jnp.float32)
    return x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + eps)


def _zc_rms_norm(x, w, eps):
    """Zero-centred RMSNorm: the stored weight w scales by (1 + w), applied in f32."""
    return (_rms(x, eps) * (1.0 + w.astype(jnp.float32))).astype(x.dtype)


def _gated_rms_norm(x, z, w, eps):
    """RMSNorm of the delta-rule read-out, scaled by w and gated by SiLU(z)."""
    normed = w * _rms(x, eps).astype(x.dtype)
    return (normed * jax.nn.silu(z.astype(jnp.float32))).astype(x.dtype)


def _l2norm(x, eps=1e-6):
    return x * jax.lax.rsqrt(jnp.sum(x * x, axis=-1, keepdims=True) + eps)


def _rope(x, positions, rotary_dim, theta):
    """Rotate-half RoPE on the first `rotary_dim` channels of x [B, T, N, H]; the rest pass through."""
    inv_freq = 1.0 / (theta ** (np.arange(0, rotary_dim, 2, dtype=np.float32) / rotary_dim))  # [R/2]
    angles = positions.astype(jnp.float32)[..., None] * inv_freq  # [B, T, R/2]
    cos = jnp.concatenate([jnp.cos(angles)] * 2, axis=-1)[:, :, None, :]  # [B, T, 1, R]
    sin = jnp.concatenate([jnp.sin(angles)] * 2, axis=-1)[:, :, None, :]
    rot, rest = x[..., :rotary_dim].astype(jnp.float32), x[..., rotary_dim:]
    half = rotary_dim // 2
    rotated = jnp.concatenate([-rot[..., half:], rot[..., :half]], axis=-1)
    out = (rot * cos + rotated * sin).astype(x.dtype)
    return jnp.concatenate([out, rest], axis=-1)


def _attend(q, k, v, allowed):
    """Grouped-query softmax attention.

    q [B, T, N, H], k/v [B, S, K, H], allowed [B, T, S] -> [B, T, N, H]. Rows with no allowed key
    (left-padding queries) get a uniform average instead of NaN; their outputs are never read.
    """
    B, T, N, H = q.shape
    K = k.shape[2]
    qg = q.reshape(B, T, K, N // K, H)  # [B, T, K, G, H]
    logits = jnp.einsum("btkgh,bskh->bkgts", qg, k).astype(jnp.float32) * (H**-0.5)
    logits = jnp.where(allowed[:, None, None], logits, jnp.finfo(jnp.float32).min)
    probs = jax.nn.softmax(logits, axis=-1).astype(v.dtype)  # [B, K, G, T, S]
    out = jnp.einsum("bkgts,bskh->btkgh", probs, v)
    return out.reshape(B, T, N, H)


def _mlp(x, layer, ad, scale):
    g = _lora_linear(x, layer["gate"], ad.get("gate"), scale)
    u = _lora_linear(x, layer["up"], ad.get("up"), scale)
    return _lora_linear(jax.nn.silu(g) * u, layer["down"], ad.get("down"), scale)


# ----------------------------------------------------------------------------- gated delta rule


def gated_delta_recurrent(q, k, v, g, beta, state):
    """The gated delta rule one token at a time (the decoding form).

    q, k [B, T, Hv, Dk] (already L2-normalised and q scaled by Dk^-1/2), v [B, T, Hv, Dv],
    g [B, T, Hv] (log decay, <= 0), beta [B, T, Hv], state [B, Hv, Dk, Dv], all f32.
    Returns (out [B, T, Hv, Dv], final state).
    """

    def step(s, inputs):
        q_t, k_t, v_t, g_t, b_t = inputs  # [B, Hv, Dk], [B, Hv, Dk], [B, Hv, Dv], [B, Hv], [B, Hv]
        s = s * jnp.exp(g_t)[..., None, None]
        predicted = jnp.einsum("bnkv,bnk->bnv", s, k_t)
        delta = (v_t - predicted) * b_t[..., None]
        s = s + jnp.einsum("bnk,bnv->bnkv", k_t, delta)
        return s, jnp.einsum("bnkv,bnk->bnv", s, q_t)

    xs = tuple(jnp.moveaxis(x, 1, 0) for x in (q, k, v, g, beta))
    state, out = jax.lax.scan(step, state, xs)
    return jnp.moveaxis(out, 0, 1), state


def gated_delta_chunked(q, k, v, g, beta, state, chunk_size):
    """The gated delta rule in chunks (the prefill form); same arguments and result as the recurrent form.

    Within a chunk of C tokens with cumulative log decay c_i, the delta-rule writes solve the
    unit lower-triangular system (I + L) U = beta V, L[i, j] = beta_i <k_i, k_j> e^{c_i - c_j}
    (j < i); W = (I + L)^{-1} (beta K e^{c}) carries how each write reads the incoming state.
    The scan over chunks then only needs matmuls: U - W S are the corrections written to the
    state, read out by the causal, decayed q.k scores plus e^{c} q S.
    """
    B, T, N, Dk = k.shape
    Dv = v.shape[-1]
    C = min(chunk_size, T)
    pad = (-T) % C
    if pad:
        # Padded steps have k = 0, beta = 0, g = 0: they neither write nor decay the state.
        q, k, v = (jnp.pad(x, ((0, 0), (0, pad), (0, 0), (0, 0))) for x in (q, k, v))
        g, beta = (jnp.pad(x, ((0, 0), (0, pad), (0, 0))) for x in (g, beta))
    n = (T + pad) // C

    def chunked(x):  # [B, T, N, ...] -> [n, B, N, C, ...]
        x = x.reshape(B, n, C, N, *x.shape[3:])
        return jnp.moveaxis(jnp.moveaxis(x, 1, 0), 3, 2)

    q, k, v, g, beta = (chunked(x) for x in (q, k, v, g, beta))
    c = jnp.cumsum(g, axis=-1)  # [n, B, N, C]
    causal = np.tril(np.ones((C, C), bool))  # j <= i
    decay = jnp.exp(jnp.where(causal, c[..., :, None] - c[..., None, :], -jnp.inf))  # [n, B, N, C, C]
    kk = jnp.einsum("...ik,...jk->...ij", k, k)
    lower = jnp.where(np.tril(np.ones((C, C), bool), -1), beta[..., None] * kk * decay, 0.0)
    system = lower + np.eye(C, dtype=np.float32)
    rhs = jnp.concatenate([v * beta[..., None], k * (beta * jnp.exp(c))[..., None]], axis=-1)
    solved = jax.lax.linalg.triangular_solve(system, rhs, left_side=True, lower=True, unit_diagonal=True)
    u, w = solved[..., :Dv], solved[..., Dv:]  # [n, B, N, C, Dv], [n, B, N, C, Dk]
    scores = jnp.einsum("...ik,...jk->...ij", q, k) * decay  # causal, decayed q.k
    q_decayed = q * jnp.exp(c)[..., None]
    k_to_end = k * jnp.exp(c[..., -1:] - c)[..., None]
    chunk_decay = jnp.exp(c[..., -1])[..., None, None]  # [n, B, N, 1, 1]

    def step(s, xs):
        u_c, w_c, scores_c, q_c, k_c, decay_c = xs
        corrections = u_c - jnp.einsum("bnck,bnkv->bncv", w_c, s)
        out = jnp.einsum("bnck,bnkv->bncv", q_c, s) + jnp.einsum("bnij,bnjv->bniv", scores_c, corrections)
        s = s * decay_c + jnp.einsum("bnck,bncv->bnkv", k_c, corrections)
        return s, out

    state, out = jax.lax.scan(step, state, (u, w, scores, q_decayed, k_to_end, chunk_decay))
    out = jnp.moveaxis(jnp.moveaxis(out, 2, 3), 0, 1).reshape(B, n * C, N, Dv)  # [B, T+pad, N, Dv]
    return out[:, :T], state


# ----------------------------------------------------------------------------- layers


def _full_attention(x, layer, ad, scale, cfg: Config, positions, kv, index, key_mask):
    """Gated attention. kv: this layer's cache entry or None; key_mask [B, S] the valid key slots."""
    B, T, _ = x.shape
    H, K, Hd = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
    qg = _lora_linear(x, layer["q"], ad.get("q"), scale, layer.get("q_bias")).reshape(B, T, H, 2 * Hd)
    q, gate = qg[..., :Hd], qg[..., Hd:].reshape(B, T, H * Hd)
    k = _lora_linear(x, layer["k"], ad.get("k"), scale, layer.get("k_bias")).reshape(B, T, K, Hd)
    v = _lora_linear(x, layer["v"], ad.get("v"), scale, layer.get("v_bias")).reshape(B, T, K, Hd)
    q = _rope(_zc_rms_norm(q, layer["q_norm"], cfg.rms_norm_eps), positions, cfg.rotary_dim, cfg.rope_theta)
    k = _rope(_zc_rms_norm(k, layer["k_norm"], cfg.rms_norm_eps), positions, cfg.rotary_dim, cfg.rope_theta)
    if kv is not None:
        k = jax.lax.dynamic_update_slice(kv["k"], k.astype(kv["k"].dtype), (0, index, 0, 0))  # [B, S, K, H]
        v = jax.lax.dynamic_update_slice(kv["v"], v.astype(kv["v"].dtype), (0, index, 0, 0))
        kv = {"k": k, "v": v}
    S = k.shape[1]
    causal = jnp.arange(S)[None, :] <= (index + jnp.arange(T))[:, None]  # [T, S]
    allowed = causal[None] & key_mask[:, None, :]  # [B, T, S]
    out = _attend(q, k.astype(q.dtype), v.astype(q.dtype), allowed).reshape(B, T, H * Hd)
    out = out * jax.nn.sigmoid(gate)
    return _lora_linear(out, layer["o"], ad.get("o"), scale, layer.get("o_bias")), kv


def _causal_conv(x, w, conv_state):
    """Depthwise causal convolution with SiLU. x [B, T, C], w [kernel, C], conv_state [B, kernel-1, C]."""
    T = x.shape[1]
    kernel = w.shape[0]
    xx = jnp.concatenate([conv_state.astype(x.dtype), x], axis=1)  # [B, kernel-1+T, C]
    out = sum(xx[:, j : j + T] * w[j] for j in range(kernel))
    return jax.nn.silu(out), xx[:, T:]


def _gated_delta_net(x, layer, ad, scale, cfg: Config, mask, lin_cache):
    """Gated DeltaNet token mixer. x [B, T, D], mask [B, T]; lin_cache the layer's cache entry or None."""
    B, T, _ = x.shape
    Nk, Nv, Dk, Dv = cfg.linear_num_key_heads, cfg.linear_num_value_heads, cfg.linear_key_head_dim, cfg.linear_value_head_dim
    x = x * mask[..., None].astype(x.dtype)
    w_qkv = layer["qkv"]
    parts = [(0, cfg.key_dim, "q"), (cfg.key_dim, 2 * cfg.key_dim, "k"), (2 * cfg.key_dim, cfg.conv_dim, "v")]
    mixed = jnp.concatenate(
        [_lora_linear(x, w_qkv[:, lo:hi], ad.get(name), scale) for lo, hi, name in parts], axis=-1
    )  # [B, T, C]
    z = (x @ layer["z"]).reshape(B, T, Nv, Dv)
    beta = jax.nn.sigmoid((x @ layer["b"]).astype(jnp.float32))  # [B, T, Nv]
    a = (x @ layer["a"]).astype(jnp.float32)
    g = -jnp.exp(layer["A_log"].astype(jnp.float32)) * jax.nn.softplus(a + layer["dt_bias"].astype(jnp.float32))
    valid = mask[..., None]
    g, beta = jnp.where(valid, g, 0.0), jnp.where(valid, beta, 0.0)

    if lin_cache is None:
        conv_state = jnp.zeros((B, cfg.linear_conv_kernel - 1, cfg.conv_dim), x.dtype)
        state = jnp.zeros((B, Nv, Dk, Dv), jnp.float32)
    else:
        conv_state, state = lin_cache["conv"], lin_cache["state"]
    mixed, conv_state = _causal_conv(mixed, layer["conv"], conv_state)
    q = mixed[..., : cfg.key_dim].reshape(B, T, Nk, Dk).astype(jnp.float32)
    k = mixed[..., cfg.key_dim : 2 * cfg.key_dim].reshape(B, T, Nk, Dk).astype(jnp.float32)
    v = mixed[..., 2 * cfg.key_dim :].reshape(B, T, Nv, Dv).astype(jnp.float32)
    # Each q/k head serves Nv // Nk consecutive value heads.
    q = jnp.repeat(_l2norm(q), Nv // Nk, axis=2) * (Dk**-0.5)
    k = jnp.repeat(_l2norm(k), Nv // Nk, axis=2)
    if T == 1:
        out, state = gated_delta_recurrent(q, k, v, g, beta, state)
    else:
        out, state = gated_delta_chunked(q, k, v, g, beta, state, cfg.chunk_size)
    out = _gated_rms_norm(out.astype(x.dtype), z, layer["norm"], cfg.rms_norm_eps).reshape(B, T, Nv * Dv)
    new_cache = None if lin_cache is None else {"conv": conv_state.astype(lin_cache["conv"].dtype), "state": state}
    return _lora_linear(out, layer["o"], ad.get("o"), scale), new_cache


# ----------------------------------------------------------------------------- model


def forward(params: Params, cfg: Config, tokens, *, attention_mask=None, lora=None, cache=None):
    """Logits [B, T, V] (f32) for tokens [B, T] int32 and the updated cache (None if none was given).

    attention_mask [B, T] marks real tokens (1) and padding (0); None means no padding. `lora` is
    one agent's adapter `{"layers": [...], "scale": float}` or None.
    """
    B, T = tokens.shape
    mask = jnp.ones((B, T), bool) if attention_mask is None else attention_mask.astype(bool)
    if mask.shape != (B, T):
        raise ValueError(f"attention_mask has shape {mask.shape}, expected {(B, T)}")
    offsets = jnp.cumsum(mask.astype(jnp.int32), axis=1) - 1  # [B, T]
    if cache is None:
        index = 0
        positions = jnp.maximum(offsets, 0)
        key_mask = mask
    else:
        index = cache["index"]
        positions = jnp.maximum(cache["positions"][:, None] + offsets, 0)
        key_mask = jax.lax.dynamic_update_slice(cache["key_mask"], mask, (0, index))
    adapters, scale = _split_lora(lora, cfg)

    x = params["embed"][tokens]  # [B, T, D]
    new_layers = []
    for i, (kind, layer) in enumerate(zip(cfg.layer_types, params["layers"])):
        ad = adapters[i]
        layer_cache = None if cache is None else cache["layers"][i]
        h = _zc_rms_norm(x, layer["input_norm"], cfg.rms_norm_eps)
        if kind == FULL:
            h, layer_cache = _full_attention(h, layer, ad, scale, cfg, positions, layer_cache, index, key_mask)
        else:
            h, layer_cache = _gated_delta_net(h, layer, ad, scale, cfg, mask, layer_cache)
        x = x + h
        x = x + _mlp(_zc_rms_norm(x, layer["post_norm"], cfg.rms_norm_eps), layer, ad, scale)
        new_layers.append(layer_cache)
    x = _zc_rms_norm(x, params["final_norm"], cfg.rms_norm_eps)
    head = params["embed"].T if cfg.tie_word_embeddings else params["lm_head"]
    logits = (x @ head).astype(jnp.float32)  # [B, T, V]
    if cache is None:
        return logits, None
    new_cache = {
        "index": index + T,
        "positions": cache["positions"] + jnp.sum(mask, axis=1, dtype=jnp.int32),
        "key_mask": key_mask,
        "layers": new_layers,
    }
    return logits, new_cache


def _split_lora(lora, cfg: Config):
    if lora is None:
        return [{} for _ in range(cfg.num_layers)], 0.0
    layers = lora["layers"]
    if len(layers) != cfg.num_layers:
        raise ValueError(f"LoRA has {len(layers)} layers, the model {cfg.num_layers}")
    return layers, lora["scale"]
