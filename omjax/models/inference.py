"""Policy inference: menu scoring, per-decision log-probs, KV-cache sampling.

The choice position. A decision prompt is the chat-template rendering of the conversation
(system + user messages, `add_generation_prompt=True`, so it ends with the assistant header)
followed by an assistant prefix: `"choice:"`, or with the optional state line of paper §5.1,
`"state: <s>\\nchoice:"` (see `render_decision_prompt`). The choice position is the LAST token
of that prompt (the `:` of `choice:`); the logits there predict the letter. Menu letters are
scored as the single tokens `" A"`, `" B"`, ... (space + letter, which is how BPE vocabularies
tokenise `choice: A`); `letter_token_ids` checks that each is exactly one token.

Two log-prob modes (`mode=`), both exposed:
- "menu": log-softmax over the ALLOWED letters' logits only. Every sampled reply parses, and
  the policy is a distribution over the menu (what PA-MAGRPO's ratio uses by default).
- "vocab": the full-vocabulary log-softmax evaluated at each letter token (the probability
  the unconstrained model would emit that letter next).
Disallowed letters get `NEG` (a large finite negative, not -inf, so `p * log p` stays 0).

Prompts are LEFT-padded so the choice position is column -1 for every row, and lengths are
rounded up to fixed buckets so repeated calls reuse compiled programs.
"""

from __future__ import annotations

import functools
from types import ModuleType
from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from omjax.models import base

NEG = -1e9
"""Log-prob given to letters that are not on the menu."""


# --------------------------------------------------------------------------- prompts & padding


