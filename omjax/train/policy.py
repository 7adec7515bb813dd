"""LLM policies over option menus, one private LoRA adapter per agent on one frozen base.

Two decision modes (config `policy.decision_mode`):

* `letter`: the model scores its own two-line reply (paper §5.1). The prompt ends with
  `state:` and every state label of the game is a branch `" <label>\\nchoice:"` after it; one
  forward scores all branches at once (branch attention masks, `omjax.models.base`; a
  recurrent family, which cannot mask them, runs one copy of the prompt per branch). The
  label distribution is the softmax of each label's total token log-prob (at the sampling
  temperature); given the label, the choice is the softmax over the menu letters' tokens
  (`" A"`, `" B"`, ...) after that branch's `choice:`. A decision is a (label, letter) pair
  drawn from this joint distribution, so its probability, the PPO ratio and the KL to the
  reference are exact, and every reply parses. `policy.state_line=oracle` has one branch, the
  true label (the documented departure: the label is given, not chosen); `none` has one
  branch `choice:` with no state line.
* `sample`: the two-line reply is generated token by token (KV cache) at the sampling
  temperature and parsed; the policy probability of a decision is that of its reply tokens.

Each mode provides `policy_fn(base, lora, inputs) -> PolicyOut` for the update (see
`omjax.train.update`), `prefill` (the shared prompt prefix under every adapter of a bank) and
a jitted `decide`/`generate` over a bank: every row of a batch carries an int32 bank index,
gathers that adapter (and its prefix cache) inside the jitted call, and the rows are
`jax.vmap`ped, so all pending decisions of all agents go to the backbone in one call.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from omjax.models import base as base_lib
from omjax.models import inference
from omjax.prompts.reply import STATE_PREFIX, format_reply
from omjax.train.sharding import to_host
from omjax.train.update import PolicyOut

# Logit given to letters outside the menu: finite, so masked slots never produce inf - inf.
_MASKED = -1e9


@dataclasses.dataclass(frozen=True)
class Branches:
    """The continuations a letter-mode decision scores after its prompt, one per state label."""

    labels: tuple[str | None, ...]
    """The state label of each branch (None: no state line)."""
    tokens: tuple[tuple[int, ...], ...]
    """Each branch's token ids, ending at `choice:` (where the letter is scored)."""
    label_len: tuple[int, ...]
    """How many leading tokens of each branch spell its label (the tokens the label's
    log-prob sums over)."""

    @property
    def width(self) -> int:
        """Tokens per branch slot in the packed arrays (a power of two, so shapes repeat)."""
        return inference.pow2_at_least(max(len(t) for t in self.tokens), 4)


def assistant_prefix(state_line: str) -> str:
    """Where a letter-mode prompt stops: before the state label, or before `choice:`."""
    return "" if state_line == "none" else STATE_PREFIX


def make_branches(tokenizer: Any, labels: Sequence[str | None]) -> Branches:
    """The branches of `labels` (a single None: the reply without a state line)."""
    if not labels:
        raise ValueError("a letter-mode decision needs at least one state label")
    if len(set(labels)) != len(labels):
        raise ValueError(f"state labels repeat: {list(labels)}")
    tokens, label_len = [], []
    for label in labels:
        if label is None:
            text, head = format_reply(None), []
        else:
            text = format_reply(label)[len(STATE_PREFIX):]
            head = inference.encode(tokenizer, " " + label)
        ids = inference.encode(tokenizer, text)
        if ids[:len(head)] != head:
            raise ValueError(f"state label {label!r} tokenises differently before '\\nchoice:' ({ids}) "
                             f"than alone ({head}); letter mode cannot score its tokens")
        tokens.append(tuple(int(t) for t in ids))
        label_len.append(len(head))
    return Branches(tuple(labels), tuple(tokens), tuple(label_len))


