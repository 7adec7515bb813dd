"""LLM policies over option menus, one private LoRA adapter per agent on one frozen base.

Two decision modes (config `policy.decision_mode`):

* `letter`: the prompt ends with the reply prefix `state: <label>\\nchoice:`; one forward gives
  the logits of the next token, and the policy is the softmax (at the sampling temperature) over
  the tokens of the visible menu letters (`" A"`, `" B"`, ...). The probability of the choice is
  exact, so the KL to the reference is exact too.
* `sample`: the two-line reply is generated token by token (KV cache) at the sampling
  temperature and parsed; the policy probability of a decision is that of its reply tokens.

Each mode provides `policy_fn(base, lora, inputs) -> PolicyOut` for the update (see
`omjax.train.update`) and a jitted `decide`/`generate` over a bank: every row of a batch names
its agent, gathers that agent's adapter from the bank inside the jitted call, and the rows are
`jax.vmap`ped, so all pending decisions of all agents go to the backbone in one call.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from omjax.options.menu import letter as menu_letter
from omjax.train.update import PolicyOut

# Logit given to letters outside the menu: finite, so masked slots never produce inf - inf.
_MASKED = -1e9


def pow2_at_least(n: int, floor: int = 1) -> int:
    out = floor
    while out < n:
        out *= 2
    return out


def pad_left(seqs: Sequence[Sequence[int]], length: int, pad_id: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Left-pad token lists to `length`: (ids int32 [N, L], mask int32 [N, L])."""
    ids = np.full((len(seqs), length), pad_id, np.int32)
    mask = np.zeros((len(seqs), length), np.int32)
    for r, s in enumerate(seqs):
        if len(s) > length:
            raise ValueError(f"sequence of {len(s)} tokens does not fit the padded length {length}")
        if len(s):
            ids[r, length - len(s):] = s
            mask[r, length - len(s):] = 1
    return ids, mask


def letter_token_ids(tokenizer: Any, letters: Sequence[str]) -> list[int]:
    """Token id of `" " + letter` for each letter; each must be exactly one token, or letter mode
    could not score it at a single position."""
    out = []
    for letter in letters:
        ids = _letter_ids(tokenizer, letter)
        if len(ids) != 1:
            raise ValueError(f"menu letter {letter!r} is {len(ids)} tokens in this tokenizer ({ids}); "
                             "letter mode needs one token per letter (use policy.decision_mode=sample)")
        out.append(int(ids[0]))
    return out


def _letter_ids(tokenizer: Any, letter: str) -> list[int]:
    """Token ids of a menu letter as it follows `choice:` in a reply."""
    return tokenizer.encode(" " + letter, add_special_tokens=False)


def single_token_letters(tokenizer: Any, n: int) -> list[str]:
    """The first `n` menu letters (A .. Z, AA, AB, ...) that are one token as `" " + letter`:
    the labels letter mode can score. Past Z a tokenizer lacks some two-letter tokens (SmolLM2:
    18 of AA .. DZ), so menus longer than 26 entries take the next letter it has."""
    out: list[str] = []
    k = 0
    while len(out) < n:
        candidate = menu_letter(k)
        if len(candidate) > 3:
            raise ValueError(f"the tokenizer has only {len(out)} single-token menu letters up to ZZZ; "
                             f"a menu of {n} entries cannot be scored in letter mode (use policy.decision_mode=sample)")
        if len(_letter_ids(tokenizer, candidate)) == 1:
            out.append(candidate)
        k += 1
    return out


def add_trunk(policy: Any, base: Any, inputs: dict) -> dict:
    """`inputs` plus the frozen trunk of their sequences when the adapters cover only the top
    layers (`policy.frozen_layers` > 0): the update's `prepare_fn`, run once per round."""
    if not policy.frozen_layers:
        return inputs
    trunk = policy.family.trunk(base, policy.config, inputs["tokens"], attention_mask=inputs["mask"],
                                n_layers=policy.frozen_layers)
    return {**inputs, "trunk": trunk}


def _gather(bank: Any, agents: jax.Array) -> Any:
    """Adapter of each row: leaves [A, ...] -> [R, ...]."""
    return jax.tree.map(lambda x: x[agents], bank)