def bucket(n: int, minimum: int = 16) -> int:
    """Round `n` up to a fixed grid (>= `minimum`): few distinct shapes, few compiles.

    The grid step is a quarter of the largest power of two <= n (16, 20, 24, 28, 32, 40, ...),
    so padding wastes at most 25% of the compute, typically about 10%.
    """
    if n <= minimum:
        return minimum
    step = max(1, (1 << (n.bit_length() - 1)) // 4)
    return -(-n // step) * step


def left_pad(seqs: Sequence[Sequence[int]], length: int | None = None, pad_id: int = 0,
             rows: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Left-pad token lists into `tokens [R, L]` int32 and `mask [R, L]` int32.

    `length` defaults to the bucketed longest sequence, `rows` to `len(seqs)`; extra rows are
    all padding (their outputs are garbage and must be dropped by the caller).
    """
    longest = max((len(s) for s in seqs), default=1)
    length = bucket(longest) if length is None else length
    if longest > length:
        raise ValueError(f"a sequence of {longest} tokens does not fit the length {length}")
    rows = len(seqs) if rows is None else rows
    tokens = np.full((rows, length), pad_id, np.int32)
    mask = np.zeros((rows, length), np.int32)
    for i, s in enumerate(seqs):
        if len(s):
            tokens[i, length - len(s):] = s
            mask[i, length - len(s):] = 1
    return tokens, mask


def render_decision_prompt(tokenizer, messages: list[dict], *, state: str | None = None,
                           choice_prefix: str = "choice:") -> str:
    """Chat-template rendering + assistant prefix ending at the choice position.

    With `state`, the assistant prefix is `"state: {state}\\n" + choice_prefix` (paper §5.1's
    two-line reply with the state line filled in).
    """
    text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    prefix = choice_prefix if state is None else f"state: {state}\n{choice_prefix}"
    return text + prefix


def encode(tokenizer, text: str) -> list[int]:
    """Token ids of an already-rendered prompt (the template supplies any BOS itself)."""
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def letter_token_ids(tokenizer, letters: Sequence[str], choice_prefix: str = "choice:") -> np.ndarray:
    """Token id `[L]` of each menu letter as it follows `choice_prefix` (" A", " B", ...).

    Raises if a letter is not exactly one token after the prefix, since single-token scoring
    would then be wrong.
    """
    base_ids = encode(tokenizer, choice_prefix)
    out = []
    for letter in letters:
        ids = encode(tokenizer, f"{choice_prefix} {letter}")
        if ids[:len(base_ids)] != base_ids or len(ids) != len(base_ids) + 1:
            raise ValueError(f"menu letter {letter!r} is not a single token after "
                             f"{choice_prefix!r} for this tokenizer: {ids}")
        out.append(ids[-1])
    return np.asarray(out, np.int32)


# --------------------------------------------------------------------------- scoring


def letter_logprobs(last_logits: jax.Array, letter_ids: jax.Array, allowed: jax.Array | None,
                    mode: str = "menu") -> jax.Array:
    """Log-probs `[B, L]` of the letters from choice-position logits `[B, V]`.

    allowed: [B, L] bool (None = all letters allowed). See the module docstring for `mode`.
    """
    picked = last_logits[:, letter_ids]                                    # [B, L]
    if allowed is None:
        allowed = jnp.ones(picked.shape, bool)
    if mode == "menu":
        lp = jax.nn.log_softmax(jnp.where(allowed, picked, NEG), axis=-1)
    elif mode == "vocab":
        lp = jax.nn.log_softmax(last_logits, axis=-1)[:, letter_ids]
    else:
        raise ValueError(f"unknown log-prob mode {mode!r} (use 'menu' or 'vocab')")
    return jnp.where(allowed, lp, NEG)


def choice_logprobs(fam: ModuleType, params: dict, cfg, tokens: jax.Array,
                    attention_mask: jax.Array, letter_ids: jax.Array,
                    allowed: jax.Array | None = None, *, lora: dict | None = None,
                    lora_scale: float = 1.0, mode: str = "menu", remat: bool = False,
                    cache: dict | None = None) -> jax.Array:
    """Log-probs `[B, L]` of each menu letter at the choice position, one forward pass.

    tokens/attention_mask: [B, T] left-padded decision prompts (`render_decision_prompt`);
    letter_ids: [L] (`letter_token_ids`); lora: ONE adapter (no agent axis). Differentiable
    w.r.t. `lora` (pass `remat=True` for long prompts on big models). With `cache` (a prefilled
    shared prefix sized for this chunk, see `prefill`), `tokens` are the per-prompt suffixes.
    """
    logits, _ = fam.forward(params, cfg, tokens, attention_mask=attention_mask, lora=lora,
                            lora_scale=lora_scale, cache=cache, last_only=True, remat=remat)
    return letter_logprobs(logits[:, -1], letter_ids, allowed, mode)


def agent_choice_logprobs(fam: ModuleType, params: dict, cfg, tokens: jax.Array,
                          attention_mask: jax.Array, letter_ids: jax.Array,
                          allowed: jax.Array | None, bank: dict, *, lora_scale: float = 1.0,
                          mode: str = "menu", remat: bool = False) -> jax.Array:
    """Per-agent log-probs `[A, B, L]`: agent a's prompts `tokens[a]` `[A, B, T]` under its
    own adapter (bank leaves `[A, ...]`), all agents in one vmapped call on one frozen base."""
    def one(t, m, al, lora):
        return choice_logprobs(fam, params, cfg, t, m, letter_ids, al, lora=lora,
                               lora_scale=lora_scale, mode=mode, remat=remat)

    in_axes = (0, 0, None if allowed is None else 0, 0)
    return jax.vmap(one, in_axes=in_axes)(tokens, attention_mask, allowed, bank)


# --------------------------------------------------------------------------- shared prefix


def prefill(fam: ModuleType, params: dict, cfg, prefix: Sequence[int], *, lora: dict | None = None,
            lora_scale: float = 1.0, dtype=None) -> dict:
    """Prefill shared prefix tokens (e.g. the fixed system message) into a batch-1 cache.

    The cache holds exactly the (bucketed, left-padded) prefix; `base.cache_extend` adds room
    for what follows. With per-agent adapters the prefix's keys/values depend on the adapter,
    so vmap this over the bank (see `Policy.prefill`).
    """
    tokens, mask = left_pad([[int(t) for t in prefix]])
    dtype = dtype or params["embed"].dtype
    cache = fam.init_cache(cfg, 1, tokens.shape[1], dtype)
    _, cache = fam.forward(params, cfg, jnp.asarray(tokens), attention_mask=jnp.asarray(mask),
                           lora=lora, lora_scale=lora_scale, cache=cache, last_only=True)
    return cache


def _extend_for(prefix_cache: dict, batch: int, extra: int) -> dict:
    return base.cache_extend(base.cache_broadcast(prefix_cache, batch), extra)


# --------------------------------------------------------------------------- sampling


def sample_logits(key: jax.Array, logits: jax.Array, temperature: jax.Array,
                  top_p: jax.Array) -> jax.Array:
    """Sample ids `[B]` from `[B, V]` logits with temperature and nucleus (top-p) filtering.

    temperature <= 0 means greedy. top_p keeps the smallest set of tokens whose probability
    reaches `top_p` (always at least the most likely token).
    """
    greedy = jnp.argmax(logits, axis=-1)
    scaled = logits / jnp.maximum(temperature, 1e-6)
    order = jnp.argsort(-scaled, axis=-1)                                      # [B, V]
    sorted_logits = jnp.take_along_axis(scaled, order, axis=-1)
    probs = jax.nn.softmax(sorted_logits, axis=-1)
    before = jnp.cumsum(probs, axis=-1) - probs                                 # mass above each
    keep_sorted = before < top_p
    keep = jnp.zeros_like(keep_sorted).at[jnp.arange(logits.shape[0])[:, None], order].set(keep_sorted)
    sampled = jax.random.categorical(key, jnp.where(keep, scaled, -jnp.inf), axis=-1)
    return jnp.where(temperature > 0, sampled, greedy)


@functools.partial(jax.jit, static_argnames=("fam", "cfg", "max_new", "lora_scale"))
def _generate(fam, cfg, params, tokens, mask, key, temperature, top_p, eos_ids, lora,
              lora_scale, max_new, prefix_cache):
    b, t = tokens.shape
    if prefix_cache is None:
        cache = fam.init_cache(cfg, b, t + max_new, params["embed"].dtype)
    else:
        cache = _extend_for(prefix_cache, b, t + max_new)
    logits, cache = fam.forward(params, cfg, tokens, attention_mask=mask, lora=lora,
                                lora_scale=lora_scale, cache=cache, last_only=True)
    out = jnp.zeros((b, max_new), jnp.int32)

    def is_eos(tok):
        return jnp.any(tok[:, None] == eos_ids[None, :], axis=-1)

    def cond(state):
        i, _, _, done, _, _ = state
        return (i < max_new) & ~jnp.all(done)

    def body(state):
        i, logits, cache, done, out, key = state
        key, sub = jax.random.split(key)
        tok = sample_logits(sub, logits[:, -1], temperature, top_p)
        tok = jnp.where(done, eos_ids[0], tok)
        out = out.at[:, i].set(tok)
        done = done | is_eos(tok)
        logits, cache = fam.forward(params, cfg, tok[:, None], attention_mask=jnp.ones((b, 1), jnp.int32),
                                    lora=lora, lora_scale=lora_scale, cache=cache, last_only=True)
        return i + 1, logits, cache, done, out, key

    # All-padding rows (batch bucketing) start finished so they cannot hold the loop open.
    done = jnp.sum(mask, axis=1) == 0
    state = (jnp.zeros((), jnp.int32), logits, cache, done, out, key)
    n, _, _, _, out, _ = jax.lax.while_loop(cond, body, state)
    return out, n


def generate(fam: ModuleType, params: dict, cfg, prompts: Sequence[Sequence[int]], *,
             max_new_tokens: int, eos_ids: Sequence[int], key: jax.Array | None = None,
             temperature: float = 0.0, top_p: float = 1.0, lora: dict | None = None,
             lora_scale: float = 1.0, prefix: Sequence[int] | None = None,
             prefix_cache: dict | None = None) -> list[list[int]]:
    """Sample continuations of a batch of prompts (token lists) with a KV cache, in one jit.

    Shapes are bucketed (batch, prompt length, max_new_tokens) so calls of similar size reuse
    one compiled program. `prefix` (tokens shared by every prompt, which must all start with
    it) is prefilled once; pass a `prefix_cache` from `prefill` to reuse it across calls.
    Returns each prompt's generated ids up to and including the first EOS.
    """
    if not prompts:
        return []
    if prefix is not None:
        prefix = list(prefix)
        bad = [i for i, p in enumerate(prompts) if list(p[:len(prefix)]) != prefix]
        if bad:
            raise ValueError(f"prompts {bad} do not start with the given shared prefix")
        if prefix_cache is None:
            prefix_cache = prefill(fam, params, cfg, prefix, lora=lora,
                                   lora_scale=lora_scale)
        prompts = [list(p[len(prefix):]) for p in prompts]
    if any(len(p) == 0 for p in prompts):
        raise ValueError("every prompt needs at least one token after the shared prefix")
    rows = bucket(len(prompts), minimum=1)
    tokens, mask = left_pad(prompts, rows=rows)
    key = jax.random.PRNGKey(0) if key is None else key
    max_new = bucket(max_new_tokens, minimum=8)
    out, _ = _generate(fam, cfg, params, jnp.asarray(tokens), jnp.asarray(mask), key,
                       jnp.float32(temperature), jnp.float32(top_p),
                       jnp.asarray(list(eos_ids), jnp.int32), lora, float(lora_scale), max_new,
                       prefix_cache)
    out = np.asarray(out)
    eos = set(eos_ids)
    result = []
    for row in out[:len(prompts), :max_new_tokens]:
        ids = []
        for tok in row.tolist():
            ids.append(tok)
            if tok in eos:
                break
        result.append(ids)
    return result


# --------------------------------------------------------------------------- menu decisions


@functools.partial(jax.jit, static_argnames=("fam", "cfg", "lora_scale", "mode"))
def _decide(fam, cfg, params, prefix_cache, tokens, mask, allowed, bank, keys, temperature,
            letter_ids, lora_scale, mode):
    def one(pc, t, m, al, lora, key):
        cache = None if pc is None else _extend_for(pc, t.shape[0], t.shape[1])
        lp = choice_logprobs(fam, params, cfg, t, m, letter_ids, al, lora=lora,
                             lora_scale=lora_scale, mode=mode, cache=cache)   # [B, L]
        tempered = jnp.where(al, lp / jnp.maximum(temperature, 1e-6), -jnp.inf)
        sampled = jax.random.categorical(key, tempered, axis=-1)
        greedy = jnp.argmax(jnp.where(al, lp, -jnp.inf), axis=-1)
        return jnp.where(temperature > 0, sampled, greedy), lp

    lora_axis = None if bank is None else 0
    pc_axis = None if prefix_cache is None else 0
    return jax.vmap(one, in_axes=(pc_axis, 0, 0, 0, lora_axis, 0))(
        prefix_cache, tokens, mask, allowed, bank, keys)


class MenuPolicy:
    """Batched, constrained option choice for A agents sharing one frozen base.

    Every agent has B decision prompts per call; agent a's prompts run under adapter a of the
    bank. The prompt is split into a shared prefix (identical for all prompts, e.g. the fixed
    system message: prefilled once per agent by `prefill` and reused until the adapters change)
    and per-decision suffixes that end at the choice position (module docstring).
    """

    def __init__(self, model, letters: Sequence[str] = tuple("ABCDEFGHIJKLMNOPQRSTUVWXYZ"),
                 choice_prefix: str = "choice:", mode: str = "menu"):
        if mode not in ("menu", "vocab"):
            raise ValueError(f"unknown log-prob mode {mode!r} (use 'menu' or 'vocab')")
        self.model = model
        self.letters = tuple(letters)
        self.choice_prefix = choice_prefix
        self.mode = mode
        self.letter_ids = jnp.asarray(letter_token_ids(model.tokenizer, self.letters, choice_prefix))

    def prefill(self, prefix: Sequence[int], n_agents: int, bank: dict | None = None,
                lora_scale: float = 1.0) -> dict:
        """Per-agent caches of the shared prefix: leaves `[A, 1, ...]`."""
        m = self.model
        ids = [int(t) for t in prefix]
        fn = jax.jit(lambda lora: prefill(m.family, m.params, m.config, ids, lora=lora,
                                          lora_scale=lora_scale))
        if bank is None:
            one = fn(None)
            return jax.tree.map(lambda x: jnp.broadcast_to(x, (n_agents,) + x.shape), one)
        return jax.vmap(fn)(bank)

    def decide(self, key: jax.Array, suffixes: Sequence[Sequence[Sequence[int]]],
               allowed: np.ndarray, *, prefix_cache: dict | None = None,
               bank: dict | None = None, lora_scale: float = 1.0,
               temperature: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
        """Choose one menu letter per prompt.

        suffixes: A lists of B token lists (after the shared prefix, or whole prompts without
        a prefix cache); allowed: [A, B, L] bool over `self.letters`. Returns (choice [A, B]
        int indices into `self.letters`, log-probs [A, B, L] at temperature 1 in `self.mode`).
        Sampling uses `log-probs / temperature` over the allowed letters (0 = greedy).
        """
        n_agents = len(suffixes)
        batch = len(suffixes[0])
        if any(len(s) != batch for s in suffixes):
            raise ValueError("every agent needs the same number of prompts")
        allowed = np.asarray(allowed, bool)
        if allowed.shape != (n_agents, batch, len(self.letters)):
            raise ValueError(f"allowed has shape {allowed.shape}, expected "
                             f"{(n_agents, batch, len(self.letters))}")
        if not allowed.any(axis=-1).all():
            raise ValueError("every decision needs at least one allowed letter")
        rows = bucket(batch, minimum=1)
        length = bucket(max(len(s) for agent in suffixes for s in agent))
        padded = [left_pad(agent, length=length, rows=rows) for agent in suffixes]
        tokens = np.stack([p[0] for p in padded])                                # [A, R, T]
        mask = np.stack([p[1] for p in padded])                                  # [A, R, T]
        allowed_r = np.ones((n_agents, rows, len(self.letters)), bool)
        allowed_r[:, :batch] = allowed
        m = self.model
        keys = jax.random.split(key, n_agents)
        choice, lp = _decide(m.family, m.config, m.params, prefix_cache, jnp.asarray(tokens),
                             jnp.asarray(mask), jnp.asarray(allowed_r), bank, keys,
                             jnp.float32(temperature), self.letter_ids, float(lora_scale),
                             self.mode)
        return np.asarray(choice)[:, :batch], np.asarray(lp)[:, :batch]