def pack_branches(branches: Sequence[Branches], rows: int, n_labels: int, width: int,
                  pad_id: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The branch block that follows each prompt: (tokens int32 [R, L*W], segments int32
    [R, L*W] (branch l is segment 2 + l, padding 0), label_mask bool [R, L, W] (the label's
    tokens), end int32 [R, L] (the column in the block of each branch's last token, `choice:`)).
    Rows past `len(branches)` are padding (no branch tokens)."""
    tokens = np.full((rows, n_labels * width), pad_id, np.int32)
    segments = np.zeros((rows, n_labels * width), np.int32)
    label_mask = np.zeros((rows, n_labels, width), bool)
    end = np.zeros((rows, n_labels), np.int32)
    for j, b in enumerate(branches):
        if len(b.tokens) != n_labels:
            raise ValueError(f"decision {j} has {len(b.tokens)} state branches, the batch {n_labels}")
        for l, (ids, k) in enumerate(zip(b.tokens, b.label_len)):
            tokens[j, l * width: l * width + len(ids)] = ids
            segments[j, l * width: l * width + len(ids)] = 2 + l
            label_mask[j, l, :k] = True
            end[j, l] = l * width + len(ids) - 1
    return tokens, segments, label_mask, end


def branch_rows(tokens: jax.Array, mask: jax.Array, n_labels: int, width: int) -> tuple[jax.Array, jax.Array]:
    """[P, T + L*W] prompts with their branch blocks -> [P*L, T + W]: each prompt once per
    branch (for families that cannot mask branches from each other, `family.SEGMENTS`)."""
    p, total = tokens.shape
    t = total - n_labels * width
    spread = lambda x: jnp.concatenate([jnp.repeat(x[:, :t], n_labels, axis=0),
                                        x[:, t:].reshape(p * n_labels, width)], axis=1)
    return spread(tokens), spread(mask)


def add_trunk(policy: Any, base: Any, inputs: dict) -> dict:
    """`inputs` plus the frozen trunk of their sequences when the adapters cover only the top
    layers (`policy.frozen_layers` > 0): the update's `prepare_fn`, run once per round. Inputs
    that already carry a `trunk` (kept by the rollouts, `LetterPolicy.keeps_trunk`) are left as
    they are."""
    if not policy.frozen_layers or "trunk" in inputs:
        return inputs
    tokens, mask = policy.sequences(inputs)
    trunk = policy.family.trunk(base, policy.config, tokens, attention_mask=mask, n_layers=policy.frozen_layers)
    return {**inputs, "trunk": trunk}


def _gather(tree: Any, rows: jax.Array) -> Any:
    """Bank entry of each row: leaves [A, ...] -> [R, ...]."""
    return jax.tree.map(lambda x: x[rows], tree)


class _BankPolicy:
    """What both decision modes share: the backbone, the adapter scale, the sampling
    temperature, the frozen trunk and the shared-prefix caches of a bank."""

    reply_only = False
    """Whether the adapters act on the reply's tokens only (`lora.scope=reply`, letter mode):
    the prompt, shared prefix included, is the frozen base's."""

    def __init__(self, family: Any, config: Any, lora_scale: float, temperature: float, remat: bool | int,
                 frozen_layers: int):
        self.family, self.config = family, config
        self.lora_scale, self.temperature, self.remat = float(lora_scale), float(temperature), remat
        self.frozen_layers = int(frozen_layers)
        one = lambda base, lora, tokens, mask: inference.prefill(family, base, config, tokens, mask, lora=lora,
                                                                 lora_scale=self.lora_scale)
        self._prefill = jax.jit(jax.vmap(one, in_axes=(None, 0, None, None)))
        self._prefill_base = jax.jit(lambda base, tokens, mask: inference.prefill(family, base, config, tokens, mask))

    prepare = add_trunk  # prepare(base, inputs): the update's once-per-round frozen trunk

    def sequences(self, inputs: dict) -> tuple[jax.Array, jax.Array]:
        """The token rows the backbone runs for `inputs`."""
        return inputs["tokens"], inputs["mask"]

    def prefill(self, base: Any, bank: Any, prefix: Sequence[int]) -> dict:
        """The cache of the shared prompt prefix under each adapter of `bank`: leaves [A, 1, ...].
        Valid until the bank changes (the prefix's keys and values depend on the adapter), except
        under `reply_only`, where it is the base's for every adapter."""
        tokens, mask = inference.prefix_arrays(prefix)
        if self.reply_only:
            one = self._prefill_base(base, jnp.asarray(tokens), jnp.asarray(mask))  # leaves [1, ...]
            n = jax.tree.leaves(bank)[0].shape[0]
            return jax.tree.map(lambda x: jnp.broadcast_to(x[None], (n,) + x.shape), one)
        return self._prefill(base, bank, jnp.asarray(tokens), jnp.asarray(mask))


def pair_gumbel(key: jax.Array, p: int, n_labels: int, width: int) -> jax.Array:
    """Gumbel noise [P, L, M] of letter-mode draws: decision p's (label l, menu slot j) pair reads
    its own key, so a draw does not depend on the menu width M its batch pads to (the longest
    menu of the call); `jax.random.categorical` draws noise for the padded shape as a whole."""
    one = lambda i, l, j: jax.random.gumbel(jax.random.fold_in(jax.random.fold_in(jax.random.fold_in(key, i), l), j))
    grid = jnp.meshgrid(jnp.arange(p), jnp.arange(n_labels), jnp.arange(width), indexing="ij")
    return jax.vmap(one)(*(g.reshape(-1) for g in grid)).reshape(p, n_labels, width)


class LetterPolicy(_BankPolicy):
    """The joint (state label, menu letter) policy of letter mode on a backbone `model`
    (`omjax.models.load` result).

    inputs (per agent, P decisions, L branches of W tokens): `tokens` int32 [P, T + L*W] and
    `mask` [P, T + L*W]: the left-padded prompt (in rollouts, the part after the cached shared
    prefix), then the branch block with segments 2 + l (`pack_branches`); `label_mask` bool
    [P, L, W]; `end` int32 [P, L]; `letters` int32 [P, M] letter token ids, `menu_mask` bool
    [P, M]; `state` int32 [P] and `action` int32 [P]: the chosen branch and menu slot. The
    update's `prepare` adds `trunk` (under `lora.top_layers`) and, with `reply_only`,
    `prompt_cache` and `prompt_logits` (the prompt's cache and last-token logits on the base).

    `realign` (`policy.realign`) changes `decide` only: its draws use the reply logits
    `ref + realign * (adapted - ref)`; `joint_logp` and `policy_fn` score the policy itself.
    """

    kl_kind = "exact"

    def __init__(self, family: Any, config: Any, lora_scale: float, temperature: float, remat: bool | int = True,
                 frozen_layers: int = 0, reply_only: bool = False, realign: float = 1.0):
        super().__init__(family, config, lora_scale, temperature, remat, frozen_layers)
        self.realign = float(realign)
        # A recurrent family runs each branch in its own copy of the prompt: exact too, at L
        # times the prompt's compute.
        self.one_row_per_branch = not family.SEGMENTS
        self.reply_only = bool(reply_only)
        if self.reply_only and self.one_row_per_branch:
            raise ValueError("lora.scope=reply runs the branch block on the prompt's cache, which needs a family "
                             "with branch masks (SEGMENTS); this one has none: use lora.scope=all")
        if self.reply_only and self.frozen_layers and not getattr(family, "TRUNK_CACHE", False):
            raise ValueError("lora.scope=reply with lora.top_layers continues a cache from the frozen trunk, which "
                             "this family cannot (TRUNK_CACHE is False): set lora.top_layers=0 or lora.scope=all")
        self.keeps_trunk = bool(frozen_layers) and family.forward_and_trunk is not None and family.SEGMENTS
        """Whether `decide(..., keep_trunk=True)` can return each decision's frozen trunk (the
        update's `prepare` then has nothing left to compute)."""

        def decide(base, bank, caches, index, inputs, keys, keep_trunk):
            cache = None if caches is None else _gather(caches, index)
            one = lambda *a: self._decide_one(*a, keep_trunk=keep_trunk)
            return jax.vmap(one, in_axes=(None, 0, 0, 0, 0))(base, _gather(bank, index), cache, inputs, keys)

        self._decide = jax.jit(decide, static_argnums=6)
        self._trunk = jax.jit(lambda base, tokens, mask: family.trunk(base, config, tokens, attention_mask=mask,
                                                                      n_layers=self.frozen_layers).hidden)

    def joint_logp(self, base: Any, lora: Any, inputs: dict, cache: dict | None = None,
                   realign: float = 1.0) -> jax.Array:
        """[P, L, M] log-probs of (state branch, menu slot) pairs (0 off the menu). With `cache`
        (batch-1 shared prefix), `tokens` continue it; `realign` as `policy.realign` (1: the
        policy itself)."""
        return self._joint(base, lora, inputs, cache, keep_trunk=False, realign=realign)[0]

    def _joint(self, base: Any, lora: Any, inputs: dict, cache: dict | None,
               keep_trunk: bool, realign: float = 1.0) -> tuple[jax.Array, jax.Array | None]:
        """`joint_logp` and, with `keep_trunk`, the trunk hidden states [P, T + L*W, D] of the
        rows (of the tokens after `cache`)."""
        p, n_labels, width = inputs["label_mask"].shape
        n = n_labels * width
        if self.reply_only:
            logits, hidden = self._reply_logits(base, lora, inputs, cache, keep_trunk, realign)
        else:
            logits, hidden = self._all_logits(base, lora, inputs, cache, keep_trunk)
            if realign != 1.0:  # every token is adapted: the base's logits need a second forward
                ref, _ = self._all_logits(base, None, inputs, cache, False)
                logits = ref + realign * (logits - ref)
        logits = logits / self.temperature  # [P, 1 + L*W, V]: the prompt's last token, then the block
        # Branch l's token j is predicted by the prompt's last token (j = 0) or by its token j - 1.
        pred = np.concatenate([np.zeros((n_labels, 1), np.int32),
                               1 + np.arange(n_labels)[:, None] * width + np.arange(width - 1)[None]], axis=1)
        block = inputs["tokens"][:, -n:]  # [P, L*W]
        tok_logp = jnp.take_along_axis(jax.nn.log_softmax(logits[:, pred.reshape(-1)], axis=-1),
                                       block[:, :, None], axis=-1)[..., 0].reshape(p, n_labels, width)
        label_logp = jax.nn.log_softmax(jnp.sum(jnp.where(inputs["label_mask"], tok_logp, 0.0), axis=-1), axis=-1)
        at_choice = jnp.take_along_axis(logits, 1 + inputs["end"][:, :, None], axis=1)  # [P, L, V]
        letter_logits = jnp.take_along_axis(at_choice, inputs["letters"][:, None, :], axis=-1)  # [P, L, M]
        menu = inputs["menu_mask"][:, None, :]
        letter_logp = jax.nn.log_softmax(jnp.where(menu, letter_logits, _MASKED), axis=-1)
        return jnp.where(menu, label_logp[:, :, None] + letter_logp, 0.0), hidden

    def _all_logits(self, base, lora, inputs, cache, keep_trunk):
        """Logits [P, 1 + L*W, V] at the prompt's last token and the branch block, the adapter on
        every token (`lora.scope=all`), and the kept trunk [P, T + L*W, D] or None."""
        p, n_labels, width = inputs["label_mask"].shape
        n = n_labels * width
        tokens, mask = self.sequences(inputs)
        split = tokens.shape[0] != p
        if cache is not None:
            cache = inference.extend_for(cache, tokens.shape[0], tokens.shape[1])
        common = dict(attention_mask=mask, lora=lora, lora_scale=self.lora_scale, cache=cache,
                      last_only=width + 1 if split else n + 1)
        hidden = None
        if keep_trunk:
            logits, _, kept = self.family.forward_and_trunk(base, self.config, tokens, n_layers=self.frozen_layers,
                                                            **common)
            hidden = kept.hidden
        else:
            logits, _ = self.family.forward(base, self.config, tokens, remat=self.remat, trunk=inputs.get("trunk"),
                                            **common)
        if split:  # [P*L, 1 + W, V] -> the layout of one row per prompt
            logits = logits.reshape(p, n_labels, width + 1, -1)
            logits = jnp.concatenate([logits[:, 0, :1], logits[:, :, 1:].reshape(p, n, -1)], axis=1)
        return logits, hidden

    def _reply_logits(self, base, lora, inputs, cache, keep_trunk, realign=1.0):
        """`_all_logits` under `lora.scope=reply`: the prompt's T tokens run on the frozen base
        (no adapter, so no gradient flows through them) into a cache, then the L*W branch tokens
        run with the adapter on that cache. With a trunk (the update's `prepare`) both chunks
        start from it; with `prompt_cache` (also `prepare`'s) the prompt is not run again. The
        prompt's last logits are the base's whatever `realign` is; the block's are realigned
        (`_realigned_block`)."""
        n = inputs["label_mask"].shape[1] * inputs["label_mask"].shape[2]
        t = inputs["tokens"].shape[1] - n
        if "prompt_cache" in inputs:
            saved = inputs["prompt_cache"]
            first = self.frozen_layers
            layers = _rows_second(saved["layers"])
            cache = {"layers": base_lib.cache_layers_above_trunk(layers, first), "positions": saved["positions"],
                     "index": jnp.asarray(t, jnp.int32)}
            last, kept = inputs["prompt_logits"], []
        else:
            last, cache, kept = self._prompt_pass(base, inputs, cache, keep_trunk)
        if realign != 1.0:
            out, kept_b = self._realigned_block(base, lora, inputs, slice(t, None), cache, realign)
        else:
            out, _, kept_b = self._chunk(base, lora, inputs, slice(t, None), cache, keep_trunk, prompt=False)
        hidden = jnp.concatenate(kept + kept_b, axis=1) if keep_trunk else None
        return jnp.concatenate([last, out], axis=1), hidden  # [P, 1 + L*W, V]

    def _realigned_block(self, base, lora, inputs, cols: slice, cache, realign: float):
        """The branch block's logits `ref + realign * (adapted - ref)` on the prompt's `cache`,
        and [its trunk] (or [] without frozen layers). Below `lora.top_layers` the two passes are
        the same computation, so the base's pass starts from the adapted pass's trunk and runs
        only the adapted layers again."""
        tokens, mask = inputs["tokens"][:, cols], inputs["mask"][:, cols]
        common = dict(attention_mask=mask, cache=cache, last_only=tokens.shape[1])
        if self.frozen_layers and self.family.forward_and_trunk is not None:
            out, _, tr = self.family.forward_and_trunk(base, self.config, tokens, n_layers=self.frozen_layers,
                                                       lora=lora, lora_scale=self.lora_scale, **common)
            ref, _ = self.family.forward(base, self.config, tokens, trunk=tr, **common)
            kept = [tr.hidden]
        else:
            out, _ = self.family.forward(base, self.config, tokens, lora=lora, lora_scale=self.lora_scale, **common)
            ref, _ = self.family.forward(base, self.config, tokens, **common)
            kept = []
        return ref + realign * (out - ref), kept

    def _prompt_pass(self, base, inputs, cache, keep_trunk: bool):
        """The prompt's T tokens on the frozen base into a cache with room for the branch block
        (`cache`: a batch-1 shared prefix to continue, or None): (last-token logits [P, 1, V],
        cache, [kept trunk] or [])."""
        n = inputs["label_mask"].shape[1] * inputs["label_mask"].shape[2]
        p, t = inputs["tokens"].shape[0], inputs["tokens"].shape[1] - n
        cache = (self.family.init_cache(self.config, p, t + n, base["embed"].dtype) if cache is None
                 else inference.extend_for(cache, p, t + n))
        return self._chunk(base, None, inputs, slice(0, t), cache, keep_trunk, prompt=True)

    def _chunk(self, base, lora, inputs, cols: slice, cache, keep_trunk: bool, prompt: bool):
        """Columns `cols` of the rows continuing `cache` (one row per decision, room for both
        chunks): the `prompt` (logits of its last token) or the branch block (logits of every
        position). Returns (logits, cache, [kept trunk] or [])."""
        tokens, mask = inputs["tokens"][:, cols], inputs["mask"][:, cols]
        common = dict(attention_mask=mask, lora=lora, lora_scale=self.lora_scale, cache=cache,
                      last_only=1 if prompt else tokens.shape[1])
        if keep_trunk:
            out, cache, tr = self.family.forward_and_trunk(base, self.config, tokens, n_layers=self.frozen_layers,
                                                           **common)
            return out, cache, [tr.hidden]
        trunk = inputs.get("trunk")
        tr = None if trunk is None else trunk.replace(hidden=trunk.hidden[:, cols])
        out, cache = self.family.forward(base, self.config, tokens, remat=False if prompt else self.remat, trunk=tr,
                                         **common)
        return out, cache, []

    def prepare(self, base: Any, inputs: dict) -> dict:
        """The update's once-per-round inputs: the frozen trunk (`add_trunk`) and, under
        `lora.scope=reply`, the prompt's cache from the frozen base and its last token's logits
        (`prompt_cache`: the layers from the trunk up, without the slots' segment marks, and
        `prompt_logits` [P, 1, V]), which no adapter changes: the reference, the old policy and
        every epoch then run only the branch block."""
        inputs = add_trunk(self, base, inputs)
        if not self.reply_only or "prompt_cache" in inputs:
            return inputs
        last, cache, _ = self._prompt_pass(base, inputs, None, False)
        # Rows first on every leaf, as the update chunks and takes every prepared input by row.
        layers = _rows_first(base_lib.cache_layers_from(cache["layers"], self.frozen_layers))
        saved = {"layers": layers, "positions": cache["positions"]}
        return {**inputs, "prompt_cache": saved, "prompt_logits": last}

    def sequences(self, inputs: dict) -> tuple[jax.Array, jax.Array]:
        _, n_labels, width = inputs["label_mask"].shape
        if self.one_row_per_branch and n_labels > 1:
            return branch_rows(inputs["tokens"], inputs["mask"], n_labels, width)
        return inputs["tokens"], inputs["mask"]

    @property
    def update_prefix(self) -> bool:
        """Whether the update may run each minibatch's shared prompt prefix once (`policy_fn`
        with `prefix_tokens`): where every layer is adapted on every token (no frozen trunk kept
        laid out as whole prompts, no `lora.scope=reply` prompt cache)."""
        return not self.frozen_layers and not self.reply_only

    def policy_fn(self, base: Any, lora: Any, inputs: dict) -> PolicyOut:
        """The update's scores of P decisions. With `prefix_tokens`/`prefix_mask` [P, S] (every
        row the same: the rows' shared prompt prefix, `rollout.update_inputs`), `tokens` hold
        what follows it: the prefix runs once, under `lora` (its keys and values are the
        adapter's, so gradients flow through them), into a batch-1 cache that every row's
        attention reads; the same numbers as whole prompts at a fraction of the prefix's cost."""
        cache = None
        if "prefix_tokens" in inputs:
            cache = inference.prefill(self.family, base, self.config, inputs["prefix_tokens"][:1],
                                      inputs["prefix_mask"][:1], lora=lora, lora_scale=self.lora_scale)
        joint = self.joint_logp(base, lora, inputs, cache)  # [P, L, M]
        p, n_labels, m = joint.shape
        chosen = joint[jnp.arange(p), inputs["state"], inputs["action"]]  # [P]
        mask = jnp.broadcast_to(inputs["menu_mask"][:, None, :], joint.shape)
        return PolicyOut(logp=chosen, dist=joint.reshape(p, n_labels * m), dist_mask=mask.reshape(p, n_labels * m))

    def _decide_one(self, base, lora, cache, inputs, key, keep_trunk=False):
        joint, hidden = self._joint(base, lora, inputs, cache, keep_trunk, self.realign)  # [P, L, M]
        p, n_labels, m = joint.shape
        flat = jnp.where(inputs["menu_mask"][:, None, :], joint, -jnp.inf).reshape(p, -1)
        pick = jnp.argmax(flat + pair_gumbel(key, p, n_labels, m).reshape(p, -1), axis=-1)  # [P]: a categorical draw
        logp = jnp.take_along_axis(flat, pick[:, None], -1)[:, 0]
        return (pick // m).astype(jnp.int32), (pick % m).astype(jnp.int32), logp, hidden

    def decide(self, base: Any, bank: Any, index: np.ndarray, inputs: dict, keys: jax.Array,
               caches: dict | None = None, keep_trunk: bool = False):
        """Draw one (state, letter) pair per row: `index` int [R] (the row's bank entry), inputs
        `[R, P, ...]`, keys `[R]`, `caches` the bank's `prefill` (then `tokens` continue it) or
        None (whole prompts). Returns (state int32 [R, P], action int32 [R, P], log-prob float32
        [R, P], trunk hidden float [R, P, T + L*W, D] with `keep_trunk` (needs `keeps_trunk`),
        else None) as NumPy."""
        if keep_trunk and not self.keeps_trunk:
            raise ValueError("this policy cannot keep the trunk (no frozen layers, or a family without "
                             "`forward_and_trunk`)")
        return to_host(self._decide(base, bank, caches, jnp.asarray(index, jnp.int32), inputs, keys, keep_trunk))

    def prefix_trunk(self, base: Any, prefix: Sequence[int]) -> np.ndarray:
        """[len(prefix), D] the frozen trunk of the shared prompt prefix (adapter-independent)."""
        tokens, mask = inference.prefix_arrays(prefix)
        return to_host(self._trunk(base, jnp.asarray(tokens), jnp.asarray(mask)))[0, tokens.shape[1] - len(prefix):]


class SamplePolicy(_BankPolicy):
    """Free generation of the two-line reply, scored token by token.

    inputs (per agent, P decisions): `tokens` int32 [P, T] and `mask` [P, T] holding the
    left-padded prompt followed by the reply, `reply_mask` bool [P, T] true on reply tokens.
    """

    kl_kind = "k3"

    def __init__(self, family: Any, config: Any, lora_scale: float, temperature: float,
                 max_new_tokens: int, stop_ids: Sequence[int], pad_id: int, remat: bool | int = True,
                 frozen_layers: int = 0):
        super().__init__(family, config, lora_scale, temperature, remat, frozen_layers)
        self.max_new_tokens = int(max_new_tokens)
        self.stop_ids = tuple(int(i) for i in stop_ids)
        self.pad_id = int(pad_id)
        rows = jax.vmap(self._generate_one, in_axes=(None, 0, 0, 0, 0, 0))

        def generate(base, bank, caches, index, tokens, mask, keys):
            cache = None if caches is None else _gather(caches, index)
            return rows(base, _gather(bank, index), cache, tokens, mask, keys)

        self._generate = jax.jit(generate)

    def token_logp(self, base, lora, inputs) -> jax.Array:
        """[P, T-1] log-prob of token t+1 given tokens <= t."""
        logits, _ = self.family.forward(base, self.config, inputs["tokens"], attention_mask=inputs["mask"],
                                        lora=lora, lora_scale=self.lora_scale, remat=self.remat,
                                        trunk=inputs.get("trunk"))
        logp = jax.nn.log_softmax(logits[:, :-1] / self.temperature, axis=-1)  # [P, T-1, V]
        return jnp.take_along_axis(logp, inputs["tokens"][:, 1:, None], axis=-1)[..., 0]

    def policy_fn(self, base, lora, inputs) -> PolicyOut:
        mask = inputs["reply_mask"][:, 1:]  # [P, T-1] targets that are reply tokens
        tok = jnp.where(mask, self.token_logp(base, lora, inputs), 0.0)
        return PolicyOut(logp=jnp.sum(tok, axis=-1), dist=tok, dist_mask=mask)

    def _generate_one(self, base, lora, cache, tokens, mask, key):
        p, t = tokens.shape
        extra = t + self.max_new_tokens
        if cache is None:
            cache = self.family.init_cache(self.config, p, extra, base["embed"].dtype)
        else:
            cache = inference.extend_for(cache, p, extra)
        logits, cache = self.family.forward(base, self.config, tokens, attention_mask=mask, lora=lora,
                                            lora_scale=self.lora_scale, cache=cache, last_only=True)
        return inference.decode(self.family, base, self.config, logits, cache, key, max_new=self.max_new_tokens,
                                stop_ids=jnp.asarray(self.stop_ids, jnp.int32), pad_id=self.pad_id,
                                temperature=jnp.float32(self.temperature), lora=lora, lora_scale=self.lora_scale,
                                done=jnp.sum(mask, axis=1) == 0)

    def generate(self, base, bank, index, tokens, mask, keys, caches: dict | None = None):
        """Sample replies: `index` int [R] (the row's bank entry), tokens/mask `[R, P, T]` (the
        part after the cached prefix when `caches` is given), keys `[R]`.

        Returns (reply ids int32 [R, P, L], per-token log-probs [R, P, L], live mask [R, P, L]);
        generation of a row stops after its first stop token (which is kept).
        """
        toks, logps, live = self._generate(base, bank, caches, jnp.asarray(index, jnp.int32), tokens, mask, keys)
        return to_host((toks, logps, live))


def _rows_first(layers):
    """A cache's `layers` with rows on axis 0: a scanned stack's `[L, B, ...]` leaves become
    `[B, L, ...]`; a per-layer list is already row-first."""
    return jax.tree.map(lambda x: jnp.moveaxis(x, 0, 1), layers) if isinstance(layers, dict) else layers


def _rows_second(layers):
    """`_rows_first` undone."""
    return jax.tree.map(lambda x: jnp.moveaxis(x, 1, 0), layers) if isinstance(layers, dict) else layers
