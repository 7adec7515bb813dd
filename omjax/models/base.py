"""Building blocks shared by every decoder family (pure functions over arrays).

Conventions every family follows:
- Linear weights are stored `[D_in, D_out]` so a projection is `x @ w`.
- Hidden states are `[B, T, D]`; attention heads are `[B, T, H, Dh]`.
- Positions are per row (`[B, T]` int32) because prompts are left-padded: a padding slot gets
  position -1 and is never attended to.
- A decode cache is a dict `{"layers": ..., "positions": [B, S] int32, "index": int32 []}`: `positions[b, s]` is the rotary position of the token stored in slot `s`
  (-1 for an empty or padding slot) and `index` is the next slot to write. All rows write the
  same slot range, so writes are one `dynamic_update_slice`; causality is by slot order.
  `layers` is either a list of per-layer dicts (entries `[B, S, ...]`) or, in a family whose
  layers are one scanned stack (`scan_layers`), one dict of stacked entries `[L, B, S, ...]`.
  Entries named in `SLOT_KEYS` carry the slot axis right after the batch axis; any other entry
  (a recurrent state) has no slot axis. A recurrent layer must leave its state
  unchanged on padding tokens (mask == 0), because padding can sit between a cached prefix and
  the next chunk.
"""

from __future__ import annotations

from typing import Callable

import flax.struct
import jax
import jax.numpy as jnp
import numpy as np

from omjax.models import lora as lora_lib
from omjax.models.lora import linear

# A large finite negative instead of -inf: a fully masked row (a left-padding query) then gets a
# uniform softmax instead of NaNs that would poison gradients through `jnp.where`.
_MASK_VALUE = -1e30


# --------------------------------------------------------------------------- weight loading


def take(get: Callable[[str], np.ndarray], name: str, shape: tuple[int, ...], dtype,
         *, transpose: bool = False) -> jax.Array:
    """Fetch HF tensor `name`, check its HF shape, optionally transpose, cast to `dtype`.

    `shape` is the shape as stored by Hugging Face (torch `nn.Linear` is `[D_out, D_in]`);
    `transpose=True` turns such a weight into the `[D_in, D_out]` layout used here.
    """
    arr = get(name)
    if isinstance(arr, jax.ShapeDtypeStruct):
        # Shapes only: under `jax.eval_shape` this allocates nothing, so a parameter tree of a
        # model's real shapes can be drawn at random on the device (`omjax.models.configs`).
        if tuple(arr.shape) != tuple(shape):
            raise ValueError(f"tensor {name!r}: shape {tuple(arr.shape)} but the config implies {tuple(shape)}")
        return jnp.zeros(tuple(shape)[::-1] if transpose else tuple(shape), dtype)
    arr = np.asarray(arr)
    if tuple(arr.shape) != tuple(shape):
        raise ValueError(f"tensor {name!r}: checkpoint shape {tuple(arr.shape)} but the config "
                         f"implies {tuple(shape)}")
    if transpose:
        arr = arr.T
    return jnp.asarray(arr, dtype=dtype)


def take_stacked(get: Callable[[str], np.ndarray], names: list[str], shape: tuple[int, ...], dtype,
                 *, transpose: bool = False) -> jax.Array:
    """`take` for one tensor of every layer (`names`, bottom layer first), stacked `[L, ...]`.

    Each tensor's HF shape is checked on its own (the error names it); the stack is built on the
    host, so loading holds one copy of the weights on the device, not a per-layer one as well.
    """
    first = get(names[0])
    if isinstance(first, jax.ShapeDtypeStruct):
        for n in names:
            take(get, n, shape, dtype, transpose=transpose)     # shape checks only
        one = tuple(shape)[::-1] if transpose else tuple(shape)
        return jnp.zeros((len(names),) + one, dtype)
    out = []
    for n in names:
        arr = np.asarray(get(n))
        if tuple(arr.shape) != tuple(shape):
            raise ValueError(f"tensor {n!r}: checkpoint shape {tuple(arr.shape)} but the config "
                             f"implies {tuple(shape)}")
        out.append(arr.T if transpose else arr)
    return jnp.asarray(np.stack(out), dtype=dtype)                   # [L, ...]


# --------------------------------------------------------------------------- norms and MLPs


def rms_norm(x: jax.Array, w: jax.Array, eps: float, *, unit_offset: bool = False) -> jax.Array:
    """RMSNorm computed in f32 (as the HF references do), cast back to `x.dtype`.

    `unit_offset=True` scales by `1 + w` (Gemma / Qwen3.5 store the weight as an offset).
    """
    xf = x.astype(jnp.float32)
    y = xf * jax.lax.rsqrt(jnp.mean(xf * xf, axis=-1, keepdims=True) + eps)
    scale = w.astype(jnp.float32)
    if unit_offset:
        scale = 1.0 + scale
    return (y * scale).astype(x.dtype)


def lora_linear(x: jax.Array, w: jax.Array, lora_layer: dict | None, target: str,
                scale: float, bias: jax.Array | None = None) -> jax.Array:
    """`x @ w (+ bias)` plus the adapter for `target` if this layer's LoRA dict has one."""
    ab = None if lora_layer is None else lora_layer.get(target)
    y = linear(x, w, ab, scale)
    return y if bias is None else y + bias.astype(y.dtype)


