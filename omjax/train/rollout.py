"""The rollout engine: K joint episodes, asynchronous option decisions, one LLM call per step.

At every env step, every agent of every episode whose option has terminated needs a decision.
All of them are rendered (system + user message through the chat template), padded together and
sent to the backbone in ONE batched call, each row with its own bank entry's adapter (rows
gather their adapter from the bank). The shared prefix of the prompts (the chat template's
header and the game's fixed system message) is prefilled once per round under every adapter
(`Decider.prefill`), so each decision runs only its own tokens on a copy of that cache. Each
decision is recorded with its prompt tokens, reply tokens, old log-prob, menu, agent and env
step; each episode's team return is the sum of its team rewards.

`collect_group` steps the K rollouts of several training seeds together: seed slot s owns
rollouts s*K .. s*K+K-1 of the game and adapters s*A .. s*A+A-1 of the bank, and every random
draw of a decision (its sampling key, its fallback) comes from its own seed, episode, agent and
step, so a seed's rollouts are those it would collect alone.

Rollouts may also play a segment of an episode (`train.segment`): each seed's K rollouts first
walk together from the reset state to a root state, `starts[s]` env steps of uniform-random menu
picks shared by all K, and then play `steps` steps under the policy from that common root, so the
cohort still compares K rollouts from one state.

Games and action interfaces are `omjax.games.Game`s (`omjax.games.make_game`).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
from tqdm.auto import tqdm

from omjax.config import PolicyConfig
from omjax.games.base import Game
from omjax.models import inference
from omjax.models.base import Trunk
from omjax.options.menu import MenuItem, letter as menu_letter
from omjax.prompts import Memory, format_reply, parse_reply, render_chat
from omjax.train.policy import Branches, LetterPolicy, SamplePolicy, assistant_prefix, make_branches, pack_branches
from omjax.train.sharding import Placement
from omjax.train.update import DecisionBatch

# The user turn's placeholder when rendering the template up to the user's text (the shared
# prefix), and user texts whose first characters could merge with the template's last tokens.
_USER = "\x00user\x00"
_PROBES = ("You are", "\n", " -", "[")


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
        if len(inference.letter_ids(tokenizer, candidate)) == 1:
            out.append(candidate)
        k += 1
    return out


@dataclasses.dataclass
class Decision:
    """One option decision of one agent."""

    rollout: int
    agent: int
    step: int
    """Env step of the decision within its rollout (from the rollout's start, `RolloutBatch.start`)."""
    prompt_ids: list[int]
    """Token ids the backbone read (chat template; in letter mode ending in `state:`, or in
    `choice:` under `policy.state_line=none`)."""
    reply_ids: list[int]
    """Token ids of the reply: the chosen branch and letter (letter mode) or the sampled reply."""
    reply: str
    menu: list[MenuItem]
    action: int
    """Position of the executed entry in `menu` (after the parse-failure rule)."""
    logp: float
    """Log-prob of the reply under the adapter that collected it (the old policy)."""
    parsed: bool
    """False when a sampled reply named no menu letter and the failure rule chose instead."""
    branches: Branches | None = None
    """Letter mode: the state branches the decision was scored over."""
    state: int = 0
    """Letter mode: the chosen branch (the model's state label)."""
    trunk: np.ndarray | None = None
    """float [len(prompt_ids) + branch tokens, D]: the frozen trunk's residual stream at the
    prompt's tokens, then at each state branch's tokens in order, when the rollout kept it
    (`collect(..., keep_trunk=True)`); the update starts from it instead of recomputing it."""
    snapshot: Any = None
    """(env state, executor state) of the decision's episode when it was asked, host pytrees,
    when the rollout kept them (`collect_group(..., snapshots=True)`; `Game.snapshot`)."""
    advantage: float | None = None
    """The decision's own advantage, where the credit plug-in credits decisions one by one
    (`train.credit: {kind: continuation}`; `update_inputs(advantages=None)`)."""
    option_advantages: np.ndarray | None = None
    """[len(menu)] the advantage of every entry of `menu`, where the credit gives them."""
    keys: list[str] | None = None
    """[len(menu)] the key the critic credited each entry under (`continuation.entry_keys`),
    written with the decision for the audits."""


@dataclasses.dataclass
class RolloutBatch:
    """A round's K joint rollouts."""

    decisions: list[Decision]
    rewards: np.ndarray
    """[K, T] team reward of each rollout at each of its env steps."""
    n_agents: int
    steps: int
    """Env steps per rollout (T)."""
    units: np.ndarray | None = None
    """[K] task units (deliveries, apples) each rollout earned in its T steps."""
    start: int = 0
    """Env step of the episode the rollouts started at (their common root; 0: the reset state).
    `Decision.step` counts from here."""

    @property
    def returns(self) -> np.ndarray:
        """[K] team return of each rollout."""
        return self.rewards.sum(axis=1)

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
    adapter: int = 0
    """Row of the adapter bank that decides (seed slot s, agent a: s*A + a)."""
    rng: np.random.Generator | None = None
    """Draws the menu position when a reply does not parse (`on_parse_failure: random`)."""
    branches: Branches | None = None
    """Letter mode: the state branches to score."""


@dataclasses.dataclass
class Outcome:
    """What the decider made of one request."""

    action: int
    prompt_ids: list[int]
    reply_ids: list[int]
    reply: str
    logp: float
    parsed: bool
    state: int = 0
    trunk: np.ndarray | None = None


@dataclasses.dataclass
class Prefix:
    """The shared prompt prefix of a round and its cache under every adapter of the bank."""

    ids: list[int]
    caches: Any
    """Cache pytree, leaves [bank entries, 1, ...] (`LetterPolicy.prefill`)."""
    trunk: np.ndarray | None = None
    """[len(ids), D] the prefix's frozen trunk (the same under every adapter), when decisions
    keep theirs."""


def letter_shape(menus: list[list[MenuItem]], branches: list[Branches]) -> tuple[int, int, int]:
    """(state branches, tokens per branch, menu slots) of a letter-mode batch; the widths are
    powers of two so batches of similar decisions share one compiled program."""
    n_labels = {len(b.tokens) for b in branches}
    if len(n_labels) != 1:
        raise ValueError(f"decisions of one batch score different numbers of state labels: {sorted(n_labels)}")
    return (n_labels.pop(), max(b.width for b in branches),
            inference.pow2_at_least(max(len(m) for m in menus), 8))


FIXED_TOKEN_GRID = 128
"""`policy.decide_shapes=fixed`: prompt lengths (after the shared prefix) round up to this grid."""


class Decider:
    """Turns pending requests into menu positions with one batched backbone call."""

    def __init__(self, policy: LetterPolicy | SamplePolicy, tokenizer: Any, cfg: PolicyConfig):
        self.policy, self.tokenizer, self.cfg = policy, tokenizer, cfg
        self.letter_mode = isinstance(policy, LetterPolicy)
        self.pad_id = int(tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0)
        self._letter_ids: dict[str, int] = {}
        self.placement = Placement([jax.devices()[0]])
        """Where a call's rows go: the trainer splits them over its devices."""
        self._alphabet: list[str] = []
        self._branches: dict[tuple, Branches] = {}
        self._prefix_ids: dict[str, list[int]] = {}
        mode = cfg.decide_shapes
        on_accelerator = jax.default_backend() != "cpu"
        self.fixed_shapes = self.letter_mode and (mode == "fixed" or (mode == "auto" and on_accelerator))
        """`policy.decide_shapes` resolved: letter-mode calls at the run's high-water shapes."""
        self.high_water = (0, 0, 0, 0)
        """`fixed_shapes`: (rows, prompt tokens, branch width, menu width) the calls so far were padded to."""

    def encode(self, text: str) -> list[int]:
        return inference.encode(self.tokenizer, text)

    def prompt(self, system: str, user: str) -> str:
        """The text the backbone reads for one decision (letter mode: up to the scored part)."""
        reply_start = assistant_prefix(self.cfg.state_line) if self.letter_mode else ""
        return render_chat(self.tokenizer, system, user, reply_start)

    def prefix_ids(self, system: str) -> list[int]:
        """Tokens every prompt with this system message starts with: the template up to the
        user's text, less any tail token that merges with what follows it (probed with a few
        user texts; `inference.strip_prefix` checks every real prompt)."""
        if system not in self._prefix_ids:
            head, sep, _ = render_chat(self.tokenizer, system, _USER).partition(_USER)
            if not sep:
                raise ValueError("the chat template does not show the user's text verbatim")
            ids = self.encode(head)
            for probe in _PROBES:
                full = self.encode(render_chat(self.tokenizer, system, probe))
                n = next((j for j, (a, b) in enumerate(zip(ids, full)) if a != b), min(len(ids), len(full)))
                ids = ids[:n]
            self._prefix_ids[system] = ids
        return self._prefix_ids[system]

    def known_prefix(self, prompts: Sequence[Sequence[int]]) -> list[int]:
        """The longest shared prefix this decider has cached (`prefix_ids` of a system message
        seen) that every one of `prompts` starts with and outruns; [] when none does."""
        best: list[int] = []
        for ids in self._prefix_ids.values():
            n = len(ids)
            if n > len(best) and prompts and all(len(p) > n and list(p[:n]) == ids for p in prompts):
                best = ids
        return best

    def prefill(self, base: Any, bank: Any, system: str, keep_trunk: bool = False) -> Prefix:
        """The shared prefix of every prompt under `system`, prefilled under each adapter of
        `bank`: valid for decisions taken with this bank (with `keep_trunk`, also the prefix's
        frozen trunk, which decisions that keep theirs start with)."""
        ids = self.prefix_ids(system)
        return Prefix(ids, self.policy.prefill(base, bank, ids),
                      self.policy.prefix_trunk(base, ids) if keep_trunk else None)

    def branches(self, labels: tuple[str | None, ...]) -> Branches:
        """The tokenised state branches of `labels` (cached: a game has one label set)."""
        if labels not in self._branches:
            self._branches[labels] = make_branches(self.tokenizer, labels)
        return self._branches[labels]

    def state_branches(self, game: Game, k: int, agent: int) -> Branches:
        """What the configured `policy.state_line` scores for one decision."""
        line = self.cfg.state_line
        if line == "model":
            return self.branches(tuple(game.state_labels()))
        if line == "oracle":
            return self.branches((game.state_label(k, agent),))
        return self.branches((None,))

    def labelled(self, menu: list[MenuItem]) -> list[MenuItem]:
        """The menu as this policy shows it. Games letter entry k with `menu.letter(k)`; letter
        mode needs every letter to be one token, so past Z entry k takes the tokenizer's k-th
        single-token letter instead (`single_token_letters`; A .. Z are unchanged)."""
        if not self.letter_mode or len(menu) <= 26:
            return menu
        if len(self._alphabet) < len(menu):
            self._alphabet = single_token_letters(self.tokenizer, len(menu))
        return [it if it.letter == self._alphabet[k] else dataclasses.replace(it, letter=self._alphabet[k])
                for k, it in enumerate(menu)]

    def letter_ids(self, letters: list[str]) -> list[int]:
        missing = [l for l in letters if l not in self._letter_ids]
        if missing:
            self._letter_ids.update(zip(missing, inference.letter_token_ids(self.tokenizer, missing)))
        return [self._letter_ids[l] for l in letters]

    def _fixed_shape(self, seqs: list[list[int]], requests: list[Request], capacity: int) -> tuple[int, int, tuple]:
        """(rows, prompt length, letter shape) of a `fixed_shapes` call: the high-water marks,
        raised to what these requests need (rows to every decision the step could hold)."""
        n_labels, width, menu = letter_shape([r.menu for r in requests], [r.branches for r in requests])
        rows = inference.pow2_at_least(max(capacity, len(requests)))
        length = -(-max(map(len, seqs)) // FIXED_TOKEN_GRID) * FIXED_TOKEN_GRID
        self.high_water = tuple(max(a, b) for a, b in zip(self.high_water, (rows, length, width, menu)))
        rows, length, width, menu = self.high_water
        return rows, length, (n_labels, width, menu)

    def decide(self, base: Any, bank: Any, requests: list[Request], keys: jax.Array,
               prefix: Prefix | None = None, keep_trunk: bool = False, capacity: int = 0) -> list[Outcome]:
        """One outcome per request; `keys` [len(requests)] are the requests' own sampling keys.
        With `prefix` (from `prefill` under this `bank`) each prompt runs after the cached
        prefix; without, whole; the decisions are the same. `keep_trunk` (letter mode, a policy
        that `keeps_trunk`; `prefix` from `prefill(..., keep_trunk=True)`) also returns each
        decision's frozen trunk (`Outcome.trunk`). Rows are padded to a power of two
        and lengths to the `inference.bucket` grid: every new shape compiles the whole backbone
        (tens of seconds on a CPU), so a round's calls share few shapes, while a row wastes at
        most a quarter of its compute on padding. In letter mode, prompts of very different
        lengths go to the backbone in up to four calls (`inference.length_groups`). Under
        `fixed_shapes` (`policy.decide_shapes`) there is one call, at the high-water shapes
        (`capacity`: the most requests a call of this run can hold)."""
        prompts = [self.encode(r.prompt) for r in requests]
        seqs = prompts if prefix is None else inference.strip_prefix(prompts, prefix.ids)
        caches = None if prefix is None else prefix.caches
        if keep_trunk and not self.letter_mode:
            raise ValueError("keep_trunk needs letter mode: sampled replies are scored on tokens the decision "
                             "loop generates one at a time")
        head = None
        if keep_trunk:
            head = np.zeros((0, 0), np.float32) if prefix is None else prefix.trunk
            if head is None:
                raise ValueError("keep_trunk needs the prefix's trunk: Decider.prefill(..., keep_trunk=True)")
        # Sample mode stays one call: its generation loop streams every weight once per token.
        extra = max(len(r.branches.tokens) * r.branches.width for r in requests) if self.letter_mode else 0
        shape = None
        if self.fixed_shapes:
            groups = [np.arange(len(seqs))]
            fixed_rows, length, shape = self._fixed_shape(seqs, requests, capacity)
        elif self.letter_mode:
            groups = inference.length_groups([len(s) for s in seqs], extra)
        else:
            groups = [np.arange(len(seqs))]
        out: list[Outcome | None] = [None] * len(requests)
        for group in groups:
            rows = fixed_rows if shape else inference.pow2_at_least(len(group))
            tokens, mask = inference.left_pad([seqs[j] for j in group], length if shape else None, pad_id=self.pad_id,
                                              rows=rows)
            index = np.zeros(rows, np.int32)
            index[: len(group)] = [requests[j].adapter for j in group]
            sub_keys = _pad_keys(keys[jnp.asarray(group)], rows)
            if self.letter_mode:
                done = self._letters(base, bank, index, [requests[j] for j in group], [prompts[j] for j in group],
                                     tokens, mask, sub_keys, caches, head, shape)
            else:
                done = self._sample(base, bank, index, [requests[j] for j in group], [prompts[j] for j in group],
                                    tokens, mask, sub_keys, caches)
            for j, o in zip(group, done):
                out[j] = o
        return out

    def letter_inputs(self, menus: list[list[MenuItem]], branches: list[Branches], tokens: np.ndarray,
                      mask: np.ndarray, shape: tuple[int, int, int] | None = None) -> dict:
        """Letter-mode arrays `[N, ...]` of left-padded prompts `tokens`/`mask` [N, T] (N >= the
        number of menus; the rest are padding rows): the prompts with their branch blocks,
        `label_mask`, `end`, `letters`, `menu_mask`. `shape` (labels, branch width, menu width)
        defaults to what these decisions need."""
        n_labels, width, menu_width = shape or letter_shape(menus, branches)
        rows = tokens.shape[0]
        block, segments, label_mask, end = pack_branches(branches, rows, n_labels, width, self.pad_id)
        letters = np.zeros((rows, menu_width), np.int32)
        menu_mask = np.zeros((rows, menu_width), bool)
        menu_mask[:, 0] = True  # padding rows keep a one-slot menu so their softmax is finite
        for j, menu in enumerate(menus):
            letters[j, : len(menu)] = self.letter_ids([it.letter for it in menu])
            menu_mask[j, : len(menu)] = True
        return {"tokens": np.concatenate([tokens, block], axis=1), "mask": np.concatenate([mask, segments], axis=1),
                "label_mask": label_mask, "end": end, "letters": letters, "menu_mask": menu_mask}

    def _letters(self, base, bank, index, requests, prompts, tokens, mask, keys, caches, head, shape=None):
        """`head`: None, or the prefix's trunk [S, D] (then each outcome keeps its trunk);
        `shape`: the letter shape to pad to (default: what these requests need)."""
        branches = [r.branches for r in requests]
        inputs = self.letter_inputs([r.menu for r in requests], branches, tokens, mask, shape)
        width = inputs["label_mask"].shape[2]
        inputs = {name: x[:, None] for name, x in inputs.items()}  # one decision per row
        state, action, logp, hidden = self.policy.decide(  # [rows, 1], hidden [rows, 1, T + L*W, D]
            base, bank, *self.placement.split((index, inputs, keys)), caches, keep_trunk=head is not None)
        t = tokens.shape[1]
        out = []
        for j, r in enumerate(requests):
            s, a = int(state[j, 0]), int(action[j, 0])
            b = branches[j]
            letter = r.menu[a].letter
            trunk = None
            if head is not None:  # the prefix's, then this row's prompt (no left padding), then each branch's tokens
                rest = len(prompts[j]) - len(head)
                parts = [head, hidden[j, 0, t - rest: t]]
                parts += [hidden[j, 0, t + l * width: t + l * width + len(ids)] for l, ids in enumerate(b.tokens)]
                trunk = np.concatenate([x.reshape(-1, hidden.shape[-1]) for x in parts])
            out.append(Outcome(a, prompts[j], list(b.tokens[s]) + self.letter_ids([letter]),
                               format_reply(b.labels[s], letter), float(logp[j, 0]), True, s, trunk))
        return out

    def _sample(self, base, bank, index, requests, prompts, tokens, mask, keys, caches):
        toks, logps, live = self.policy.generate(
            base, bank, *self.placement.split((index, tokens[:, None], mask[:, None], keys)), caches)
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
                pos = self._fallback(r)
            out.append(Outcome(pos, prompts[j], reply_ids, text, float(logps[j, 0, :n].sum()), parsed))
        return out

    def _fallback(self, r: Request) -> int:
        """Menu position taken when a reply does not parse (config `on_parse_failure`)."""
        if self.cfg.on_parse_failure == "wait":
            return r.fallback
        if self.cfg.on_parse_failure == "first":
            return 0
        if r.rng is None:
            raise ValueError("on_parse_failure=random needs the request's rng")
        return int(r.rng.integers(len(r.menu)))


def episode_seed(seed: int, round_idx: int, rollout: int) -> int:
    """Seed of one training episode (initial state and letter shuffles), from the run seed."""
    return int(np.random.SeedSequence([seed, round_idx, rollout]).generate_state(1)[0])


def burnin_seed(seed: int, episode: int) -> int:
    """Seed of the critic's burn-in episode `episode` (`train.credit.burnin`), from the run seed:
    a stream apart from `episode_seed`'s (a 32-bit draw, as theirs)."""
    return int(np.random.SeedSequence([seed, episode], spawn_key=(1,)).generate_state(1)[0])


@functools.partial(jax.jit, static_argnums=1)
def _pad_keys(keys: jax.Array, rows: int) -> jax.Array:
    """[n] request keys -> [rows] (padding rows reuse the first key; their output is dropped)."""
    return jnp.concatenate([keys, jnp.broadcast_to(keys[:1], (rows - keys.shape[0],) + keys.shape[1:])])


@jax.jit
def _decision_keys(seed_keys: jax.Array, slot: jax.Array, rollout: jax.Array, agent: jax.Array,
                   t: jax.Array) -> jax.Array:
    """Sampling key of each pending decision, from its seed's round key [S] (by `slot` [R]), its
    rollout within the seed, its agent and the env step: independent of what else is batched."""
    one = lambda k, r, a: jax.random.fold_in(jax.random.fold_in(jax.random.fold_in(k, t), r), a)
    return jax.vmap(one)(seed_keys[slot], rollout, agent)


def segment_start(seed: int, round_idx: int, horizon: int, segment: int) -> int:
    """Env step at which a seed's rollouts of one round start under `train.segment` = `segment`
    (> 0): uniform over [0, horizon - segment], from the run seed and the round."""
    if not 0 < segment <= horizon:
        raise ValueError(f"a segment must have 1 .. {horizon} (the horizon) steps, got {segment}")
    return int(np.random.default_rng([seed, round_idx, 1 << 23]).integers(horizon - segment + 1))


def segment_plan(starts: list[int] | np.ndarray, cohort: int, horizon: int,
                 steps: int | None = None) -> tuple[np.ndarray, int]:
    """Each episode's root step [len(starts) x cohort] (cohort b's episodes b*cohort .. start at
    `starts[b]`) and the steps every episode plays from its root (default: up to the horizon
    from the latest root); refuses segments that do not fit the episodes."""
    starts = np.asarray(starts, np.int64).reshape(-1)
    steps = horizon - int(starts.max(initial=0)) if steps is None else int(steps)
    if not len(starts) or steps < 1 or starts.min() < 0 or starts.max() + steps > horizon:
        raise ValueError(f"segments of {steps} steps from {starts.tolist()} do not fit {horizon}-step episodes")
    return np.repeat(starts, cohort), steps


def walk_rng(seed: int, round_idx: int) -> np.random.Generator:
    """The stream a seed's segment walk to its root draws from in one round (`walk_entry`)."""
    return np.random.default_rng([seed, round_idx, 1 << 22])


def walk_entry(menu: list[MenuItem], rng: np.random.Generator) -> MenuItem:
    """The entry a segment's walk to its root takes from `menu`: uniform over the entries in
    option-index order, not the shuffled letter order, so the episodes of a cohort, in one state
    and drawing once from one stream, take the same one."""
    entries = sorted(menu, key=lambda it: it.index)
    return entries[int(rng.integers(len(entries)))]


def collect(game: Game, decider: Decider, base: Any, bank: Any, n_rollouts: int, key: jax.Array,
            seed: int, round_idx: int, progress: bool = False,
            on_step: Callable[[Game], None] | None = None, episodes: list[int] | None = None,
            keep_trunk: bool = False) -> RolloutBatch:
    """Run `n_rollouts` joint episodes under the current bank (Algorithm 1, lines 2-5);
    `on_step(game)` runs after every env step (the evaluation recorder). `episodes` (default:
    `episode_seed(seed, round_idx, k)`, the training seeds) sets each episode's seed directly,
    so held-out evaluation seeds (10000, 10001, ...) can run as one batch. `keep_trunk`: each
    decision keeps its frozen trunk for the update (`Decision.trunk`)."""
    n_adapters = jax.tree.leaves(bank)[0].shape[0]
    return collect_group(game, decider, base, bank, n_rollouts, key[None], [seed], round_idx, n_adapters,
                         progress, on_step, episodes, keep_trunk)[0]


def collect_group(game: Game, decider: Decider, base: Any, bank: Any, n_rollouts: int, keys: jax.Array,
                  seeds: list[int], round_idx: int, adapters_per_seed: int, progress: bool = False,
                  on_step: Callable[[Game], None] | None = None,
                  episodes: list[int] | None = None, keep_trunk: bool = False,
                  starts: list[int] | None = None,
                  steps: int | None = None, snapshots: bool = False) -> list[RolloutBatch]:
    """The K = `n_rollouts` joint episodes of every seed, stepped together (one batched backbone
    call per env step over all seeds' pending decisions); the game runs S x K episodes, `keys`
    [S] are the seeds' round keys and `bank` their S x `adapters_per_seed` adapters. Returns one
    `RolloutBatch` per seed, its rollouts numbered 0 .. K-1. `episodes` [S x K] overrides the
    episode seeds (default `episode_seed(seed, round_idx, k)`); `keep_trunk` as in `collect`.

    `starts` [S] and `steps` play segments (module docstring): seed slot s's K episodes reach
    their root with `starts[s]` steps of walking picks (uniform over the menu's entries, drawn
    once per agent and step from the seed and round, so all K take the same ones and the memory
    of the prompts records them), then play `steps` policy steps (default: to the horizon) whose
    rewards, decisions and task units are the rollouts'. Only games whose K episodes of a slot
    start in one state can share a root (Overcooked); the caller checks. Defaults: every slot
    starts at the reset state and plays the whole episode.

    `snapshots`: each decision keeps its episode's state when it was asked (`Decision.snapshot`)."""
    cfg = decider.cfg
    n_seeds, n = len(seeds), game.n_agents
    total = n_seeds * n_rollouts
    if starts is not None and len(starts) != n_seeds:
        raise ValueError(f"{len(starts)} segment starts for {n_seeds} seed(s)")
    # [S * K] each episode's root step
    start_of, steps = segment_plan([0] * n_seeds if starts is None else starts, n_rollouts, game.horizon, steps)
    if episodes is None:
        episodes = [episode_seed(s, round_idx, k) for s in seeds for k in range(n_rollouts)]
    elif len(episodes) != total:
        raise ValueError(f"episodes has {len(episodes)} seeds for {n_seeds} x {n_rollouts} rollouts")
    game.reset(episodes)
    memories = [[Memory(cfg.memory_macros, cfg.reward_window) for _ in range(n)] for _ in range(total)]
    letter_rngs = [[np.random.default_rng([e, i]) for i in range(n)] for e in episodes]
    fallback_rngs = [np.random.default_rng([s, round_idx, 1 << 20]) for s in seeds]
    walk_rngs = [walk_rng(s, round_idx) for s in seeds]
    rewards = np.zeros((total, steps))
    units = np.zeros(total)
    decisions: list[list[Decision]] = [[] for _ in seeds]
    choices = np.zeros((total, n), np.int32)
    system = game.system_message()
    # Once per adapter version: the bank is fixed until the update.
    prefix = decider.prefill(base, bank, system, keep_trunk)
    bar = tqdm(range(int(start_of.max()) + steps), desc=f"round {round_idx} rollouts", leave=False,
               disable=not progress)
    for t in bar:
        if (start_of == t).any():
            units[start_of == t] -= game.agent_returns().sum(axis=-1)[start_of == t]
        pending = np.argwhere(game.needs_decision())
        walk: dict[tuple[int, int], MenuItem] = {}  # (slot, agent) -> the entry all K episodes take
        requests = []
        if len(pending):
            for k, i in pending:
                k, i = int(k), int(i)
                slot = k // n_rollouts
                if not start_of[k] <= t < start_of[k] + steps:
                    # Walking to the root (one draw per slot and agent: the slot's K states are
                    # equal), or past the segment's end (idling until the other slots' end).
                    full = game.menu(k, i, letter_rngs[k][i])
                    if t >= start_of[k]:
                        choices[k, i] = full[game.fallback(k, i, full)].index
                        continue
                    if (slot, i) not in walk:
                        walk[(slot, i)] = walk_entry(full, walk_rngs[slot])
                    item = walk[(slot, i)]
                    choices[k, i] = item.index
                    memories[k][i].decided(item.opt)
                    continue
                menu = decider.labelled(game.menu(k, i, letter_rngs[k][i]))
                if not menu:
                    raise RuntimeError(f"rollout {k}, agent {i}, step {t}: the menu is empty")
                prompt = decider.prompt(system, game.user_message(k, i, menu, memories[k][i]))
                parse = functools.partial(game.parse_choice, k, i, menu)
                # A shared adapter (one per seed) serves every agent: agent % 1 == 0.
                requests.append(Request(k, i, menu, prompt, game.fallback(k, i, menu), parse,
                                        adapter=slot * adapters_per_seed + i % adapters_per_seed,
                                        rng=fallback_rngs[slot],
                                        branches=decider.state_branches(game, k, i) if decider.letter_mode else None))
        if requests:
            asked = np.array([(r.rollout, r.agent) for r in requests])  # [R, 2]
            keys_t = _decision_keys(keys, jnp.asarray(asked[:, 0] // n_rollouts, jnp.int32),
                                    jnp.asarray(asked[:, 0] % n_rollouts, jnp.int32),
                                    jnp.asarray(asked[:, 1], jnp.int32), jnp.int32(t))
            results = decider.decide(base, bank, requests, keys_t, prefix, keep_trunk, capacity=total * n)
            for req, out in zip(requests, results):
                item = req.menu[out.action]
                choices[req.rollout, req.agent] = item.index
                memories[req.rollout][req.agent].decided(item.opt)
                slot, local = divmod(req.rollout, n_rollouts)
                step = t - int(start_of[req.rollout])
                decisions[slot].append(Decision(local, req.agent, step, out.prompt_ids, out.reply_ids, out.reply,
                                                req.menu, out.action, out.logp, out.parsed, req.branches, out.state,
                                                out.trunk, game.snapshot(req.rollout) if snapshots else None))
        reward = game.step(choices)
        if on_step is not None:
            on_step(game)
        playing = (start_of <= t) & (t < start_of + steps)  # [S * K]
        rewards[playing, t - start_of[playing]] = reward[playing]
        ended = start_of + steps == t + 1
        if ended.any():
            units[ended] += game.agent_returns().sum(axis=-1)[ended]
        for k in range(total):
            for i in range(n):
                memories[k][i].stepped(reward[k])
        bar.set_postfix(decisions=sum(map(len, decisions)), ret=f"{rewards.sum(axis=1).mean():.1f}")  # steps ahead are 0
    bar.close()
    return [RolloutBatch(decisions=decisions[s], rewards=rewards[s * n_rollouts:(s + 1) * n_rollouts],
                         n_agents=n, steps=steps, units=units[s * n_rollouts:(s + 1) * n_rollouts],
                         start=int(start_of[s * n_rollouts])) for s in range(n_seeds)]


def decision_record(d: Decision, round_idx: int) -> dict:
    """The JSON-safe record of one decision written to `decisions/round_XXXX.jsonl`."""
    item = d.menu[d.action]
    return {
        "round": round_idx, "rollout": d.rollout, "agent": d.agent, "step": d.step,
        "option": item.opt, "target": list(item.target) if item.target is not None else None,
        "label": item.label, "letter": item.letter, "reply": d.reply, "parsed": d.parsed,
        "state": d.branches.labels[d.state] if d.branches is not None else None,
        "logp": d.logp, "n_prompt_tokens": len(d.prompt_ids), "reply_ids": d.reply_ids,
        "menu": [{"letter": it.letter, "option": it.opt, "label": it.label} for it in d.menu],
        **({"keys": d.keys} if d.keys is not None else {}),
    }


# ------------------------------------------------------------------------------------------------
# Update batches


def update_inputs(decisions: list[Decision], policy: LetterPolicy | SamplePolicy, decider: Decider,
                  advantages: np.ndarray | None, n_groups: int, group_of: Callable[[Decision], int],
                  minibatch_size: int, min_rows: int = 0, min_tokens: int = 0) -> DecisionBatch:
    """Per-adapter padded decision arrays for the vmapped update: a `DecisionBatch` of
    [G, B, ...] leaves.

    Decisions are grouped by adapter (`group_of`: the agent, or 0 under a shared adapter),
    valid rows first, and padded to one length B (at least `min_rows`, a multiple of
    `minibatch_size`, rounded to a power of two of minibatches so rounds reuse compiled
    programs) and one sequence length (at least `min_tokens`, on the `bucket` grid). The old
    log-prob of each decision is the one the rollout drew it with (`Decision.logp`). When every
    decision kept its frozen trunk (`Decision.trunk`), the inputs carry it (`inputs["trunk"]`,
    laid out as the tokens are) and the update does not recompute it. Otherwise, in letter mode
    where the policy allows it (`LetterPolicy.update_prefix`), each adapter's rows carry the
    shared prompt prefix they all start with (`Decider.known_prefix`) as `prefix_tokens`/
    `prefix_mask` [G, B, S] (every row of a group the same) and `tokens` only what follows it,
    so the update runs the prefix once per minibatch instead of in every row (`min_tokens`
    then counts the prefix's S columns).

    `advantages` is [R] (one per rollout: `decision.rollout` indexes it; the cohort credit) or
    None (each decision's own `Decision.advantage`). When every decision carries the advantage
    of each menu entry (`Decision.option_advantages`, letter mode), the batch does too
    (`DecisionBatch.option_advantage` [G, B, menu slots]).
    """
    if advantages is None:
        if any(d.advantage is None for d in decisions):
            raise ValueError("advantages=None takes each decision's own advantage, but some have none")
    elif advantages.ndim != 1:
        raise ValueError(f"advantages must be [rollouts], got shape {advantages.shape}")
    own = advantages is None
    groups: list[list[Decision]] = [[] for _ in range(n_groups)]
    for d in decisions:
        groups[group_of(d)].append(d)
    longest = max((len(g) for g in groups), default=0)
    b = minibatch_size * inference.pow2_at_least(-(-max(longest, min_rows, 1) // minibatch_size))
    is_letter = isinstance(policy, LetterPolicy)
    seqs = [[d.prompt_ids if is_letter else d.prompt_ids + d.reply_ids for d in g] for g in groups]
    kept = is_letter and bool(decisions) and all(d.trunk is not None for d in decisions)
    # Each adapter's rows share their prompts' prefix (the chat template and system message):
    # the update runs it once per minibatch (`LetterPolicy.policy_fn`), the rows only what follows.
    prefixes = [decider.known_prefix(g) if is_letter and policy.update_prefix and not kept else [] for g in seqs]
    filled = [p for p, g in zip(prefixes, seqs) if g]
    if filled and all(filled):
        prefixes = [p if g else filled[0] for p, g in zip(prefixes, seqs)]  # empty groups: any real prefix
        seqs = [[s[len(p):] for s in g] for p, g in zip(prefixes, seqs)]
        head = inference.bucket(max(len(p) for p in prefixes))
    else:
        prefixes, head = None, 0
    length = inference.bucket(max(max((len(s) for g in seqs for s in g), default=1), min_tokens - head), 64)
    adv = np.zeros((n_groups, b), np.float32)
    old = np.zeros((n_groups, b), np.float32)
    valid = np.zeros((n_groups, b), bool)
    shape = letter_shape([d.menu for d in decisions], [d.branches for d in decisions]) if is_letter else None
    all_options = is_letter and bool(decisions) and all(d.option_advantages is not None for d in decisions)
    option_adv = np.zeros((n_groups, b, shape[2]), np.float32) if all_options else None
    per_group = []
    for gi, g in enumerate(groups):
        tokens, mask = inference.left_pad(seqs[gi], length, decider.pad_id, rows=b)
        adv[gi, : len(g)] = [d.advantage if own else advantages[d.rollout] for d in g]
        old[gi, : len(g)] = [d.logp for d in g]
        for j, d in enumerate(g if all_options else ()):
            option_adv[gi, j, : len(d.menu)] = d.option_advantages
        valid[gi, : len(g)] = True
        if is_letter:
            one = decider.letter_inputs([d.menu for d in g], [d.branches for d in g], tokens, mask, shape)
            one["state"] = np.array([d.state for d in g] + [0] * (b - len(g)), np.int32)
            one["action"] = np.array([d.action for d in g] + [0] * (b - len(g)), np.int32)
            if kept:
                one["trunk"] = _trunk_rows(g, b, length, shape[1])
            if prefixes is not None:
                one["prefix_tokens"], one["prefix_mask"] = inference.left_pad([prefixes[gi]] * b, head, decider.pad_id)
        else:
            one = {"tokens": tokens, "mask": mask, "reply_mask": np.zeros((b, length), bool)}
            for j, d in enumerate(g):
                if d.reply_ids:
                    one["reply_mask"][j, length - len(d.reply_ids):] = True
        per_group.append(one)
    inputs = {name: np.stack([one[name] for one in per_group]) for name in per_group[0]}
    if kept:
        inputs["trunk"] = Trunk(hidden=inputs["trunk"], extras={}, n_layers=policy.frozen_layers)
    return DecisionBatch(inputs=inputs, advantage=adv, valid=valid, old_logp=old, option_advantage=option_adv)


def _trunk_rows(group: list[Decision], rows: int, length: int, width: int) -> np.ndarray:
    """[rows, length + L*W, D] the kept trunks of `group` laid out as `letter_inputs` lays out
    their tokens: each prompt left-padded to `length`, branch l's tokens from column
    `length + l*W`; zeros on padding (which no real token attends to)."""
    first = group[0]
    n_labels, dim = len(first.branches.tokens), first.trunk.shape[-1]
    out = np.zeros((rows, length + n_labels * width, dim), first.trunk.dtype)
    for j, d in enumerate(group):
        n = len(d.prompt_ids)
        out[j, length - n: length] = d.trunk[:n]
        at = n
        for l, ids in enumerate(d.branches.tokens):
            out[j, length + l * width: length + l * width + len(ids)] = d.trunk[at: at + len(ids)]
            at += len(ids)
        if at != len(d.trunk):
            raise ValueError(f"a kept trunk has {len(d.trunk)} rows, its prompt and branches {at} tokens")
    return out