class LetterPolicy:
    """Constrained menu-letter scoring on a backbone `model` (`omjax.models.load` result).

    inputs (per agent, P decisions): `tokens` int32 [P, T] and `mask` [P, T] (left-padded prompt
    ending in `choice:`), `letters` int32 [P, M] letter token ids, `menu_mask` bool [P, M],
    `action` int32 [P] index of the chosen letter.
    """

    kl_kind = "exact"

    def __init__(self, family: Any, config: Any, lora_scale: float, temperature: float, remat: bool = True,
                 frozen_layers: int = 0):
        self.family, self.config = family, config
        self.lora_scale, self.temperature, self.remat = float(lora_scale), float(temperature), remat
        self.frozen_layers = int(frozen_layers)
        rows = jax.vmap(self._decide_one, in_axes=(None, 0, 0, 0))
        self._decide = jax.jit(lambda base, bank, agents, inputs, keys: rows(base, _gather(bank, agents), inputs, keys))

    def menu_logp(self, base: Any, lora: Any, inputs: dict) -> jax.Array:
        """[P, M] log-probs over the menu slots (0 on slots that are not on the menu)."""
        logits, _ = self.family.forward(base, self.config, inputs["tokens"], attention_mask=inputs["mask"],
                                        lora=lora, lora_scale=self.lora_scale, last_only=True,
                                        remat=self.remat, trunk=inputs.get("trunk"))
        letter_logits = jnp.take_along_axis(logits[:, -1, :], inputs["letters"], axis=-1)  # [P, M]
        letter_logits = jnp.where(inputs["menu_mask"], letter_logits / self.temperature, _MASKED)
        return jnp.where(inputs["menu_mask"], jax.nn.log_softmax(letter_logits, axis=-1), 0.0)

    prepare = add_trunk  # prepare(base, inputs): the update's once-per-round frozen trunk

    def policy_fn(self, base: Any, lora: Any, inputs: dict) -> PolicyOut:
        logp = self.menu_logp(base, lora, inputs)  # [P, M]
        chosen = jnp.take_along_axis(logp, inputs["action"][:, None], axis=-1)[:, 0]  # [P]
        return PolicyOut(logp=chosen, dist=logp, dist_mask=inputs["menu_mask"])

    def _decide_one(self, base, lora, inputs, key):
        logp = self.menu_logp(base, lora, inputs)  # [P, M]
        action = jax.random.categorical(key, jnp.where(inputs["menu_mask"], logp, -jnp.inf), axis=-1)
        chosen = jnp.take_along_axis(logp, action[:, None], axis=-1)[:, 0]
        return action.astype(jnp.int32), chosen

    def decide(self, base: Any, bank: Any, agents: np.ndarray, inputs: dict, keys: jax.Array):
        """Sample one menu letter per row: `agents` int [R] (whose adapter), inputs `[R, P, ...]`,
        keys `[R]`. Returns (action int32 [R, P], log-prob float32 [R, P]) as NumPy."""
        action, logp = self._decide(base, bank, jnp.asarray(agents, jnp.int32), inputs, keys)
        return np.asarray(action), np.asarray(logp)


class SamplePolicy:
    """Free generation of the two-line reply, scored token by token.

    inputs (per agent, P decisions): `tokens` int32 [P, T] and `mask` [P, T] holding the
    left-padded prompt followed by the reply, `reply_mask` bool [P, T] true on reply tokens.
    """

    kl_kind = "k3"

    def __init__(self, family: Any, config: Any, lora_scale: float, temperature: float,
                 max_new_tokens: int, stop_ids: Sequence[int], pad_id: int, remat: bool = True,
                 frozen_layers: int = 0):
        self.family, self.config = family, config
        self.lora_scale, self.temperature, self.remat = float(lora_scale), float(temperature), remat
        self.frozen_layers = int(frozen_layers)
        self.max_new_tokens = int(max_new_tokens)
        self.stop_ids = tuple(int(i) for i in stop_ids)
        self.pad_id = int(pad_id)
        rows = jax.vmap(self._generate_one, in_axes=(None, 0, 0, 0, 0))
        self._generate = jax.jit(
            lambda base, bank, agents, tokens, mask, keys: rows(base, _gather(bank, agents), tokens, mask, keys))

    def token_logp(self, base, lora, inputs) -> jax.Array:
        """[P, T-1] log-prob of token t+1 given tokens <= t."""
        logits, _ = self.family.forward(base, self.config, inputs["tokens"], attention_mask=inputs["mask"],
                                        lora=lora, lora_scale=self.lora_scale, remat=self.remat,
                                        trunk=inputs.get("trunk"))
        logp = jax.nn.log_softmax(logits[:, :-1] / self.temperature, axis=-1)  # [P, T-1, V]
        return jnp.take_along_axis(logp, inputs["tokens"][:, 1:, None], axis=-1)[..., 0]

    prepare = add_trunk

    def policy_fn(self, base, lora, inputs) -> PolicyOut:
        mask = inputs["reply_mask"][:, 1:]  # [P, T-1] targets that are reply tokens
        tok = jnp.where(mask, self.token_logp(base, lora, inputs), 0.0)
        return PolicyOut(logp=jnp.sum(tok, axis=-1), dist=tok, dist_mask=mask)

    def _generate_one(self, base, lora, tokens, mask, key):
        p, t = tokens.shape
        cache = self.family.init_cache(self.config, p, t + self.max_new_tokens, jnp.float32)
        logits, cache = self.family.forward(base, self.config, tokens, attention_mask=mask, lora=lora,
                                            lora_scale=self.lora_scale, cache=cache, last_only=True)
        stops = jnp.asarray(self.stop_ids, jnp.int32)

        def step(carry, k):
            logits, cache, done = carry
            logp = jax.nn.log_softmax(logits[:, -1] / self.temperature, axis=-1)  # [P, V]
            tok = jax.random.categorical(k, logp, axis=-1).astype(jnp.int32)  # [P]
            tok_logp = jnp.take_along_axis(logp, tok[:, None], axis=-1)[:, 0]
            live = ~done
            tok = jnp.where(live, tok, self.pad_id)
            nxt, cache = self.family.forward(base, self.config, tok[:, None], attention_mask=live[:, None],
                                             lora=lora, lora_scale=self.lora_scale, cache=cache)
            done = done | jnp.isin(tok, stops)
            return (nxt, cache, done), (tok, jnp.where(live, tok_logp, 0.0), live)

        keys = jax.random.split(key, self.max_new_tokens)
        _, (toks, logps, live) = jax.lax.scan(step, (logits, cache, jnp.zeros(p, bool)), keys)
        return toks.T, logps.T, live.T  # [P, L] each

    def generate(self, base, bank, agents, tokens, mask, keys):
        """Sample replies: `agents` int [R] (whose adapter), tokens/mask `[R, P, T]`, keys `[R]`.

        Returns (reply ids int32 [R, P, L], per-token log-probs [R, P, L], live mask [R, P, L]);
        generation of a row stops after its first stop token (which is kept).
        """
        toks, logps, live = self._generate(base, bank, jnp.asarray(agents, jnp.int32), tokens, mask, keys)
        return np.asarray(toks), np.asarray(logps), np.asarray(live)
