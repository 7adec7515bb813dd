"""The rollout engine: K joint episodes, asynchronous option decisions, one LLM call per step.

At every env step, every agent of every episode whose option has terminated needs a decision.
All of them are rendered (system + user message through the chat template), padded together and
sent to the backbone in ONE batched call, each row with its own agent's adapter (rows gather
their adapter from the bank). Each decision is recorded with its prompt tokens, reply tokens,
old log-prob, menu, agent and env step; each episode's team return is the sum of its team
rewards.

Games and action interfaces are `omjax.games.Game`s (`omjax.games.make_game`).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Callable

import jax
import numpy as np
from tqdm.auto import tqdm

from omjax.config import PolicyConfig
from omjax.games.base import Game
from omjax.models.inference import bucket
from omjax.options.menu import MenuItem
from omjax.prompts import Memory, format_reply, parse_reply, render_chat
from omjax.train.policy import LetterPolicy, SamplePolicy, letter_token_ids, pad_left, pow2_at_least, single_token_letters


@dataclasses.dataclass
class Decision:
    """One option decision of one agent."""

    rollout: int
    agent: int
    step: int
    prompt_ids: list[int]
    """Token ids the backbone read (chat template; in letter mode ending in `choice:`)."""
    reply_ids: list[int]
    """Token ids of the reply: the chosen letter's token (letter mode) or the sampled reply."""
    reply: str
    menu: list[MenuItem]
    action: int
    """Position of the executed entry in `menu` (after the parse-failure rule)."""
    logp: float
    """Log-prob of the reply under the adapter that collected it (the old policy)."""
    parsed: bool
    """False when a sampled reply named no menu letter and the failure rule chose instead."""


@dataclasses.dataclass
class RolloutBatch:
    """A round's K joint rollouts."""

    decisions: list[Decision]
    returns: np.ndarray
    """[K] team return of each rollout."""
    n_agents: int
    steps: int
    """Env steps per rollout."""

    def decision_counts(self) -> np.ndarray:
        """[A] decisions per agent over the K rollouts."""
        return np.bincount([d.agent for d in self.decisions], minlength=self.n_agents)

    def parse_failures(self) -> np.ndarray:
        """[A] unparsable replies per agent."""
        return np.bincount([d.agent for d in self.decisions if not d.parsed], minlength=self.n_agents)

    def call_ratio(self) -> float:
        """LLM decisions per agent-step (1.0 when every agent decides at every step)."""
        k = len(self.returns)
        return len(self.decisions) / max(k * self.steps * self.n_agents, 1)


@dataclasses.dataclass
class Request:
    """A pending decision: who decides, what they see."""

    rollout: int
    agent: int
    menu: list[MenuItem]
    prompt: str
    fallback: int
    parse: Callable[[str], int | None] | None = None
    """The game's own reply parser (menu position or None), e.g. compound-JSON; else the two-line one."""