def swiglu_mlp(x: jax.Array, p: dict, lora_layer: dict | None, scale: float,
               act: Callable[[jax.Array], jax.Array] = jax.nn.silu) -> jax.Array:
    """`down(act(gate(x)) * up(x))`; `p` holds `gate`, `up`, `down` as `[D_in, D_out]`."""
    g = lora_linear(x, p["gate"], lora_layer, "gate", scale)   # [B, T, F]
    u = lora_linear(x, p["up"], lora_layer, "up", scale)       # [B, T, F]
    return lora_linear(act(g) * u, p["down"], lora_layer, "down", scale)  # [B, T, D]


# --------------------------------------------------------------------------- rotary embedding


def rope_inv_freq(rotary_dim: int, theta: float, scaling: dict | None = None) -> np.ndarray:
    """Inverse frequencies `[rotary_dim // 2]` for the HF rope types used by our families.

    Supported `scaling["rope_type"]`: "default" (or no scaling), "linear", "llama3".
    """
    inv = 1.0 / (theta ** (np.arange(0, rotary_dim, 2, dtype=np.float64) / rotary_dim))
    rope_type = "default" if not scaling else scaling.get("rope_type", scaling.get("type", "default"))
    if rope_type == "default":
        return inv.astype(np.float32)
    if rope_type == "linear":
        return (inv / float(scaling["factor"])).astype(np.float32)
    if rope_type == "llama3":
        factor = float(scaling["factor"])
        low = float(scaling["low_freq_factor"])
        high = float(scaling["high_freq_factor"])
        old_len = float(scaling["original_max_position_embeddings"])
        wavelen = 2 * np.pi / inv
        low_wavelen, high_wavelen = old_len / low, old_len / high
        smooth = (old_len / wavelen - low) / (high - low)
        scaled = np.where(wavelen > low_wavelen, inv / factor, inv)
        mid = (wavelen <= low_wavelen) & (wavelen >= high_wavelen)
        scaled = np.where(mid, (1 - smooth) * inv / factor + smooth * inv, scaled)
        return scaled.astype(np.float32)
    raise ValueError(f"unsupported rope scaling type {rope_type!r} (supported: default, linear, llama3)")


def rope_cos_sin(positions: jax.Array, inv_freq: np.ndarray) -> tuple[jax.Array, jax.Array]:
    """cos/sin tables `[B, T, R]` (R = rotary dim) for per-row positions `[B, T]`."""
    ang = positions.astype(jnp.float32)[..., None] * jnp.asarray(inv_freq)  # [B, T, R/2]
    ang = jnp.concatenate([ang, ang], axis=-1)                              # [B, T, R]
    return jnp.cos(ang), jnp.sin(ang)


def apply_rope(x: jax.Array, cos: jax.Array, sin: jax.Array) -> jax.Array:
    """HF "rotate_half" rotary on the first R channels of `x` `[B, T, H, Dh]`; the rest pass.

    Partial rotary (R < Dh, as in Qwen3.5) leaves channels R.. untouched.
    """
    r = cos.shape[-1]
    half = r // 2
    xr, xp = x[..., :r].astype(jnp.float32), x[..., r:]
    # The tables repeat their first half (`rope_cos_sin`), so each half of the output is one
    # product pair: no rotated copy of x (4 % of SmolLM2's prefill, 8 x 512 tokens).
    c, s = cos[:, :, None, :half], sin[:, :, None, :half]         # [B, T, 1, R/2]
    x1, x2 = xr[..., :half], xr[..., half:]
    out = jnp.concatenate([x1 * c - x2 * s, x2 * c + x1 * s], axis=-1).astype(x.dtype)
    return out if xp.shape[-1] == 0 else jnp.concatenate([out, xp], axis=-1)


# --------------------------------------------------------------------------- attention


QUERY_BLOCK = 64
"""Queries per block of the blocked attention (64 measured best on SmolLM2's prefill shapes,
2-core CPU)."""

ATTENTION_IMPLEMENTATIONS = ("blocked", "fused")

ATTENTION: str | None = None
"""The implementation `attention` uses when a call names none; None: `attention_implementation`'s
choice for the backend. Read at trace time (a benchmark sets it to compare the two)."""


def attention_implementation() -> str:
    """`fused` (`jax.nn.dot_product_attention`, cuDNN flash attention on a GPU where its shapes
    and dtypes allow, XLA otherwise) on an accelerator; `blocked` (below) on the CPU, where
    skipping the masked upper triangle measured faster (`python -m omjax.bench attention`)."""
    if ATTENTION is not None:
        return ATTENTION
    return "blocked" if jax.default_backend() == "cpu" else "fused"


