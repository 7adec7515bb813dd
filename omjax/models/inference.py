"""The decision machinery every policy shares: padding and shape buckets, menu-letter tokens,
shared-prefix caches and the one KV-cache generation loop.

Prompts are LEFT-padded so a prompt's last token is column -1 of every row, and lengths are
rounded up to fixed buckets (`bucket`, rows to powers of two) so repeated calls reuse compiled
programs. A decision prompt is the chat-template rendering of the conversation; its shared
prefix (the template's header and the fixed system message, identical for every decision of a
game) is prefilled once per adapter (`prefill`, vmapped over the adapter bank) and every
decision then runs only its own suffix on a copy of that cache (`extend_for`). Menu letters are
scored as the single tokens `" A"`, `" B"`, ... (`letter_token_ids`). `decode` is the sampling
loop of free-text replies; `generate` wraps it for token lists.
"""

from __future__ import annotations

from collections.abc import Sequence
from types import ModuleType
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from omjax.models import base

# --------------------------------------------------------------------------- padding & buckets


def bucket(n: int, minimum: int = 16) -> int:
    """Round `n` up to a fixed grid (>= `minimum`): few distinct shapes, few compiles.

    The grid step is a quarter of the largest power of two <= n (16, 20, 24, 28, 32, 40, ...),
    so padding wastes at most 25% of the compute, typically about 10%.
    """
    if n <= minimum:
        return minimum
    step = max(1, (1 << (n.bit_length() - 1)) // 4)
    return -(-n // step) * step


def pow2_at_least(n: int, floor: int = 1) -> int:
    """The smallest power of two times `floor` that is >= n (row counts, menu widths)."""
    out = floor
    while out < n:
        out *= 2
    return out


def length_groups(lengths: Sequence[int], extra: int = 0, max_calls: int = 4) -> list[np.ndarray]:
    """Indices of `lengths` per batched call, shortest first: the sorted lengths cut into at
    most `max_calls` runs (rows to a power of two, each row `bucket(longest) + extra` long), one
    more call only while it pads at least 1/16 of the one-call token slots fewer. Prompts of very
    different lengths (Cleanup's views: 150 to 700 tokens after the shared prefix) otherwise pad
    every short prompt to the longest; the 1/16 keeps near-equal batches in one call (each call
    streams every weight once more and may be a new shape to compile)."""
    n = len(lengths)
    if n < 2:
        return [np.arange(n)]
    order = np.argsort(np.asarray(lengths), kind="stable")
    width = np.array([bucket(int(lengths[j])) + extra for j in order])  # sorted: a run's longest is its last
    rows = np.array([pow2_at_least(m) for m in range(n + 1)])
    # slots[k][hi]: fewest token slots of the first hi sorted lengths in k + 1 calls; cut[k][hi]
    # where the last of those calls starts.
    slots = [rows[: n + 1] * np.concatenate([[0], width])]
    cut = [np.zeros(n + 1, int)]
    for k in range(1, min(max_calls, n)):
        best, start = slots[-1].copy(), np.zeros(n + 1, int)
        for hi in range(k + 1, n + 1):
            lo = np.arange(k, hi)
            total = slots[-1][lo] + rows[hi - lo] * width[hi - 1]
            j = int(np.argmin(total))
            best[hi], start[hi] = total[j], lo[j]
        slots.append(best)
        cut.append(start)
    calls = 0
    while calls + 1 < len(slots) and 16 * (slots[calls][n] - slots[calls + 1][n]) >= slots[0][n]:
        calls += 1
    bounds, hi = [n], n
    for k in range(calls, 0, -1):
        hi = int(cut[k][hi])
        bounds.insert(0, hi)
    bounds.insert(0, 0)
    return [np.sort(order[lo:hi]) for lo, hi in zip(bounds, bounds[1:])]


def left_pad(seqs: Sequence[Sequence[int]], length: int | None = None, pad_id: int = 0,
             rows: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Left-pad token lists into `tokens [R, L]` int32 and `mask [R, L]` int32.

    `length` defaults to the bucketed longest sequence, `rows` to `len(seqs)`; extra rows are
    all padding (their outputs are garbage and must be dropped by the caller).
    """
    longest = max((len(s) for s in seqs), default=1)
    length = bucket(longest) if length is None else length
    if longest > length:
        raise ValueError(f"a sequence of {longest} tokens does not fit the padded length {length}")
    rows = len(seqs) if rows is None else rows
    tokens = np.full((rows, length), pad_id, np.int32)
    mask = np.zeros((rows, length), np.int32)
    for i, s in enumerate(seqs):
        if len(s):
            tokens[i, length - len(s):] = s
            mask[i, length - len(s):] = 1
    return tokens, mask


def encode(tokenizer: Any, text: str) -> list[int]:
    """Token ids of already-rendered text (the chat template wrote every special token)."""
    return list(tokenizer.encode(text, add_special_tokens=False))


# --------------------------------------------------------------------------- menu letters


def letter_ids(tokenizer: Any, letter: str) -> list[int]:
    """Token ids of a menu letter as it follows `choice:` in a reply."""
    return encode(tokenizer, " " + letter)


def letter_token_ids(tokenizer: Any, letters: Sequence[str]) -> list[int]:
    """Token id of `" " + letter` for each letter; each must be exactly one token, or letter mode
    could not score it at a single position."""
    out = []
    for letter in letters:
        ids = letter_ids(tokenizer, letter)
        if len(ids) != 1:
            raise ValueError(f"menu letter {letter!r} is {len(ids)} tokens in this tokenizer ({ids}); "
                             "letter mode needs one token per letter (use policy.decision_mode=sample)")
        out.append(int(ids[0]))
    return out


# --------------------------------------------------------------------------- shared prefix


def prefill(fam: ModuleType, params: dict, cfg, tokens: jax.Array, mask: jax.Array, *,
            lora: dict | None = None, lora_scale: float = 1.0) -> dict:
    """A batch-1 cache holding a shared prefix `tokens`/`mask` `[1, S]` (left-padded, see
    `prefix_arrays`); `extend_for` adds room for what follows. With per-agent adapters the
    prefix's keys/values depend on the adapter, so vmap this over the bank."""
    cache = fam.init_cache(cfg, 1, tokens.shape[1], params["embed"].dtype)
    _, cache = fam.forward(params, cfg, tokens, attention_mask=mask, lora=lora, lora_scale=lora_scale,
                           cache=cache, last_only=True)
    return cache


def prefix_arrays(prefix: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
    """The `[1, S]` left-padded, bucketed arrays of a shared prefix for `prefill`."""
    return left_pad([[int(t) for t in prefix]])


def extend_for(prefix_cache: dict, batch: int, extra: int) -> dict:
    """A batch-1 prefix cache repeated over `batch` rows with `extra` empty slots appended."""
    return base.cache_extend(base.cache_broadcast(prefix_cache, batch), extra)


def strip_prefix(prompts: Sequence[Sequence[int]], prefix: Sequence[int]) -> list[list[int]]:
    """Each prompt with the shared `prefix` cut off; raises if one does not start with it (its
    tokenisation would then differ from the cached prefix's) or holds nothing more."""
    n = len(prefix)
    out = []
    for j, p in enumerate(prompts):
        if list(p[:n]) != list(prefix):
            raise ValueError(f"prompt {j} does not start with the {n} shared prefix tokens (it starts "
                             f"{list(p[:n])[-8:]} where the prefix ends {list(prefix)[-8:]}): the text "
                             "after the prefix changed how its end tokenises")
        if len(p) == n:
            raise ValueError(f"prompt {j} is nothing but the shared prefix")
        out.append(list(p[n:]))
    return out


# --------------------------------------------------------------------------- sampling


def sample_logits(key: jax.Array, logits: jax.Array, temperature: jax.Array,
                  top_p: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Sample ids `[B]` from `[B, V]` logits with temperature and nucleus (top-p) filtering, and
    their log-probs `[B]` under the distribution sampled from.

    temperature <= 0 means greedy (log-prob 0). top_p keeps the smallest set of tokens whose
    probability reaches `top_p` (always at least the most likely token).
    """
    greedy = jnp.argmax(logits, axis=-1)
    scaled = logits / jnp.maximum(temperature, 1e-6)
    order = jnp.argsort(-scaled, axis=-1)                                      # [B, V]
    sorted_logits = jnp.take_along_axis(scaled, order, axis=-1)
    probs = jax.nn.softmax(sorted_logits, axis=-1)
    before = jnp.cumsum(probs, axis=-1) - probs                                 # mass above each
    keep_sorted = before < top_p
    keep = jnp.zeros_like(keep_sorted).at[jnp.arange(logits.shape[0])[:, None], order].set(keep_sorted)
    logp = jax.nn.log_softmax(jnp.where(keep, scaled, -jnp.inf), axis=-1)       # [B, V]
    sampled = jax.random.categorical(key, logp, axis=-1)
    tok = jnp.where(temperature > 0, sampled, greedy)
    tok_logp = jnp.take_along_axis(logp, tok[:, None], axis=-1)[:, 0]
    return tok, jnp.where(temperature > 0, tok_logp, 0.0)


def decode(fam: ModuleType, params: dict, cfg, logits: jax.Array, cache: dict, key: jax.Array, *,
           max_new: int, stop_ids: jax.Array, pad_id: int, temperature: jax.Array,
           top_p: jax.Array | float = 1.0, lora: dict | None = None, lora_scale: float = 1.0,
           done: jax.Array | None = None) -> tuple[jax.Array, jax.Array, jax.Array]:
    """The generation loop: sample up to `max_new` tokens per row after a prefilled prompt.

    logits: `[B, 1, V]` at the prompt's last position; cache: the prompt's cache with room for
    `max_new` more slots; stop_ids: `[S]` int32 (a row stops after its first stop token, which
    it keeps); done: `[B]` rows that start finished (all-padding rows). Stops early when every
    row is done. Returns (ids int32 `[B, max_new]` (`pad_id` after the stop), log-probs `[B,
    max_new]` (0 after the stop), live bool `[B, max_new]`, true on generated tokens).
    """
    b = logits.shape[0]
    done = jnp.zeros(b, bool) if done is None else done

    def cond(state):
        i, _, _, done, *_ = state
        return (i < max_new) & ~jnp.all(done)

    def body(state):
        i, logits, cache, done, toks, logps, lives, key = state
        key, sub = jax.random.split(key)
        tok, tok_logp = sample_logits(sub, logits[:, -1], temperature, top_p)
        live = ~done
        tok = jnp.where(live, tok, pad_id).astype(jnp.int32)
        toks, lives = toks.at[:, i].set(tok), lives.at[:, i].set(live)
        logps = logps.at[:, i].set(jnp.where(live, tok_logp, 0.0))
        done = done | jnp.isin(tok, stop_ids)
        logits, cache = fam.forward(params, cfg, tok[:, None], attention_mask=live[:, None].astype(jnp.int32),
                                    lora=lora, lora_scale=lora_scale, cache=cache, last_only=True)
        return i + 1, logits, cache, done, toks, logps, lives, key

    state = (jnp.zeros((), jnp.int32), logits, cache, done, jnp.full((b, max_new), pad_id, jnp.int32),
             jnp.zeros((b, max_new), jnp.float32), jnp.zeros((b, max_new), bool), key)
    _, _, _, _, toks, logps, lives, _ = jax.lax.while_loop(cond, body, state)
    return toks, logps, lives


def _generate(fam, cfg, params, tokens, mask, key, temperature, top_p, stop_ids, lora, lora_scale, max_new,
              prefix_cache):
    b, t = tokens.shape
    if prefix_cache is None:
        cache = fam.init_cache(cfg, b, t + max_new, params["embed"].dtype)
    else:
        cache = extend_for(prefix_cache, b, t + max_new)
    logits, cache = fam.forward(params, cfg, tokens, attention_mask=mask, lora=lora, lora_scale=lora_scale,
                                cache=cache, last_only=True)
    # All-padding rows (batch bucketing) start finished so they cannot hold the loop open.
    return decode(fam, params, cfg, logits, cache, key, max_new=max_new, stop_ids=stop_ids, pad_id=0,
                  temperature=temperature, top_p=top_p, lora=lora, lora_scale=lora_scale,
                  done=jnp.sum(mask, axis=1) == 0)


_generate_jit = jax.jit(_generate, static_argnames=("fam", "cfg", "max_new", "lora_scale"))


def generate(fam: ModuleType, params: dict, cfg, prompts: Sequence[Sequence[int]], *,
             max_new_tokens: int, eos_ids: Sequence[int], key: jax.Array | None = None,
             temperature: float = 0.0, top_p: float = 1.0, lora: dict | None = None,
             lora_scale: float = 1.0, prefix: Sequence[int] | None = None) -> list[list[int]]:
    """Sample continuations of a batch of prompts (token lists) with `decode`, in one jit.

    Shapes are bucketed (batch, prompt length, max_new_tokens) so calls of similar size reuse
    one compiled program. `prefix` (tokens shared by every prompt, which must all start with
    it) is prefilled once. Returns each prompt's generated ids up to and including the first EOS.
    """
    if not prompts:
        return []
    prefix_cache = None
    if prefix is not None:
        prompts = strip_prefix(prompts, prefix)
        pt, pm = prefix_arrays(prefix)
        prefix_cache = prefill(fam, params, cfg, jnp.asarray(pt), jnp.asarray(pm), lora=lora,
                               lora_scale=lora_scale)
    tokens, mask = left_pad(prompts, rows=bucket(len(prompts), minimum=1))
    key = jax.random.PRNGKey(0) if key is None else key
    max_new = bucket(max_new_tokens, minimum=8)
    out, _, live = _generate_jit(fam, cfg, params, jnp.asarray(tokens), jnp.asarray(mask), key,
                                 jnp.float32(temperature), jnp.float32(top_p), jnp.asarray(list(eos_ids), jnp.int32),
                                 lora, float(lora_scale), max_new, prefix_cache)
    out, live = np.asarray(out), np.asarray(live)
    return [row[:max_new_tokens][alive[:max_new_tokens]].tolist() for row, alive in zip(out[:len(prompts)], live)]