class Decider:
    """Turns pending requests into menu positions with one batched backbone call."""

    def __init__(self, policy: LetterPolicy | SamplePolicy, tokenizer: Any, cfg: PolicyConfig):
        self.policy, self.tokenizer, self.cfg = policy, tokenizer, cfg
        self.pad_id = int(tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0)
        self._letter_ids: dict[str, int] = {}
        self._alphabet: list[str] = []

    def encode(self, text: str) -> list[int]:
        # The chat template already wrote every special token the model expects.
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def labelled(self, menu: list[MenuItem]) -> list[MenuItem]:
        """The menu as this policy shows it. Games letter entry k with `menu.letter(k)`; letter
        mode needs every letter to be one token, so past Z entry k takes the tokenizer's k-th
        single-token letter instead (`policy.single_token_letters`; A .. Z are unchanged)."""
        if not isinstance(self.policy, LetterPolicy) or len(menu) <= 26:
            return menu
        if len(self._alphabet) < len(menu):
            self._alphabet = single_token_letters(self.tokenizer, len(menu))
        return [it if it.letter == self._alphabet[k] else dataclasses.replace(it, letter=self._alphabet[k])
                for k, it in enumerate(menu)]

    def letter_ids(self, letters: list[str]) -> list[int]:
        missing = [l for l in letters if l not in self._letter_ids]
        if missing:
            self._letter_ids.update(zip(missing, letter_token_ids(self.tokenizer, missing)))
        return [self._letter_ids[l] for l in letters]

    def decide(self, base: Any, bank: Any, requests: list[Request], key: jax.Array,
               rng: np.random.Generator) -> list[tuple[int, list[int], list[int], str, float, bool]]:
        """(menu position, prompt ids, reply ids, reply text, old log-prob, parsed) per request."""
        prompts = [self.encode(r.prompt) for r in requests]
        rows = pow2_at_least(len(requests))
        length = bucket(max(len(p) for p in prompts), 64)
        tokens, mask = pad_left(prompts + [[]] * (rows - len(requests)), length, self.pad_id)
        agents = np.zeros(rows, np.int32)
        agents[: len(requests)] = [r.agent for r in requests]
        keys = jax.random.split(key, rows)
        if isinstance(self.policy, LetterPolicy):
            return self._letters(base, bank, agents, requests, prompts, tokens, mask, keys)
        return self._sample(base, bank, agents, requests, prompts, tokens, mask, keys, rng)

    def _letters(self, base, bank, agents, requests, prompts, tokens, mask, keys):
        rows = tokens.shape[0]
        width = pow2_at_least(max(len(r.menu) for r in requests), 8)
        letters = np.zeros((rows, width), np.int32)
        menu_mask = np.zeros((rows, width), bool)
        for j, r in enumerate(requests):
            letters[j, : len(r.menu)] = self.letter_ids([it.letter for it in r.menu])
            menu_mask[j, : len(r.menu)] = True
        menu_mask[len(requests):, 0] = True  # padding rows: a valid one-slot menu, output dropped
        inputs = {"tokens": tokens[:, None], "mask": mask[:, None], "letters": letters[:, None],
                  "menu_mask": menu_mask[:, None]}
        action, logp = self.policy.decide(base, bank, agents, inputs, keys)  # [rows, 1]
        out = []
        for j, r in enumerate(requests):
            a = int(action[j, 0])
            out.append((a, prompts[j], [int(letters[j, a])], r.menu[a].letter, float(logp[j, 0]), True))
        return out

    def _sample(self, base, bank, agents, requests, prompts, tokens, mask, keys, rng):
        toks, logps, live = self.policy.generate(base, bank, agents, tokens[:, None], mask[:, None], keys)
        out = []
        for j, r in enumerate(requests):
            n = int(live[j, 0].sum())
            reply_ids = [int(t) for t in toks[j, 0, :n]]
            text = self.tokenizer.decode(reply_ids, skip_special_tokens=True)
            if r.parse is not None:
                pos = r.parse(text)
            else:
                reply = parse_reply(text, [it.letter for it in r.menu])
                pos = None if reply is None else next(p for p, it in enumerate(r.menu) if it.letter == reply.choice)
            parsed = pos is not None
            if not parsed:
                pos = self._fallback(r, rng)
            out.append((pos, prompts[j], reply_ids, text, float(logps[j, 0, :n].sum()), parsed))
        return out


    def _fallback(self, r: Request, rng: np.random.Generator) -> int:
        """Menu position taken when a reply does not parse (config `on_parse_failure`)."""
        if self.cfg.on_parse_failure == "wait":
            return r.fallback
        if self.cfg.on_parse_failure == "first":
            return 0
        return int(rng.integers(len(r.menu)))


def episode_seed(seed: int, round_idx: int, rollout: int) -> int:
    """Seed of one training episode (initial state and letter shuffles), from the run seed."""
    return int(np.random.SeedSequence([seed, round_idx, rollout]).generate_state(1)[0])


def collect(game: Game, decider: Decider, base: Any, bank: Any, n_rollouts: int, key: jax.Array,
            seed: int, round_idx: int, progress: bool = False,
            on_step: Callable[[Game], None] | None = None, seeds: list[int] | None = None) -> RolloutBatch:
    """Run `n_rollouts` joint episodes under the current bank (Algorithm 1, lines 2-5);
    `on_step(game)` runs after every env step (the evaluation recorder). `seeds` (default:
    `episode_seed(seed, round_idx, k)`, the training seeds) fixes each episode's seed directly,
    so held-out evaluation seeds (10000, 10001, ...) can run as one batch."""
    cfg = decider.cfg
    if seeds is None:
        seeds = [episode_seed(seed, round_idx, k) for k in range(n_rollouts)]
    elif len(seeds) != n_rollouts:
        raise ValueError(f"seeds has {len(seeds)} entries for n_rollouts={n_rollouts}")
    game.reset(seeds)
    n = game.n_agents
    memories = [[Memory(cfg.memory_macros, cfg.reward_window) for _ in range(n)] for _ in range(n_rollouts)]
    letter_rngs = [[np.random.default_rng([s, i]) for i in range(n)] for s in seeds]
    fallback_rng = np.random.default_rng([seed, round_idx, 1 << 20])
    returns = np.zeros(n_rollouts)
    decisions: list[Decision] = []
    choices = np.zeros((n_rollouts, n), np.int32)
    system = game.system_message()
    bar = tqdm(range(game.horizon), desc=f"round {round_idx} rollouts", leave=False, disable=not progress)
    for t in bar:
        pending = np.argwhere(game.needs_decision())
        if len(pending):
            requests = []
            for k, i in pending:
                menu = decider.labelled(game.menu(int(k), int(i), letter_rngs[k][i]))
                if not menu:
                    raise RuntimeError(f"rollout {k}, agent {i}, step {t}: the menu is empty")
                user = game.user_message(int(k), int(i), menu, memories[k][i])
                prefix = format_reply(game.state_label(int(k), int(i))) if isinstance(decider.policy, LetterPolicy) else ""
                prompt = render_chat(decider.tokenizer, system, user, prefix)
                parse = functools.partial(game.parse_choice, int(k), int(i), menu)
                requests.append(Request(int(k), int(i), menu, prompt, game.fallback(int(k), int(i), menu), parse))
            results = decider.decide(base, bank, requests, jax.random.fold_in(key, t), fallback_rng)
            for req, (pos, prompt_ids, reply_ids, text, logp, parsed) in zip(requests, results):
                item = req.menu[pos]
                choices[req.rollout, req.agent] = item.index
                memories[req.rollout][req.agent].decided(item.opt)
                decisions.append(Decision(req.rollout, req.agent, t, prompt_ids, reply_ids, text, req.menu,
                                          pos, logp, parsed))
        reward = game.step(choices)
        if on_step is not None:
            on_step(game)
        returns += reward
        for k in range(n_rollouts):
            for i in range(n):
                memories[k][i].stepped(reward[k])
        bar.set_postfix(decisions=len(decisions), ret=f"{returns.mean():.1f}")
    bar.close()
    return RolloutBatch(decisions=decisions, returns=returns, n_agents=n, steps=game.horizon)