def attention(q: jax.Array, k: jax.Array, v: jax.Array, mask: jax.Array, *, scale: float,
              softcap: float | None = None, implementation: str | None = None) -> jax.Array:
    """Causal grouped-query attention.

    q: [B, T, Hq, Dh]; k, v: [B, S, Hkv, Dh(v)]; mask: [B, T, S] bool (True = may attend).
    Returns [B, T, Hq, Dv]. Scores and softmax run in f32. `implementation`: one of
    `ATTENTION_IMPLEMENTATIONS`, default `attention_implementation()`; both give the same
    output up to float rounding (test) for every query that sees a key, and a finite one (never
    read) for a padding query that sees none, so no NaN reaches a gradient. Soft-capped scores always take the blocked path.

    `blocked` runs blocks of `QUERY_BLOCK` queries. The mask must be causal in slot order with
    the T queries in the last T slots or earlier (query t at slot <= S - T + t: a chunk written
    into a cache at `write_index`, or S = T without one), which every caller's `Context.mask`
    is. Then no key slot after S - T + (block end) is visible to a block, so each block scores
    only the keys before it: the masked upper triangle is never computed, and each block's
    [B, K, 64 G, S'] scores stay small enough to be reused from cache (SmolLM2, 8 x 768 queries
    on 889 keys: 0.36 s -> 0.16 s a layer, outputs within 2e-7). The skipped keys have
    probability exactly 0, so the result equals one pass over all keys up to rounding.
    """
    t, s_len = q.shape[1], k.shape[1]
    if q.shape[2] % k.shape[2]:
        raise ValueError(f"{q.shape[2]} query heads are not a multiple of {k.shape[2]} key/value heads")
    impl = implementation or attention_implementation()
    if impl not in ATTENTION_IMPLEMENTATIONS:
        raise ValueError(f"attention implementation {impl!r}; expected one of {ATTENTION_IMPLEMENTATIONS}")
    if impl == "fused" and softcap is None:
        # A query that sees no key attends to every key (a finite mean of the values), never
        # a 0/0 in the flash kernel.
        mask = mask | ~jnp.any(mask, axis=-1, keepdims=True)
        return jax.nn.dot_product_attention(q, k, v, mask=mask[:, None], scale=scale)
    outs = []
    for lo in range(0, t, QUERY_BLOCK):
        hi = min(lo + QUERY_BLOCK, t)
        end = s_len - t + hi                                                # keys visible to the block
        outs.append(_attention_block(q[:, lo:hi], k[:, :end], v[:, :end], mask[:, lo:hi, :end], scale,
                                     softcap))
    return outs[0] if len(outs) == 1 else jnp.concatenate(outs, axis=1)


def _attention_block(q, k, v, mask, scale, softcap):
    """One query block: q [B, c, Hq, Dh], k/v [B, S', Hkv, Dh(v)], mask [B, c, S'] -> [B, c, Hq, Dv]."""
    b, t, hq, dh = q.shape
    hkv, s_len, dv = k.shape[2], k.shape[1], v.shape[-1]
    g = hq // hkv
    # Heads-major operands ([B, K, T*G, Dh] against [B, K, S, Dh]) make both products plain
    # batched matmuls, so only q, k, v and the output are transposed, never the [T, S]
    # probabilities (the einsum over [B, T, K, G, Dh] made XLA:CPU transpose them in every
    # layer, which doubled the cost of attention). Transposing each block's own slice measured
    # 10-20 % faster than slicing one transposed copy.
    qh = q.reshape(b, t, hkv, g, dh).transpose(0, 2, 1, 3, 4).reshape(b, hkv, t * g, dh)
    kh, vh = k.transpose(0, 2, 1, 3), v.transpose(0, 2, 1, 3)              # [B, K, S, Dh]
    s = jnp.einsum("bkmd,bksd->bkms", qh, kh,
                   preferred_element_type=jnp.float32) * scale              # [B, K, T*G, S]
    s = s.reshape(b, hkv, t, g, s_len)                                      # [B, K, T, G, S]
    if softcap is not None:
        s = softcap * jnp.tanh(s / softcap)
    s = jnp.where(mask[:, None, :, None, :], s, _MASK_VALUE)
    p = jax.nn.softmax(s, axis=-1).astype(v.dtype).reshape(b, hkv, t * g, s_len)
    o = jnp.einsum("bkms,bksd->bkmd", p, vh)                                # [B, K, T*G, Dv]
    return o.reshape(b, hkv, t, g, dv).transpose(0, 2, 1, 3, 4).reshape(b, t, hq, dv)


def attention_mask_from_positions(q_slots: jax.Array, q_pos: jax.Array, kv_pos: jax.Array,
                                  *, sliding_window: int | None = None, q_seg: jax.Array | None = None,
                                  kv_seg: jax.Array | None = None) -> jax.Array:
    """Mask `[B, T, S]`: key slot s is visible to query t iff it holds a real token
    (`kv_pos >= 0`), comes no later (`s <= q_slots[t]`), is shared or in the query's own
    branch (`kv_seg <= 1` or `kv_seg == q_seg`, see `token_positions`) and, for
    sliding-window layers, lies within the window in position space (`q_pos - kv_pos < window`).

    q_slots: [T] slot index of each query; q_pos, q_seg: [B, T]; kv_pos, kv_seg: [B, S].
    """
    s = kv_pos.shape[1]
    causal = jnp.arange(s)[None, :] <= q_slots[:, None]                    # [T, S]
    m = causal[None] & (kv_pos >= 0)[:, None, :]                           # [B, T, S]
    if q_seg is not None:
        m = m & ((kv_seg <= 1)[:, None, :] | (kv_seg[:, None, :] == q_seg[:, :, None]))
    if sliding_window is not None:
        m = m & ((q_pos[:, :, None] - kv_pos[:, None, :]) < sliding_window)
    return m


