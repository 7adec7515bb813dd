"""The `qwen3_5` family: the Qwen3.5 text decoder (transformers `Qwen3_5ForCausalLM`).

Layers alternate, per `layer_types`, between
  * `linear_attention`: a Gated DeltaNet. A fused q/k/v projection goes through a causal
    depthwise convolution and SiLU; q and k are L2-normalised; a per-head recurrent state
    S [Dk, Dv] is decayed by exp(g_t) and corrected by the delta rule
    S <- S + k_t (beta_t (v_t - S^T k_t))^T; the read-out S^T q_t goes through an RMSNorm gated
    by SiLU(z). Prefill runs the chunked form (a `lax.scan` over chunks, exact within a chunk
    through a unit-triangular solve); a one-token step runs the recurrence.
  * `full_attention`: grouped-query attention whose q projection also yields a per-channel
    sigmoid output gate, with RMSNorms on q and k and RoPE on the first `rotary_dim` channels
    of each head only.
Every RMSNorm except the Gated DeltaNet's output norm stores its weight as an offset (1 + w).

Padding follows `omjax.models.base` (positions count real tokens only) and may sit anywhere,
e.g. left padding both before a cached shared prefix and before each suffix appended to it.
As in the reference, padded tokens are zeroed before the Gated DeltaNet; here they are also
exact no-ops on its state: their decay and write strength are masked to 0, and the causal
convolution runs over the real tokens only (each row is compacted, convolved, scattered back).
So a padded row computes what the unpadded row would, with or without a cache.

Layers run as scans over the repeating block of `layer_types` (`base.scan_blocks`; Qwen3.5: 3
Gated DeltaNet + 1 full attention), their params one stack per kind `[N_kind, ...]`.

Cache (`init_cache`): the common `{"layers", "positions", "index"}` of `omjax.models.base`,
`layers` one stack per kind: full attention `k`, `v` [Nf, B, S, K, Dh], linear attention
`conv` [Nl, B, kernel-1, C] (the last real inputs of the convolution) and `state`
[Nl, B, Hv, Dk, Dv] (f32).

LoRA targets: q, k, v, o, gate, up, down in every layer. In full-attention layers q adapts
the whole q projection (query and gate halves). In linear-attention layers q, k and v adapt
their slices of the fused `in_proj_qkv`, and o adapts `out_proj`; `in_proj_z`, `in_proj_a`,
`in_proj_b` and the convolution stay frozen.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np

from omjax.models import base

LINEAR = "linear_attention"
FULL = "full_attention"

SEGMENTS = False
"""Whether `forward` honours branch masks (`omjax.models.base.token_positions`): no, its Gated
DeltaNet layers read every earlier token, so branches of one prompt would see each other."""

forward_and_trunk = None
"""Not provided: a recurrent family scores each state branch in its own row (`SEGMENTS` is
False), so its rollout rows are not the update's; the update computes the trunk itself."""

TRUNK_CACHE = False
"""Whether `forward` continues a cache from a trunk: no (`lora.scope=reply` also needs branch
masks, which this family cannot run)."""