def decision_record(d: Decision, round_idx: int) -> dict:
    """The JSON-safe record of one decision written to `decisions/round_XXXX.jsonl`."""
    item = d.menu[d.action]
    return {
        "round": round_idx, "rollout": d.rollout, "agent": d.agent, "step": d.step,
        "option": item.opt, "target": list(item.target) if item.target is not None else None,
        "label": item.label, "letter": item.letter, "reply": d.reply, "parsed": d.parsed,
        "logp": d.logp, "n_prompt_tokens": len(d.prompt_ids), "reply_ids": d.reply_ids,
        "menu": [{"letter": it.letter, "option": it.opt, "label": it.label} for it in d.menu],
    }


# ------------------------------------------------------------------------------------------------
# Update batches


def update_inputs(decisions: list[Decision], policy: LetterPolicy | SamplePolicy, decider: Decider,
                  advantages: np.ndarray, n_groups: int, group_of: Callable[[Decision], int],
                  minibatch_size: int, min_rows: int = 0, min_tokens: int = 0) -> tuple[dict, np.ndarray, np.ndarray]:
    """Per-adapter padded decision arrays for the vmapped update.

    Decisions are grouped by adapter (`group_of`: the agent, or 0 under a shared adapter),
    valid rows first, and padded to one length B (at least `min_rows`, a multiple of
    `minibatch_size`, rounded to a power of two of minibatches so rounds reuse compiled
    programs) and one sequence length (at least `min_tokens`, on the `bucket` grid). Returns
    (inputs pytree of [G, B, ...], advantage [G, B], valid [G, B]).
    """
    groups: list[list[Decision]] = [[] for _ in range(n_groups)]
    for d in decisions:
        groups[group_of(d)].append(d)
    longest = max((len(g) for g in groups), default=0)
    b = minibatch_size * pow2_at_least(-(-max(longest, min_rows, 1) // minibatch_size))
    is_letter = isinstance(policy, LetterPolicy)
    seqs = [[d.prompt_ids if is_letter else d.prompt_ids + d.reply_ids for d in g] for g in groups]
    length = bucket(max(max((len(s) for g in seqs for s in g), default=1), min_tokens), 64)
    tokens = np.zeros((n_groups, b, length), np.int32)
    mask = np.zeros((n_groups, b, length), np.int32)
    adv = np.zeros((n_groups, b), np.float32)
    valid = np.zeros((n_groups, b), bool)
    for gi, g in enumerate(groups):
        if g:
            tokens[gi, : len(g)], mask[gi, : len(g)] = pad_left(seqs[gi], length, decider.pad_id)
        adv[gi, : len(g)] = [advantages[d.rollout] for d in g]
        valid[gi, : len(g)] = True
    if is_letter:
        width = pow2_at_least(max((len(d.menu) for d in decisions), default=1), 8)
        letters = np.zeros((n_groups, b, width), np.int32)
        menu_mask = np.zeros((n_groups, b, width), bool)
        action = np.zeros((n_groups, b), np.int32)
        menu_mask[:, :, 0] = True  # padding rows keep a one-slot menu so their softmax is finite
        for gi, g in enumerate(groups):
            for j, d in enumerate(g):
                letters[gi, j, : len(d.menu)] = decider.letter_ids([it.letter for it in d.menu])
                menu_mask[gi, j, : len(d.menu)] = True
                action[gi, j] = d.action
        inputs = {"tokens": tokens, "mask": mask, "letters": letters, "menu_mask": menu_mask, "action": action}
    else:
        reply_mask = np.zeros((n_groups, b, length), bool)
        for gi, g in enumerate(groups):
            for j, d in enumerate(g):
                if d.reply_ids:
                    reply_mask[gi, j, length - len(d.reply_ids):] = True
        inputs = {"tokens": tokens, "mask": mask, "reply_mask": reply_mask}
    return inputs, adv, valid