# --------------------------------------------------------------------------- positions & cache


def token_positions(attention_mask: jax.Array, start: jax.Array | None = None) -> jax.Array:
    """Rotary positions `[B, T]` of a left- (or right-) padded chunk; padding gets -1.

    `attention_mask` values: 0 padding, 1 a shared token, b >= 2 a token of branch b. A branch
    is a contiguous run of tokens that continues the shared tokens before it but not the other
    branches: its positions restart after the shared tokens, and (`Context.mask`) it attends to
    the shared tokens and itself only, so one forward scores several continuations of one prompt
    exactly. `start` `[B]` is the number of real tokens already in the cache for each row.
    """
    m = attention_mask.astype(jnp.int32)
    t = m.shape[1]
    shared = jnp.cumsum(m == 1, axis=1)                                      # [B, T]
    branch = (m >= 2).astype(jnp.int32)
    seen = jnp.cumsum(branch, axis=1)                                        # [B, T]
    prev = jnp.pad(m[:, :-1], ((0, 0), (1, 0)), constant_values=-1)
    first = jax.lax.cummax(jnp.where(m != prev, jnp.arange(t), 0), axis=1)  # [B, T] start of each run
    before = jnp.take_along_axis(seen - branch, first, axis=1)               # branch tokens before the run
    pos = shared + jnp.where(m >= 2, seen - before, 0) - 1
    if start is not None:
        pos = pos + start[:, None]
    return jnp.where(m > 0, pos, -1)


def init_cache_common(layers: list[dict], batch: int, max_len: int) -> dict:
    """Assemble a cache from family-built per-layer dicts (see the module docstring)."""
    return {"layers": layers,
            "positions": jnp.full((batch, max_len), -1, jnp.int32),
            "index": jnp.zeros((), jnp.int32)}


SLOT_KEYS = ("k", "v")
"""Per-layer cache entries whose axis 1 is the slot axis (extended by `cache_extend`)."""


def cache_extend(cache: dict, extra: int) -> dict:
    """Append `extra` empty slots to a cache (e.g. a prefilled shared prefix -> room for the
    per-prompt suffix and generated tokens)."""
    def pad(x):
        return jnp.pad(x, [(0, 0), (0, extra)] + [(0, 0)] * (x.ndim - 2))

    def pad_stacked(x):                                                   # [L, B, S, ...]
        return jnp.pad(x, [(0, 0), (0, 0), (0, extra)] + [(0, 0)] * (x.ndim - 3))

    def pad_dict(d):                                                      # nested by layer kind
        return {k: pad_dict(v) if isinstance(v, dict) else pad_stacked(v) if k in SLOT_KEYS else v
                for k, v in d.items()}

    if isinstance(cache["layers"], dict):
        layers = pad_dict(cache["layers"])
    else:
        layers = [{k: pad(v) if k in SLOT_KEYS else v for k, v in layer.items()}
                  for layer in cache["layers"]]
    positions = jnp.pad(cache["positions"], [(0, 0), (0, extra)], constant_values=-1)
    return {**cache, "layers": layers, "positions": positions}


def cache_broadcast(cache: dict, batch: int) -> dict:
    """Repeat a batch-1 cache (a shared prefix) over `batch` rows."""
    rows = lambda x: x if x.ndim == 0 else jnp.broadcast_to(x, (batch,) + x.shape[1:])
    layers = cache["layers"]
    if isinstance(layers, dict):                                          # [L, 1, ...] -> [L, B, ...]
        layers = jax.tree.map(lambda x: jnp.broadcast_to(x, x.shape[:1] + (batch,) + x.shape[2:]), layers)
    else:
        layers = jax.tree.map(rows, layers)
    return {**jax.tree.map(rows, {k: v for k, v in cache.items() if k != "layers"}), "layers": layers}


def cache_layers_from(layers, first: int):
    """The cache entries of layers `first..` (a list's tail, or a stack's `[first:]` slice)."""
    if isinstance(layers, dict):
        return jax.tree.map(lambda x: x[first:], layers)
    return list(layers[first:])


def cache_layers_above_trunk(layers, first: int):
    """`cache_layers_from`'s output as the `layers` of a cache a forward from a trunk at layer
    `first` continues: a list gets `first` empty entries below; a stack stays the top layers
    only (a stacked family reads the missing bottom from the stack's length)."""
    if isinstance(layers, dict):
        return layers
    return [None] * first + list(layers)


def kv_stack_cache(n_layers: int, batch: int, max_len: int, n_kv: int, head_dim: int, dtype) -> dict:
    """Empty k/v buffers `[L, B, S, Hkv, Dh]` for a scanned stack of attention layers."""
    return {"k": jnp.zeros((n_layers, batch, max_len, n_kv, head_dim), dtype),
            "v": jnp.zeros((n_layers, batch, max_len, n_kv, head_dim), dtype)}