@dataclasses.dataclass(frozen=True)
class Config:
    """Static description of a Qwen3.5 text decoder (hashable: a jit static argument)."""

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
    """Key/value heads of the full-attention layers."""
    head_dim: int
    """Channels per full-attention head."""
    rotary_dim: int
    """Leading channels of each full-attention head that RoPE rotates (head_dim * partial_rotary_factor)."""
    rope_theta: float
    """RoPE base."""
    rms_eps: float
    """Epsilon of every RMSNorm."""
    linear_num_key_heads: int
    """Query/key heads of the Gated DeltaNet."""
    linear_num_value_heads: int
    """Value heads (one recurrent state each) of the Gated DeltaNet; a multiple of the key heads."""
    linear_key_head_dim: int
    """Channels Dk per Gated DeltaNet query/key head."""
    linear_value_head_dim: int
    """Channels Dv per Gated DeltaNet value head."""
    linear_conv_kernel: int
    """Taps of the causal depthwise convolution over the fused q/k/v stream."""
    tie_embeddings: bool = False
    """The output head is the transposed token embedding."""
    attention_bias: bool = False
    """The full-attention q/k/v/o projections carry a bias."""
    chunk_size: int = 64
    """Chunk length of the chunked Gated DeltaNet prefill."""

    def __post_init__(self):
        if len(self.layer_types) != self.num_layers:
            raise ValueError(f"qwen3_5: layer_types has {len(self.layer_types)} entries for "
                             f"{self.num_layers} layers")
        bad = sorted(set(self.layer_types) - {LINEAR, FULL})
        if bad:
            raise ValueError(f"qwen3_5: unknown layer types {bad}; expected {LINEAR!r} or {FULL!r}")
        if self.num_heads % self.num_kv_heads:
            raise ValueError(f"qwen3_5: num_heads {self.num_heads} is not a multiple of "
                             f"num_kv_heads {self.num_kv_heads}")
        if self.linear_num_value_heads % self.linear_num_key_heads:
            raise ValueError(f"qwen3_5: linear_num_value_heads {self.linear_num_value_heads} is not "
                             f"a multiple of linear_num_key_heads {self.linear_num_key_heads}")
        if self.rotary_dim % 2 or not 0 < self.rotary_dim <= self.head_dim:
            raise ValueError(f"qwen3_5: rotary_dim {self.rotary_dim} must be even and in "
                             f"(0, head_dim={self.head_dim}]")
        if self.chunk_size < 1:
            raise ValueError(f"qwen3_5: chunk_size must be >= 1, got {self.chunk_size}")

    @property
    def key_dim(self) -> int:
        return self.linear_num_key_heads * self.linear_key_head_dim

    @property
    def value_dim(self) -> int:
        return self.linear_num_value_heads * self.linear_value_head_dim

    @property
    def conv_dim(self) -> int:
        """Channels of the fused q/k/v stream that the convolution runs over."""
        return 2 * self.key_dim + self.value_dim

    @property
    def n_params(self) -> int:
        """Parameter count of the frozen base (embeddings counted once when tied)."""
        d, f = self.hidden_size, self.intermediate_size
        mlp_norms = 3 * d * f + 2 * d
        hd, h, k = self.head_dim, self.num_heads, self.num_kv_heads
        full = d * hd * (2 * h + 2 * k) + h * hd * d + 2 * hd
        if self.attention_bias:
            full += hd * (2 * h + 2 * k) + d
        hv = self.linear_num_value_heads
        linear = (d * (self.conv_dim + self.value_dim + 2 * hv) + self.conv_dim * self.linear_conv_kernel
                  + 2 * hv + self.linear_value_head_dim + self.value_dim * d)
        layers = sum(full if kind == FULL else linear for kind in self.layer_types)
        emb = self.vocab_size * d * (1 if self.tie_embeddings else 2)
        return layers + self.num_layers * mlp_norms + emb + d


def config_from_hf(hf_config: dict) -> Config:
    """Config from a `config.json` dict: `qwen3_5_text`, or `qwen3_5` whose text_config is used."""
    text = hf_config.get("text_config", hf_config)

    def need(key):
        if key not in text:
            raise ValueError(f"qwen3_5 config.json lacks {key!r}")
        return text[key]

    act = text.get("hidden_act", "silu")
    if act != "silu":
        raise ValueError(f"qwen3_5: hidden_act {act!r} is not supported (only 'silu')")
    rope = dict(text.get("rope_parameters") or {})
    rope_type = rope.get("rope_type", "default")
    if rope_type != "default":
        raise ValueError(f"qwen3_5: rope_type {rope_type!r} is not supported (only 'default')")
    partial = rope.get("partial_rotary_factor", text.get("partial_rotary_factor", 0.25))
    theta = rope.get("rope_theta", text.get("rope_theta", 10000.0))
    n_layers = need("num_hidden_layers")
    heads = need("num_attention_heads")
    head_dim = text.get("head_dim") or need("hidden_size") // heads
    layer_types = text.get("layer_types")
    if layer_types is None:
        interval = text.get("full_attention_interval", 4)
        layer_types = [LINEAR if (i + 1) % interval else FULL for i in range(n_layers)]
    tie = text.get("tie_word_embeddings", hf_config.get("tie_word_embeddings", False))
    return Config(
        vocab_size=need("vocab_size"), hidden_size=need("hidden_size"),
        intermediate_size=need("intermediate_size"), num_layers=n_layers,
        layer_types=tuple(layer_types[:n_layers]), num_heads=heads,
        num_kv_heads=text.get("num_key_value_heads") or heads, head_dim=head_dim,
        rotary_dim=int(head_dim * partial), rope_theta=float(theta),
        rms_eps=float(text.get("rms_norm_eps", 1e-6)),
        linear_num_key_heads=need("linear_num_key_heads"),
        linear_num_value_heads=need("linear_num_value_heads"),
        linear_key_head_dim=need("linear_key_head_dim"),
        linear_value_head_dim=need("linear_value_head_dim"),
        linear_conv_kernel=need("linear_conv_kernel_dim"),
        tie_embeddings=bool(tie), attention_bias=bool(text.get("attention_bias", False)))