def scan_layers(body: Callable, x: jax.Array, params: dict, lora_layers: dict | None, lora_slots: list | None,
                cache: dict | None, lo: int, hi: int, *, cache_lo: int = 0, keep: int = 0, remat: bool | int = False):
    """Layers `[lo, hi)` of a stacked stack as `jax.lax.scan`s, so a program traces one layer
    whatever the depth (Qwen3-4B widths, grad + remat: 36 unrolled layers compiled in 24.5 s,
    one scanned stack in 5.1 s).

    body(p, x, lora_layer, layer_cache) -> (x, layer_cache): one layer; p, layer_cache are the
    stack's entries without the layer axis. params: `{name: [L, ...]}`; lora_layers: the
    adapter's stacks (`omjax.models.lora`) or None, lora_slots: `lora.slots` of it; cache:
    `{name: [Lc, B, ...]}` holding layers `cache_lo..` (Lc = L - cache_lo) or None. The layers
    are cut into runs where the adapter starts (the frozen trunk below `lora.top_layers` is one
    run, the adapted top another), at `keep` and where rematerialisation stops; each run is one
    scan over its slice of the stacks, the remat policy inside its body. `remat`: True every
    layer, False none, an int n the layers below layer n (`remat_below`; the memory plan's
    partial remat, `omjax.train.oom.planned_remat`).

    Returns (x, the residual stream entering layer `keep` or None, the cache with layers
    `[lo, hi)` written, or None).
    """
    if lo < cache_lo and cache is not None:
        raise ValueError(f"the cache holds layers {cache_lo}.. but the forward starts at layer {lo}")
    remat_hi = remat_below(remat, hi)
    cuts = {lo, hi} | ({keep} if lo < keep < hi else set()) | ({remat_hi} if lo < remat_hi < hi else set())
    if lora_layers is not None:
        cuts |= {i for i in range(lo + 1, hi) if _slot_group(lora_slots[i]) != _slot_group(lora_slots[i - 1])}
    cuts = sorted(cuts)
    kept, written = None, []
    for a, b in zip(cuts[:-1], cuts[1:]):
        if a == keep:
            kept = x
        ab = None if lora_layers is None else _lora_run(lora_layers, lora_slots, a, b - a, 1)
        c = None if cache is None else jax.tree.map(lambda t: t[a - cache_lo:b - cache_lo], cache)

        def step(x, xs):
            # The frozen weights are indexed inside the body, not scanned over as slices: a
            # slice of the stack per run would be a copy of those layers' weights per call.
            i, ab_i, c_i = xs
            p = jax.tree.map(lambda w: jax.lax.dynamic_index_in_dim(w, i, keepdims=False), params)
            return body(p, x, ab_i, c_i)

        if a < remat_hi:
            step = jax.checkpoint(step, prevent_cse=False)
        x, c = jax.lax.scan(step, x, (jnp.arange(a, b), ab, c))
        written.append(c)
    if cache is None:
        return x, kept, None
    below = jax.tree.map(lambda t: t[:lo - cache_lo], cache) if lo > cache_lo else None
    above = jax.tree.map(lambda t: t[hi - cache_lo:], cache) if hi - cache_lo < _stack_len(cache) else None
    parts = [p for p in [below] + written + [above] if p is not None]
    return x, kept, jax.tree.map(lambda *t: jnp.concatenate(t), *parts) if len(parts) > 1 else parts[0]


def remat_below(remat: bool | int, n_layers: int) -> int:
    """The layers `[0, n)` a forward rematerialises: `remat` True all `n_layers`, False none,
    an int that many from the bottom (capped at `n_layers`)."""
    if isinstance(remat, (bool, np.bool_)):
        return n_layers if remat else 0
    if int(remat) < 0:
        raise ValueError(f"remat must be a bool or a layer count >= 0, got {remat}")
    return min(int(remat), n_layers)


def layer_period(kinds) -> int:
    """The length of the repeating block of a stack of layer kinds: the smallest p with
    `kinds[i] == kinds[i % p]` for every i (Qwen3.5: 3 Gated DeltaNet + 1 full attention, 4)."""
    n = len(kinds)
    return next(p for p in range(1, n + 1) if all(kinds[i] == kinds[i % p] for i in range(n)))


def scan_blocks(body: Callable, carry, kinds: tuple[str, ...], params: dict, lora_layers: dict | None,
                lora_slots: list | None, cache: dict | None, lo: int, hi: int, *, cuts=(), layer_xs=None,
                remat: bool | int = False):
    """Layers `[lo, hi)` of a mixed stack as `jax.lax.scan`s over its repeating block, so a
    program traces one block whatever the depth (MaxText's scannable blocks).

    body(kind, p, carry, lora_layer, layer_cache, layer_x) -> (carry, layer_cache): one layer of
    kind `kind` (static); p, layer_cache, layer_x without the layer axis. kinds: each layer's
    kind; params: `{kind: {name: [N_kind, ...]}}`, a kind's layers bottom first; lora_layers: the
    adapter's stacks (`omjax.models.lora`) or None, lora_slots: `lora.slots` of it; cache: `{kind: {name: [N_kind, B, ...]}}` of every layer,
    or None; cuts: layers where a new segment starts (gemma-4's first KV-sharing layer);
    layer_xs: a pytree of per-layer inputs `[L, ...]` fed to each layer as a scanned input.

    The layers are cut into runs at `cuts` and where the adapter's structure changes (the frozen
    trunk below `lora.top_layers`, the adapted top) and where rematerialisation stops (`remat`
    as in `scan_layers`); each run is one scan over its whole blocks, the remat policy inside
    the scanned body, and the layers left over when the run is not a multiple of its block one
    more, shorter scan. Returns (carry, the cache with layers `[lo, hi)` written, or None).
    """
    rank = [kinds[:i].count(kinds[i]) for i in range(len(kinds))]     # index within its kind
    remat_hi = remat_below(remat, hi)
    points = {lo, hi} | {c for c in cuts if lo < c < hi} | ({remat_hi} if lo < remat_hi < hi else set())
    if lora_layers is not None:
        points |= {i for i in range(lo + 1, hi) if (lora_slots[i] is None) != (lora_slots[i - 1] is None)}
    points = sorted(points)
    runs = []                                                           # (start, block length, blocks)
    for a, b in zip(points[:-1], points[1:]):
        period = layer_period(kinds[a:b])
        n = (b - a) // period
        runs += [(a, period, n)] if n else []
        if (b - a) % period:
            runs.append((a + n * period, (b - a) % period, 1))
    written = {k: [] for k in params}
    for start, period, n in runs:
        block = kinds[start:start + period]
        count = {k: block.count(k) for k in set(block)}
        off = [block[:i].count(block[i]) for i in range(period)]        # index within the block's kind
        first = {k: rank[start + block.index(k)] for k in count}
        spans = _kind_spans(block, None if lora_layers is None else lora_slots[start:start + period])
        ab = tuple(None if lora_layers is None else _lora_span(lora_layers, lora_slots, start + i, n, period, m)
                   for i, m in spans)                                      # per span [n, (m,) ...]
        lx = tuple(None if layer_xs is None else jax.tree.map(
            lambda t, i=i, m=m: _span(t[start:start + n * period].reshape((n, period) + t.shape[1:]), i, m, 1),
            layer_xs) for i, m in spans)
        c = None if cache is None else {
            k: jax.tree.map(lambda t: t[first[k]:first[k] + n * count[k]].reshape((n, count[k]) + t.shape[1:]),
                            cache.get(k, {})) for k in count}             # [n, count, B, ...]

        def step(carry, xs, block=block, count=count, off=off, first=first, spans=spans):
            j, ab, c, lx = xs
            outs = {k: [] for k in count}
            for (i, m), ab_s, lx_s in zip(spans, ab, lx):
                kind = block[i]

                def layer(carry, ys, kind=kind, idx=first[kind] + j * count[kind] + off[i]):
                    r, ab_r, lc_r, lx_r = ys
                    # The frozen weights are indexed inside the body, not scanned over as slices:
                    # a slice of the stack per run would be a copy of those layers' weights per call.
                    p = jax.tree.map(lambda w: jax.lax.dynamic_index_in_dim(w, idx + r, keepdims=False),
                                     params[kind])
                    return body(kind, p, carry, ab_r, lc_r, lx_r)

                lc = None if c is None else jax.tree.map(lambda t: _span(t, off[i], m, 0), c[kind])
                if m == 1:
                    carry, lc = layer(carry, (0, ab_s, lc, lx_s))
                    lc = None if lc is None else jax.tree.map(lambda t: t[None], lc)
                else:                               # a span of one kind: an inner scan, its layer traced once
                    carry, lc = jax.lax.scan(layer, carry, (jnp.arange(m), ab_s, lc, lx_s))
                outs[kind].append(lc)
            new = None if c is None else {k: jax.tree.map(lambda *t: jnp.concatenate(t), *v)
                                          for k, v in outs.items()}
            return carry, new

        if start < remat_hi:
            step = jax.checkpoint(step, prevent_cse=False)
        carry, c = jax.lax.scan(step, carry, (jnp.arange(n), ab, c, lx))
        if c is not None:
            for k, v in c.items():
                written[k].append(jax.tree.map(lambda t: t.reshape((-1,) + t.shape[2:]), v))
    if cache is None:
        return carry, None
    out = {}
    for k, parts in written.items():
        if k not in cache:
            continue
        lo_k, hi_k = kinds[:lo].count(k), kinds[:hi].count(k)
        full = [jax.tree.map(lambda t: t[:lo_k], cache[k])] + parts + [jax.tree.map(lambda t: t[hi_k:], cache[k])]
        full = [p for p in full if jax.tree.leaves(p) and jax.tree.leaves(p)[0].shape[0]]
        out[k] = cache[k] if not full else (
            full[0] if len(full) == 1 else jax.tree.map(lambda *t: jnp.concatenate(t), *full))
    return carry, out


def _slot_group(slot):
    return None if slot is None else slot[0]