def params_from_hf(cfg: Config, get: Callable[[str], np.ndarray], dtype) -> dict:
    """Parameter pytree from HF tensors named as in `Qwen3_5ForCausalLM`; linears as [D_in, D_out].

    The decoder layers are one stack per layer kind, `params["layers"][kind][name]` `[N_kind, ...]`
    (bottom layer first), which `base.scan_blocks` runs block by block."""
    d, f = cfg.hidden_size, cfg.intermediate_size
    layers = {}
    for kind in (LINEAR, FULL):
        ids = [i for i, t in enumerate(cfg.layer_types) if t == kind]
        if not ids:
            continue

        def stacked(name, shape, transpose=False):
            names = [f"model.layers.{i}.{name}" for i in ids]
            return base.take_stacked(get, names, shape, dtype, transpose=transpose)

        vec = lambda name, n: stacked(name, (n,))                                        # [N, n]
        lin = lambda name, d_out, d_in: stacked(name + ".weight", (d_out, d_in), transpose=True)  # [N, D_in, D_out]
        layer = {
            "attn_norm": vec("input_layernorm.weight", d),
            "mlp_norm": vec("post_attention_layernorm.weight", d),
            "gate": lin("mlp.gate_proj", f, d), "up": lin("mlp.up_proj", f, d),
            "down": lin("mlp.down_proj", d, f),
        }
        if kind == FULL:
            hd, hq, hkv = cfg.head_dim, cfg.num_heads * cfg.head_dim, cfg.num_kv_heads * cfg.head_dim
            layer.update(
                q=lin("self_attn.q_proj", 2 * hq, d), k=lin("self_attn.k_proj", hkv, d),
                v=lin("self_attn.v_proj", hkv, d), o=lin("self_attn.o_proj", d, hq),
                q_norm=vec("self_attn.q_norm.weight", hd), k_norm=vec("self_attn.k_norm.weight", hd))
            if cfg.attention_bias:
                for t, n in (("q", 2 * hq), ("k", hkv), ("v", hkv), ("o", d)):
                    layer[t + "_bias"] = vec(f"self_attn.{t}_proj.bias", n)
        else:
            hv = cfg.linear_num_value_heads
            conv = stacked("linear_attn.conv1d.weight", (cfg.conv_dim, 1, cfg.linear_conv_kernel))
            layer.update(
                qkv=lin("linear_attn.in_proj_qkv", cfg.conv_dim, d),
                z=lin("linear_attn.in_proj_z", cfg.value_dim, d),
                b=lin("linear_attn.in_proj_b", hv, d), a=lin("linear_attn.in_proj_a", hv, d),
                conv=jnp.swapaxes(conv[:, :, 0, :], 1, 2),                             # [N, kernel, C]
                dt_bias=vec("linear_attn.dt_bias", hv), A_log=vec("linear_attn.A_log", hv),
                out_norm=vec("linear_attn.norm.weight", cfg.linear_value_head_dim),
                o=lin("linear_attn.out_proj", d, cfg.value_dim))
        layers[kind] = layer
    params = {"embed": base.take(get, "model.embed_tokens.weight", (cfg.vocab_size, d), dtype),
              "layers": layers, "norm": base.take(get, "model.norm.weight", (d,), dtype)}
    if not cfg.tie_embeddings:
        params["lm_head"] = base.take(get, "lm_head.weight", (cfg.vocab_size, d), dtype,
                                      transpose=True)
    return params


def lora_shapes(cfg: Config) -> list[dict[str, tuple[int, int]]]:
    """Per layer, (d_in, d_out) of each LoRA target (see the module docstring)."""
    d, f = cfg.hidden_size, cfg.intermediate_size
    mlp = {"gate": (d, f), "up": (d, f), "down": (f, d)}
    shapes = []
    for kind in cfg.layer_types:
        if kind == FULL:
            hq, hkv = cfg.num_heads * cfg.head_dim, cfg.num_kv_heads * cfg.head_dim
            mix = {"q": (d, 2 * hq), "k": (d, hkv), "v": (d, hkv), "o": (hq, d)}
        else:
            mix = {"q": (d, cfg.key_dim), "k": (d, cfg.key_dim), "v": (d, cfg.value_dim),
                   "o": (cfg.value_dim, d)}
        shapes.append({**mix, **mlp})
    return shapes


def init_cache(cfg: Config, batch: int, max_len: int, dtype=jnp.float32) -> dict:
    """An empty cache for `batch` rows and up to `max_len` tokens (see the module docstring);
    its layers are one stack per kind, `{kind: {name: [N_kind, B, ...]}}`."""
    n_full, n_linear = cfg.layer_types.count(FULL), cfg.layer_types.count(LINEAR)
    layers = {}
    if n_full:
        layers[FULL] = base.kv_stack_cache(n_full, batch, max_len, cfg.num_kv_heads, cfg.head_dim, dtype)
    if n_linear:
        layers[LINEAR] = {
            "conv": jnp.zeros((n_linear, batch, cfg.linear_conv_kernel - 1, cfg.conv_dim), dtype),
            "state": jnp.zeros((n_linear, batch, cfg.linear_num_value_heads, cfg.linear_key_head_dim,
                                cfg.linear_value_head_dim), jnp.float32)}
    return base.init_cache_common(layers, batch, max_len)


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


def _full_attention(p: dict, cfg: Config, h, ctx: base.Context, cos, sin, lora_layer, scale,
                    layer_cache):
    """Gated attention on the normed hidden states h [B, T, D]."""
    b, t, _ = h.shape
    nh, hd = cfg.num_heads, cfg.head_dim
    proj = lambda name: base.lora_linear(h, p[name], lora_layer, name, scale, p.get(name + "_bias"))
    qg = proj("q").reshape(b, t, nh, 2 * hd)                         # per head: query | gate
    q, gate = qg[..., :hd], qg[..., hd:].reshape(b, t, nh * hd)      # [B, T, H, Dh], [B, T, H*Dh]
    k = proj("k").reshape(b, t, cfg.num_kv_heads, hd)                # [B, T, K, Dh]
    v = proj("v").reshape(b, t, cfg.num_kv_heads, hd)
    q = base.apply_rope(base.rms_norm(q, p["q_norm"], cfg.rms_eps, unit_offset=True), cos, sin)
    k = base.apply_rope(base.rms_norm(k, p["k_norm"], cfg.rms_eps, unit_offset=True), cos, sin)
    if layer_cache is not None:
        layer_cache = base.cache_write(layer_cache, ctx, k=k, v=v)
        k, v = layer_cache["k"], layer_cache["v"]                    # [B, S, K, Dh]
    o = base.attention(q, k, v, ctx.mask(), scale=hd ** -0.5).reshape(b, t, nh * hd)
    o = o * jax.nn.sigmoid(gate)
    return base.lora_linear(o, p["o"], lora_layer, "o", scale, p.get("o_bias")), layer_cache