def _lora_run(lora_layers: dict, lora_slots: list, first: int, n: int, stride: int):
    """The adapter stacks of layers `first, first + stride, ...` (n of them) as one `[n, ...]`
    slice of their group's stack (None when those layers have no adapter): a scan's input."""
    run = [lora_slots[first + k * stride] for k in range(n)]
    if run[0] is None:
        if any(s is not None for s in run):
            raise ValueError(f"LoRA: layers {first}.. of one scanned run mix adapted and plain layers")
        return None
    group, i0 = run[0]
    step = run[1][1] - i0 if n > 1 else 1
    if any(s != (group, i0 + k * step) for k, s in enumerate(run)):
        raise ValueError(f"LoRA: layers {first}.. of one scanned run are not evenly spaced in group {group!r}")
    return jax.tree.map(lambda t: jax.lax.slice_in_dim(t, i0, i0 + (n - 1) * step + 1, step), lora_layers[group])


def _kind_spans(block: tuple[str, ...], slots: list | None) -> list[tuple[int, int]]:
    """A block's positions as spans (first position, length) of consecutive layers of one kind
    (and, with an adapter, one LoRA group): gemma-4's 5 sliding + 1 full is [(0, 5), (5, 1)]."""
    spans = []
    for i, kind in enumerate(block):
        same = i and kind == block[i - 1] and (slots is None or _slot_group(slots[i]) == _slot_group(slots[i - 1]))
        if same:
            spans[-1] = (spans[-1][0], spans[-1][1] + 1)
        else:
            spans.append((i, 1))
    return spans


def _span(t, i: int, m: int, axis: int):
    """Positions `[i, i + m)` of `t` along `axis`: that axis dropped when m is 1."""
    if m == 1:
        return jax.lax.index_in_dim(t, i, axis, keepdims=False)
    return jax.lax.slice_in_dim(t, i, i + m, axis=axis)


def _lora_span(lora_layers: dict, lora_slots: list, first: int, n: int, period: int, m: int):
    """The adapter stacks of the span of layers `first + k * period + r` (k < n, r < m) as one
    `[n, m, ...]` piece of their group's stack (`[n, ...]` when m is 1; None without an adapter)."""
    if m == 1:
        return _lora_run(lora_layers, lora_slots, first, n, period)
    run = [[lora_slots[first + k * period + r] for r in range(m)] for k in range(n)]
    flat = [s for row in run for s in row]
    if flat[0] is None:
        if any(s is not None for s in flat):
            raise ValueError(f"LoRA: layers {first}.. of one scanned run mix adapted and plain layers")
        return None
    group = flat[0][0]
    if any(s is None or s[0] != group for s in flat):
        raise ValueError(f"LoRA: layers {first}.. of one scanned span are not in one group {group!r}")
    idx = np.array([[s[1] for s in row] for row in run])                  # [n, m]
    if (idx.ravel() == idx[0, 0] + np.arange(n * m)).all():               # contiguous: a slice
        return jax.tree.map(lambda t: jax.lax.slice_in_dim(t, int(idx[0, 0]), int(idx[0, 0]) + n * m)
                            .reshape((n, m) + t.shape[1:]), lora_layers[group])
    return jax.tree.map(lambda t: jnp.take(t, jnp.asarray(idx), axis=0), lora_layers[group])


def _stack_len(stack: dict) -> int:
    return jax.tree.leaves(stack)[0].shape[0]


def kv_layer_cache(batch: int, max_len: int, n_kv: int, head_dim: int, dtype,
                   v_head_dim: int | None = None) -> dict:
    """Empty k/v buffers `[B, S, Hkv, Dh]` for one attention layer."""
    return {"k": jnp.zeros((batch, max_len, n_kv, head_dim), dtype),
            "v": jnp.zeros((batch, max_len, n_kv, v_head_dim or head_dim), dtype)}


@flax.struct.dataclass
class Context:
    """Per-call position bookkeeping shared by all layers of one forward pass.

    Built once by `make_context`. A pytree, so it can be passed through `jax.checkpoint`.
    """

    q_pos: jax.Array
    """[B, T] rotary position of each query token (-1 for padding)."""
    kv_pos: jax.Array
    """[B, S] position of each key slot (S = T without a cache, the cache length with one)."""
    q_slots: jax.Array
    """[T] slot index of each query token (causality is by slot order)."""
    write_index: jax.Array | None
    """[] cache slot where this chunk is written; None without a cache."""
    q_seg: jax.Array
    """[B, T] segment of each query token (`token_positions`: 0 padding, 1 shared, >= 2 branch)."""
    kv_seg: jax.Array
    """[B, S] segment of each key slot (everything already in a cache counts as shared)."""

    def mask(self, sliding_window: int | None = None) -> jax.Array:
        """`[B, T, S]` attention mask (recomputed per call: XLA merges identical copies)."""
        return attention_mask_from_positions(self.q_slots, self.q_pos, self.kv_pos,
                                             sliding_window=sliding_window, q_seg=self.q_seg,
                                             kv_seg=self.kv_seg)