def _causal_conv(x, w, conv_state, real):
    """Depthwise causal convolution + SiLU over the real tokens of each row.

    x [B, T, C]; w [kernel, C]; conv_state [B, kernel-1, C], the last real inputs before this
    chunk; real [B, T] marks non-padding. Padding may sit anywhere in the chunk: each row's real
    tokens are gathered to the front in order, convolved after conv_state, and scattered back,
    so a real token's window never contains padding. Returns the output [B, T, C] (padding
    slots hold values nothing reads) and the next conv_state.
    """
    t, kernel = x.shape[1], w.shape[0]
    order = jnp.argsort(jnp.logical_not(real), axis=1, stable=True)       # [B, T] real first
    compact = jnp.take_along_axis(x, order[..., None], axis=1)
    xx = jnp.concatenate([conv_state.astype(x.dtype), compact], axis=1)    # [B, kernel-1+T, C]
    out = sum(xx[:, j:j + t] * w[j] for j in range(kernel))
    out = jnp.take_along_axis(out, jnp.argsort(order, axis=1)[..., None], axis=1)
    n_real = jnp.sum(real, axis=1, dtype=jnp.int32)                          # [B]
    tail = n_real[:, None] + jnp.arange(kernel - 1)                           # [B, kernel-1]
    return jax.nn.silu(out), jnp.take_along_axis(xx, tail[..., None], axis=1)


def _gated_delta_net(p: dict, cfg: Config, h, real, lora_layer, scale, layer_cache):
    """Gated DeltaNet on the normed hidden states h [B, T, D]; real [B, T] marks non-padding."""
    b, t, _ = h.shape
    nk, nv = cfg.linear_num_key_heads, cfg.linear_num_value_heads
    dk, dv = cfg.linear_key_head_dim, cfg.linear_value_head_dim
    h = h * real[..., None].astype(h.dtype)
    w = p["qkv"]
    kd = cfg.key_dim
    mixed = jnp.concatenate([
        base.lora_linear(h, w[:, :kd], lora_layer, "q", scale),
        base.lora_linear(h, w[:, kd:2 * kd], lora_layer, "k", scale),
        base.lora_linear(h, w[:, 2 * kd:], lora_layer, "v", scale)], axis=-1)   # [B, T, C]
    z = (h @ p["z"]).reshape(b, t, nv, dv)
    beta = jax.nn.sigmoid((h @ p["b"]).astype(jnp.float32))                      # [B, T, Hv]
    a = (h @ p["a"]).astype(jnp.float32)
    g = -jnp.exp(p["A_log"].astype(jnp.float32)) * jax.nn.softplus(a + p["dt_bias"].astype(jnp.float32))
    g = jnp.where(real[..., None], g, 0.0)
    beta = jnp.where(real[..., None], beta, 0.0)

    if layer_cache is None:
        conv_state = jnp.zeros((b, cfg.linear_conv_kernel - 1, cfg.conv_dim), h.dtype)
        state = jnp.zeros((b, nv, dk, dv), jnp.float32)
    else:
        conv_state, state = layer_cache["conv"], layer_cache["state"]
    mixed, conv_state = _causal_conv(mixed, p["conv"], conv_state, real)
    mixed = mixed.astype(jnp.float32)
    q = mixed[..., :kd].reshape(b, t, nk, dk)
    k = mixed[..., kd:2 * kd].reshape(b, t, nk, dk)
    v = mixed[..., 2 * kd:].reshape(b, t, nv, dv)
    # Each q/k head serves nv // nk consecutive value heads.
    q = jnp.repeat(_l2norm(q), nv // nk, axis=2) * dk ** -0.5                  # [B, T, Hv, Dk]
    k = jnp.repeat(_l2norm(k), nv // nk, axis=2)
    if t == 1:
        o, state = gated_delta_recurrent(q, k, v, g, beta, state)
    else:
        o, state = gated_delta_chunked(q, k, v, g, beta, state, cfg.chunk_size)  # [B, T, Hv, Dv]
    o = _gated_rms_norm(o.astype(h.dtype), z, p["out_norm"], cfg.rms_eps).reshape(b, t, nv * dv)
    if layer_cache is not None:
        layer_cache = {"conv": conv_state.astype(layer_cache["conv"].dtype), "state": state}
    return base.lora_linear(o, p["o"], lora_layer, "o", scale), layer_cache


def _l2norm(x, eps=1e-6):
    return x * jax.lax.rsqrt(jnp.sum(x * x, axis=-1, keepdims=True) + eps)


def _gated_rms_norm(x, z, w, eps):
    """RMSNorm (plain weight w) of the delta-rule read-out, gated by SiLU(z) in f32."""
    xf = x.astype(jnp.float32)
    normed = (xf * jax.lax.rsqrt(jnp.mean(xf * xf, axis=-1, keepdims=True) + eps)).astype(x.dtype)
    return (w * normed * jax.nn.silu(z.astype(jnp.float32))).astype(x.dtype)


def _layer(p: dict, cfg: Config, kind: str, x, ctx: base.Context, cos, sin, lora_layer, scale,
           layer_cache):
    h = base.rms_norm(x, p["attn_norm"], cfg.rms_eps, unit_offset=True)
    if kind == FULL:
        h, layer_cache = _full_attention(p, cfg, h, ctx, cos, sin, lora_layer, scale, layer_cache)
    else:
        h, layer_cache = _gated_delta_net(p, cfg, h, ctx.q_pos >= 0, lora_layer, scale, layer_cache)
    x = x + h
    h = base.rms_norm(x, p["mlp_norm"], cfg.rms_eps, unit_offset=True)
    return x + base.swiglu_mlp(h, p, lora_layer, scale), layer_cache


def _layers(params: dict, cfg: Config, tokens: jax.Array, attention_mask, lora, lora_scale: float,
            cache: dict | None, remat: bool | int, trunk: base.Trunk | None, stop: int):
    """Run layers [first, stop) (first = 0, or where `trunk` stopped) as scans over blocks of
    the layer pattern (`base.scan_blocks`): (x [B, T, D], cache, layer caches)."""
    ctx, cache = base.make_context(tokens, attention_mask, cache)
    cos, sin = base.rope_cos_sin(jnp.maximum(ctx.q_pos, 0),
                                 base.rope_inv_freq(cfg.rotary_dim, cfg.rope_theta))  # [B, T, R]
    if trunk is None:
        x, first = params["embed"][tokens], 0                                         # [B, T, D]
    else:
        x, first = trunk.hidden, trunk.n_layers

    def body(kind, p, x, lora_layer, layer_cache, _):
        return _layer(p, cfg, kind, x, ctx, cos, sin, lora_layer, lora_scale, layer_cache)

    x, new_layers = base.scan_blocks(body, x, cfg.layer_types, params["layers"],
                                     None if lora is None else lora["layers"],
                                     base.lora_slots("qwen3_5", lora, lora_shapes(cfg)),
                                     None if cache is None else cache["layers"], first, stop, remat=remat)
    return x, cache, new_layers


def trunk(params: dict, cfg: Config, tokens: jax.Array, *, attention_mask: jax.Array | None = None,
          n_layers: int) -> base.Trunk:
    """The frozen base's residual stream after its first `n_layers` layers (see `base.Trunk`)."""
    base.check_forward_inputs("qwen3_5", cfg.num_layers, tokens, attention_mask, None)
    base.check_trunk("qwen3_5", cfg.num_layers, n_layers)
    x, _, _ = _layers(params, cfg, tokens, attention_mask, None, 1.0, None, False, None, n_layers)
    return base.Trunk(hidden=x, extras={}, n_layers=n_layers)


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
    base.check_forward_inputs("qwen3_5", cfg.num_layers, tokens, attention_mask, lora, trunk=trunk, cache=cache,
                              lora_shapes=lora_shapes(cfg))
    x, cache, new_layers = _layers(params, cfg, tokens, attention_mask, lora, lora_scale, cache, remat,
                                   trunk, cfg.num_layers)
    if last_only:
        x = x[:, -int(last_only):]
    x = base.rms_norm(x, params["norm"], cfg.rms_eps, unit_offset=True)
    w = params["embed"].T if cfg.tie_embeddings else params["lm_head"]                # [D, V]
    logits = base.unembed(x, w)
    if cache is not None:
        cache = {**cache, "layers": new_layers}
    return logits, cache