def check_forward_inputs(family: str, num_layers: int, tokens: jax.Array,
                         attention_mask: jax.Array | None, lora: dict | None, *,
                         trunk: Trunk | None = None, cache: dict | None = None,
                         trunk_cache: bool = False, lora_shapes: list | None = None) -> list | None:
    """Clear errors for the mistakes a family's `forward` would otherwise hit deep inside (or,
    for a trunk that skips adapter layers, not hit at all). `trunk_cache`: the family can
    continue a cache from a trunk (its `TRUNK_CACHE`); `lora_shapes`: the family's (needed with
    `lora`). Returns the adapter's `lora.slots` (None without one)."""
    slots = lora_slots(family, lora, lora_shapes)
    if trunk is not None:
        if cache is not None and not trunk_cache:
            raise ValueError(f"{family}: a trunk cannot be combined with a decode cache in this family")
        check_trunk(family, num_layers, trunk.n_layers, slots)
    if tokens.ndim != 2:
        raise ValueError(f"{family}: tokens must be [B, T], got shape {tokens.shape}")
    if attention_mask is not None and attention_mask.shape != tokens.shape:
        raise ValueError(f"{family}: attention_mask shape {attention_mask.shape} != tokens shape "
                         f"{tokens.shape}")
    return slots


def lora_slots(family: str, lora: dict | None, shapes: list | None) -> list | None:
    """`lora.slots` of adapter `lora` against the family's `lora_shapes` (None without an
    adapter), with one clear error for an adapter that does not fit or predates stacking."""
    if lora is None:
        return None
    if not isinstance(lora.get("layers"), dict):
        raise ValueError(f"{family}: the LoRA adapter is in the per-layer list layout of adapters written before "
                         "they were stacked; convert it with omjax.models.lora.from_layers")
    try:
        return lora_lib.slots(lora["layers"], shapes)
    except ValueError as err:
        raise ValueError(f"{family}: {err}") from None


@flax.struct.dataclass
class Trunk:
    """The residual stream of a batch after its first `n_layers` decoder layers, run on the
    frozen base (no adapter in those layers).

    When LoRA covers only the top layers, everything below them is identical for the policy,
    the reference and every PPO epoch; a trainer computes the trunk once (`family.trunk`) and
    starts each later forward from it (`family.forward(..., trunk=...)`).
    """

    hidden: jax.Array
    """[B, T, D] the residual stream entering layer `n_layers`."""
    extras: dict
    """Family-specific state the upper layers read (gemma4: keys/values of the shared layers)."""
    n_layers: int = flax.struct.field(pytree_node=False)


def check_trunk(family: str, num_layers: int, n_layers: int, slots: list | None = None) -> None:
    """Clear errors for a trunk split that would silently drop an adapter (`slots`: the
    adapter's `lora.slots`) or run no layer."""
    if not 0 < n_layers < num_layers:
        raise ValueError(f"{family}: a trunk must stop inside the model (1..{num_layers - 1} layers), "
                         f"got {n_layers}")
    if slots is not None and any(s is not None for s in slots[:n_layers]):
        raise ValueError(f"{family}: the LoRA adapter has weights below layer {n_layers}, which a "
                         f"trunk of {n_layers} frozen layers would skip")


def make_context(tokens: jax.Array, attention_mask: jax.Array | None,
                 cache: dict | None) -> tuple[Context, dict | None]:
    """Positions and masks for a chunk `tokens [B, T]`, and the cache with positions advanced.

    Without a cache the chunk attends to itself. With a cache the chunk is written at slots
    `[index, index + T)` and attends to every earlier real slot. A chunk holding branches
    (mask values >= 2, see `token_positions`) must be the last one written to its cache: the
    cache keeps positions, not segments, so a later chunk would see every branch.
    """
    b, t = tokens.shape
    if attention_mask is None:
        attention_mask = jnp.ones((b, t), jnp.int32)
    q_seg = attention_mask.astype(jnp.int32)
    if cache is None:
        q_pos = token_positions(attention_mask)
        return Context(q_pos=q_pos, kv_pos=q_pos, q_slots=jnp.arange(t), write_index=None,
                       q_seg=q_seg, kv_seg=q_seg), None
    idx = cache["index"]
    start = jnp.max(cache["positions"], axis=1) + 1                          # [B]
    q_pos = token_positions(attention_mask, start)                           # [B, T]
    kv_pos = jax.lax.dynamic_update_slice(cache["positions"], q_pos, (0, idx))
    kv_seg = jax.lax.dynamic_update_slice(jnp.ones_like(cache["positions"]), q_seg, (0, idx))
    ctx = Context(q_pos=q_pos, kv_pos=kv_pos, q_slots=idx + jnp.arange(t), write_index=idx,
                  q_seg=q_seg, kv_seg=kv_seg)
    return ctx, {**cache, "positions": kv_pos, "index": idx + t}


def cache_write(layer_cache: dict, ctx: Context, **new: jax.Array) -> dict:
    """Write this chunk's per-layer tensors (`k=[B, T, H, Dh]`, ...) at the cache offset."""
    out = dict(layer_cache)
    for name, val in new.items():
        buf = layer_cache[name]
        starts = (0, ctx.write_index) + (0,) * (buf.ndim - 2)
        out[name] = jax.lax.dynamic_update_slice(buf, val.astype(buf.dtype), starts)
    return out


def unembed(h: jax.Array, w: jax.Array, *, softcap: float | None = None) -> jax.Array:
    """Logits `[B, T, V]` in f32 from final hidden states `[B, T, D]` and `w` `[D, V]`."""
    logits = jnp.einsum("btd,dv->btv", h, w, preferred_element_type=jnp.float32)
    if softcap is not None:
        logits = softcap * jnp.tanh(logits / softcap)
    return logits
