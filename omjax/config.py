"""Typed run configuration shared by `omjax train` and `omjax eval`.

A run is described by one YAML file whose top-level sections map onto the dataclasses below
(`model`, `lora`, `env`, `policy`, `train`, `run`). Every field has a default, a type, and a
docstring; values are validated when the dataclass is built, so a bad file fails before any model
is loaded. A YAML file may start from another one with `base: other.yaml` (resolved relative to
the file), and any leaf can be overridden on the command line as `section.key=value`.

    cfg = load_config("configs/overcooked_aa_qwen3-4b.yaml", ["train.rounds=3", "seed=1"])
"""

from __future__ import annotations

import dataclasses
import types
import typing
from pathlib import Path
from typing import Any, Literal

import yaml


class ConfigError(ValueError):
    """A configuration file or override that cannot describe a valid run."""


EXIT_ERROR = 2
"""Exit code of a command stopped by a ConfigError or another error the user can fix."""


def _check(cond: bool, key: str, msg: str) -> None:
    if not cond:
        raise ConfigError(f"{key}: {msg}")


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    name: str = "smollm2-135m"
    """Backbone passed to `omjax.models.load`: a registered name or a local checkpoint path."""

    dtype: Literal["float32", "bfloat16"] = "float32"
    """Dtype of the frozen base weights and activations; LoRA leaves stay float32."""

    def __post_init__(self) -> None:
        _check(bool(self.name), "model.name", "must name a backbone")


LORA_TARGETS = ("q", "k", "v", "o", "gate", "up", "down")
"""Projections of a decoder layer that can carry an adapter; every model family has all seven
(Gemma 4 layers that share another layer's KV cache have no k or v)."""


@dataclasses.dataclass(frozen=True)
class LoRAConfig:
    """Adapter hyper-parameters: the `lora` section of a run, and the static (hashable) LoRA
    configuration `omjax.models.lora` builds and applies adapters from."""

    rank: int = 16
    """Rank r of every adapter (paper: 16 on Overcooked, 32 on Cleanup and Commons Harvest)."""

    alpha: float = 32.0
    """LoRA scale numerator: the adapter delta is multiplied by alpha / rank."""

    targets: tuple[str, ...] = ("q", "k", "v", "o")
    """Projections of each decoder layer that get an adapter (among q k v o gate up down). A is
    drawn from the seed and B starts at zero, so a fresh adapter is exactly the base model."""

    top_layers: int = 0
    """Put adapters only on the last n decoder layers (0: every layer). Gradients then stop at
    the lowest adapted layer, which makes CPU updates cheaper."""

    scope: Literal["all", "reply"] = "all"
    """Which tokens the adapter acts on. `all`: every token, prompt included (the paper).
    `reply` (letter mode): only the reply's tokens; the prompt's keys and values are the frozen
    base's, so the update runs the prompt forward once without gradients and back-propagates
    through the reply's few tokens only (several times cheaper per decision), and a round's
    prompt-prefix cache is shared by all adapters. The reply's first token is then predicted by
    the base alone (its distribution is the base's); every later token, the letter included,
    is adapted."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "targets", tuple(self.targets))
        _check(self.top_layers >= 0, "lora.top_layers", f"must be >= 0, got {self.top_layers}")
        _check(self.rank >= 1, "lora.rank", f"must be >= 1, got {self.rank}")
        _check(self.alpha > 0, "lora.alpha", f"must be > 0, got {self.alpha}")
        _check(len(self.targets) > 0, "lora.targets", "must name at least one projection")
        bad = [t for t in self.targets if t not in LORA_TARGETS]
        _check(not bad, "lora.targets", f"unknown LoRA targets {bad}; known: {', '.join(LORA_TARGETS)}")
        _check(len(set(self.targets)) == len(self.targets), "lora.targets", f"names a projection twice: {list(self.targets)}")

    @property
    def scale(self) -> float:
        """alpha / rank, the factor of every adapter delta."""
        return self.alpha / self.rank


GAMES = ("overcooked", "cleanup", "harvest")
LIBRARY_CHOICES = ("", "sampled", "lib_a", "lib_b")
#: How a menu line is written (`env.menu_format`, `omjax.options.menu.render_menu`).
MENU_FORMATS = ("letter_first", "letter_last")


@dataclasses.dataclass(frozen=True)
class EnvConfig:
    game: Literal["overcooked", "cleanup", "harvest"] = "overcooked"
    """Which game the agents play; selects the env, the option library and the prompt."""

    layout: str = "asymmetric_advantages"
    """Overcooked kitchen layout (ignored by the Melting Pot games, which have one map each)."""

    horizon: int = 400
    """Episode length T in primitive env steps (paper: 400 Overcooked/Harvest, 150 Cleanup)."""

    n_agents: int = 2
    """Number of agents N; each owns one LoRA adapter unless `train.shared_lora` is set."""

    guards: str = ""
    """Guard file (jsonl from `omjax guards`) that filters menus; empty uses the library's
    bundled guard set for the game."""

    library: str = ""
    """Option library: a candidate's name (`lib_a`, `lib_b`), `sampled` (one candidate drawn
    deterministically from the training `seed`, as the paper samples a library per seed, §5.1;
    the run's config.yaml and library.json record the draw), or empty: lib_a for Overcooked, the
    library `env.layout` names for Melting Pot."""

    reward_shaping: float = 0.0
    """Weight of the progress bonus added to the team reward: Overcooked-AI's shaped reward in
    Overcooked (+3 onion in pot, +3 dish taken while a pot needs one, +5 soup plated), +1 per
    dirt cell cleaned in Cleanup. The paper trains on the task reward alone (0); short CPU
    episodes, where no soup can be delivered, need it for a learning signal."""

    start_held: str = ""
    """Overcooked only: an item every agent holds when an episode starts (`onion`, `tomato`,
    `dish`); empty, the layout's standard start (the paper's). A training-distribution knob for
    short CPU episodes: with onions in hand the first decisions include potting them, the choice
    the shaped reward pays most reliably. Not in the paper."""

    prompt_advice: bool = False
    """Add strategy advice the paper's prompts do not give to the Melting Pot system messages
    ("the team needs both cleaners and eaters", "restraint keeps the patches alive"). Off in the
    paper and in every shipped config: such hints confound the emergence of roles and restraint."""

    menu_format: str = "letter_first"
    """How the option menu writes an entry (`omjax.options.menu.render_menu`): `letter_first`,
    the paper's `A) place held item in pot @ (4, 2)`, or `letter_last`,
    `place held item in pot @ (4, 2) -> A` (departure 19, not in the paper), whose letter is the
    very token the reply writes after `choice:`. Letters are shuffled per decision either way."""

    def __post_init__(self) -> None:
        _check(self.reward_shaping >= 0, "env.reward_shaping", "must be >= 0")
        _check(self.menu_format in MENU_FORMATS, "env.menu_format",
               f"must be one of {', '.join(MENU_FORMATS)}, got {self.menu_format!r}")
        _check(self.library in LIBRARY_CHOICES, "env.library",
               f"must be one of {LIBRARY_CHOICES}, got {self.library!r}")
        _check(self.game in GAMES, "env.game", f"must be one of {GAMES}, got {self.game!r}")
        _check(self.horizon >= 1, "env.horizon", f"must be >= 1, got {self.horizon}")
        _check(self.n_agents >= 1, "env.n_agents", f"must be >= 1, got {self.n_agents}")
        _check(self.start_held in ("", "onion", "tomato", "dish"), "env.start_held",
               f"must be '', 'onion', 'tomato' or 'dish', got {self.start_held!r}")
        _check(not self.start_held or self.game == "overcooked", "env.start_held",
               f"is an Overcooked option; {self.game} starts from its own map")


@dataclasses.dataclass(frozen=True)
class PolicyConfig:
    action_interface: Literal["options", "native", "compound_json"] = "options"
    """What the LLM chooses among: the feasibility-filtered option menu (the method), raw motor
    actions (Ablations A/C) or free compound-JSON actions (Ablation D). Interfaces other than
    `options` are registered through `omjax.train.rollout.register_interface`."""

    decision_mode: Literal["letter", "sample"] = "letter"
    """`letter`: score only the menu letters at the `choice:` position and sample among them
    (constrained; one forward per decision). `sample`: generate the two-line reply token by token
    and parse it."""

    state_line: Literal["model", "oracle", "none"] = "model"
    """The reply's `state:` line in letter mode. `model` (the paper): the model picks its own
    label among the game's state labels and then the letter given that label, one joint
    distribution. `oracle` (a departure): the true label is written into the prompt and only the
    letter is scored. `none`: the reply is only `choice: <letter>`. Sample mode generates both
    lines itself whatever this says."""

    temperature: float = 0.9
    """Sampling temperature of option choices (paper: 0.9 Overcooked, 0.7 Melting Pot)."""

    realign: float = 1.0
    """Decoding-time realignment of letter mode (not in the paper; evaluation only): each reply
    logit is `ref + realign * (adapted - ref)`, `ref` the frozen base's (DeRa, Liu et al. 2024,
    "Decoding-time Realignment of Language Models"). Over a menu's letters this samples
    `pi_ref^(1 - realign) * pi^realign`: a policy fitted to the KL-regularised optimum
    `pi_ref exp(A / kl_coef)` is sampled as if fitted at `kl_coef / realign`, its learned shift
    from the base scaled and the base's own letter habits left as they are (a temperature scales
    both). 1 is the policy itself; a zero adapter gives the base whatever it is. Training refuses
    any other value (its PPO ratios score the policy it sampled from)."""

    max_new_tokens: int = 24
    """Reply length cap in `sample` mode (the two-line reply needs about 12 tokens)."""

    on_parse_failure: Literal["wait", "first", "random"] = "wait"
    """Option taken when a sampled reply names no menu letter: the menu's `wait` entry, the
    first menu entry, or a uniformly random one. Failures are counted per agent either way."""

    memory_macros: int = 5
    """How many of the agent's last decided macros the prompt's Memory block lists."""

    reward_window: int = 100
    """Steps over which the prompt's Memory block sums the team reward."""

    def __post_init__(self) -> None:
        _check(
            self.action_interface in ("options", "native", "compound_json"),
            "policy.action_interface",
            f"must be options, native or compound_json, got {self.action_interface!r}",
        )
        _check(
            self.decision_mode in ("letter", "sample"),
            "policy.decision_mode",
            f"must be letter or sample, got {self.decision_mode!r}",
        )
        _check(
            self.state_line in ("model", "oracle", "none"),
            "policy.state_line",
            f"must be model, oracle or none, got {self.state_line!r}",
        )
        _check(self.temperature > 0, "policy.temperature", f"must be > 0, got {self.temperature}")
        _check(self.realign >= 0, "policy.realign", f"must be >= 0, got {self.realign}")
        _check(self.realign == 1.0 or self.decision_mode == "letter", "policy.realign",
               f"realigns letter mode's scored reply only; decision_mode={self.decision_mode!r} needs 1")
        _check(self.max_new_tokens >= 4, "policy.max_new_tokens", "must be >= 4")
        _check(
            self.on_parse_failure in ("wait", "first", "random"),
            "policy.on_parse_failure",
            f"must be wait, first or random, got {self.on_parse_failure!r}",
        )
        _check(self.memory_macros >= 0, "policy.memory_macros", "must be >= 0")
        _check(self.reward_window >= 1, "policy.reward_window", "must be >= 1")


#: What `train.advantage` may name.
ADVANTAGES = ("episode", "reward_to_go", "uniform_q")
#: What `train.q_label` may name (`omjax.train.continuation.entry_labels`).
Q_LABELS = ("value", "rank", "greedy", "name")
#: What `train.objective` may name (`omjax.train.update.UpdateSettings.objective`).
OBJECTIVES = ("clip", "target")
#: What `train.name_critic` may name.
NAME_CRITICS = ("round", "pooled")
#: What `train.critic_keys` may name (`omjax.train.continuation.entry_keys`).
CRITIC_KEYS = ("name", "state")


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    rounds: int = 100
    """Training rounds; each collects K joint rollouts and takes one PA-MAGRPO update."""

    rollouts: int = 6
    """K, the cohort size: joint rollouts per round whose team returns are normalized together
    (paper: 6 Overcooked, 4 Melting Pot)."""

    lr: float = 2e-5
    """Adam learning rate (paper: 2e-5 Overcooked, 5e-5 Melting Pot)."""

    clip_eps: float = 0.2
    """PPO clip range epsilon on the per-decision importance ratio."""

    epochs: int = 2
    """E, PPO epochs over each agent's decisions per round."""

    kl_coef: float = 0.05
    """beta, weight of KL(pi_theta || pi_ref) where pi_ref is the frozen base (LoRA off)."""

    max_grad_norm: float = 1.0
    """Global-norm gradient clip, applied per agent."""

    minibatch_size: int = 8
    """Decisions per gradient step; each agent's decisions are split into minibatches in an
    order drawn from the run seed."""

    adam_b1: float = 0.9
    """Adam first-moment decay."""

    adam_b2: float = 0.999
    """Adam second-moment decay."""

    adam_eps: float = 1e-8
    """Adam denominator epsilon."""

    remat: bool = False
    """Recompute each decoder layer's activations in the backward pass: less memory for about
    a third more update compute."""

    shared_lora: bool = False
    """Ablation B: one adapter for all agents, updated on every agent's decisions."""

    update_rows: int = 0
    """Pad each adapter's decisions to at least this many rows (then up to a power of two of
    minibatches). Set it to the most decisions an adapter makes in a round and every round
    reuses one compiled update; minibatches holding only padding are skipped, not computed."""

    update_tokens: int = 0
    """Pad update sequences to at least this many tokens (then up to the length grid), so
    rounds whose longest prompt differs still share one compiled update."""

    reuse_trunk: bool = True
    """With `lora.top_layers`, keep the frozen layers' output of each decision from its rollout
    forward and start the update from it instead of recomputing it (letter mode, dense
    families). Costs host memory: prompt tokens x hidden size x 4 bytes per decision (SmolLM2,
    850 tokens: 2 MB)."""

    train: bool = True
    """False keeps the base frozen (the frozen-base baselines): rollouts run, no update."""

    advantage: str = "episode"
    """What credits a decision: "episode" (the paper's Algorithm 1: the cohort-normalised team
    return of its whole rollout) or "reward_to_go" (the cohort-normalised team return from the
    decision's step on, normalised per step over the K rollouts; `grpo.reward_to_go_advantages`).
    Not in the paper: rewards paid before a decision are noise to it. Under uniform menu picks on
    Asymmetric Advantages (10-150-step episodes, K = 16) it multiplies the cohort's SNR^2 per
    decision along "pick the idle options less" by 1.9-2.9 for a shared adapter and 1.2-5.5 for
    a private one (`experiments/lab/credit_snr.py --credit`). "uniform_q": each decision's own
    advantage under the uniform menu policy, Q_u(s, a) - V_u(s), estimated by `q_rollouts`
    simulated continuations of `q_horizon` steps per menu option in which every later pick is
    uniform (`omjax.train.continuation`), divided by the round's standard deviation of them.
    Not in the paper; Overcooked option menus only. A scripted policy greedy in it delivers 3.22
    soups per 150-step Asymmetric Advantages episode against 0.09 for uniform picks, and one
    softmax in it at temperature 2 delivers 0.59 (`experiments/lab/menu_policies.py --policies uniform
    q_greedy q_soft`, seeds 0-31)."""

    q_horizon: int = 20
    """`advantage=uniform_q`: env steps each continuation runs (cut at the episode's end)."""

    q_rollouts: int = 8
    """`advantage=uniform_q`: continuations per menu option (the same streams for every option)."""

    q_label: str = "value"
    """`advantage=uniform_q`: what each menu entry is credited with, from its Q_u
    (`continuation.entry_labels`): "value" Q_u(s, a) - V_u(s); "rank" its centred rank among the
    menu's Q_u; "greedy" 1 at the best entry (shared among ties) less 1 / n; each divided by the
    round's standard deviation of the picked entries' labels. "name": a tabular critic over option
    names refit every round, pooled over agents (`continuation.name_weights`): each entry gets the
    mean "value" label of its option's name over every entry of the round's decisions, in units of
    their sd, less its menu's mean. A state-independent credit: with the exact letter-mode KL the
    regularised optimum is pi_ref(a) exp(w[name(a)] / kl_coef), the `name_soft` policy of
    `experiments/lab/menu_policies.py` at beta = 1 / kl_coef on top of the base. Not in the paper."""

    name_critic: str = "round"
    """`q_label=name`: which decisions the critic over names averages. "round": the round's own,
    so its weights follow the round's root state (`segment`) and swing by ~1 sd from round to
    round. "pooled": every decision's labels since the run began (running per-name counts and
    sums in `TrainState.critic`, checkpointed and resumed with the run), so the regularised
    optimum the update aims at settles as the run goes on. Not in the paper."""

    critic_burnin: int = 0
    """`name_critic=pooled`: the critic's statistics start from the labels of this many
    uniform-pick episodes of the game (`continuation.uniform_menus`, seeds `rollout.burnin_seed`,
    apart from every training and held-out seed), played before round 0, instead of from none:
    the labels are Q_u's, which no policy enters, so the target the update fits is near its
    final value from the first round instead of following the first rounds' few root states.
    0: no burn-in. Not in the paper (its burn-in (§5) logs the options' effects for guard synthesis)."""

    critic_keys: str = "name"
    """`q_label=name`: what the critic over names keys each menu entry by
    (`continuation.entry_keys`). "name": its option name. "state": its option name with the
    entry's guard read-set features at the decision (`held`, `tgt_pot_state`, `tgt_item`, the
    deterministic features the guards are mined over), so that, e.g., `start_cooking` on a pot of
    3 onions and on a pot of 1 are credited apart; still a table of running means, pooled over
    agents (and over rounds under `name_critic=pooled`). Not in the paper."""

    all_options: bool = False
    """Letter mode with `advantage=uniform_q`: the clipped surrogate is taken in expectation over
    every menu entry, each with its own advantage, under the policy the update starts from
    (`grpo.all_options_surrogate`), instead of at the sampled entry alone. Not in the paper: the
    sampled surrogate is a one-draw estimate of this one, and under a near-uniform policy over a
    menu of ~6 entries most of its variance is which entry was drawn. With `letter_augment` each
    relettered copy carries the same entries' advantages in its own order."""

    objective: str = "clip"
    """With `all_options`: what the update minimises over each decision's menu. "clip": the
    paper's loss, the clipped surrogate (here in expectation over the entries) + kl_coef x
    KL(pi || pi_ref). "target": KL(pi* || pi) to that loss's optimum pi* ∝ pi_ref exp(A / kl_coef)
    (`grpo.target_kl`), the same fixed point reached by a gradient that does not vanish on
    entries the policy rarely picks (the surrogate's pushes each logit by pi(a) (A_a - pi.A)).
    Not in the paper."""

    replay_rounds: int = 0
    """With `objective=target` and `name_critic=pooled`: each round's update also refits the
    decisions of the `replay_rounds` rounds before it, every entry re-credited with the pooled
    critic's current weight of its name, less its menu's mean (`continuation.name_credit`). 0 is
    the paper's update (each round fits its own rollouts). Not in the paper: the target
    pi_ref exp(A / kl_coef) depends on the frozen base and the critic only, not on the policy
    that collected the decision, so old decisions need no importance weight; each gradient step
    then draws its minibatch from R + 1 rounds' states instead of one root state's. The
    decisions (with their kept trunks) are held in memory and written to
    `run_dir/replay/round_<r>.pkl` before the round's checkpoint, so a resumed run refits the
    same ones."""

    segment: int = 0
    """0: every round's rollouts play whole episodes from the reset state (the paper). S > 0:
    they play S steps of an `env.horizon`-step episode from a root state at step t0, drawn per
    seed and round uniformly from [0, env.horizon - S]; the K rollouts walk to the root together
    with the same uniform-random menu picks and the cohort compares K continuations
    of that one state (`rollout.collect_group`). Not in the paper: short rollouts from the reset
    state only ever train the opening of an episode, while segments train on states from all of
    it at the same cost per round (Overcooked only: Melting Pot episodes of a cohort start apart).
    The round's return then depends on its root as much as on the policy, so the best-round
    checkpoint marks the richest root as often as the best policy; `experiments/lab/segment_baseline.py`
    compares each round with uniform picks from its own root."""

    letter_augment: int = 0
    """Letter mode: the update also scores each decision, with its advantage, under this many
    other letterings of the same menu (drawn per decision; the prompt re-rendered with the
    entries relisted), so it credits the chosen option rather than the letter it happened to sit
    at. 0 is the paper's update. Not in the paper: letters are arbitrary under the per-decision
    shuffle, so a policy that reads the menu is invariant to them, and these copies average out
    the letter habit the raw gradient builds from noise (each decision costs 1 + n update rows;
    the old log-probs are then scored at the update's start and no trunk is reused)."""

    letter_baseline: bool = False
    """Letter mode: subtract from each decision's advantage the mean advantage of the same
    adapter's decisions of the round that picked the same letter. Not in the paper: under the
    per-decision shuffle a letter says nothing about the option behind it, so whatever advantage
    the letters explain is noise, and it is the part of the gradient that builds a letter habit;
    this control variate removes it at no cost (a letter picked once then carries no credit)."""

    letter_prior_coef: float = 0.0
    """Letter mode: weight of KL(letter marginal || uniform) over each minibatch, where the
    letter marginal is the policy's probability of each letter averaged over the minibatch's
    decisions (`grpo.letter_marginal_kl`). Not in the paper: a policy that reads its shuffled
    menu has a flat letter marginal whatever it prefers, so the term leaves menu reading free
    and pulls back the letter habit that noise in the cohort advantage builds (and the base's
    own favourite letter). 0 is the paper's loss."""

    def __post_init__(self) -> None:
        _check(self.rounds >= 1, "train.rounds", f"must be >= 1, got {self.rounds}")
        _check(self.rollouts >= 2, "train.rollouts", "a cohort needs K >= 2 rollouts")
        _check(self.lr > 0, "train.lr", f"must be > 0, got {self.lr}")
        _check(0 < self.clip_eps < 1, "train.clip_eps", f"must be in (0, 1), got {self.clip_eps}")
        _check(self.epochs >= 1, "train.epochs", f"must be >= 1, got {self.epochs}")
        _check(self.kl_coef >= 0, "train.kl_coef", f"must be >= 0, got {self.kl_coef}")
        _check(self.max_grad_norm > 0, "train.max_grad_norm", "must be > 0")
        _check(self.minibatch_size >= 1, "train.minibatch_size", "must be >= 1")
        _check(0 <= self.adam_b1 < 1, "train.adam_b1", "must be in [0, 1)")
        _check(0 <= self.adam_b2 < 1, "train.adam_b2", "must be in [0, 1)")
        _check(self.adam_eps > 0, "train.adam_eps", "must be > 0")
        _check(self.update_rows >= 0, "train.update_rows", f"must be >= 0, got {self.update_rows}")
        _check(self.update_tokens >= 0, "train.update_tokens", f"must be >= 0, got {self.update_tokens}")
        _check(self.advantage in ADVANTAGES, "train.advantage",
               f"must be one of {', '.join(map(repr, ADVANTAGES))}, got {self.advantage!r}")
        _check(self.q_label in Q_LABELS, "train.q_label",
               f"must be one of {', '.join(map(repr, Q_LABELS))}, got {self.q_label!r}")
        _check(self.name_critic in NAME_CRITICS, "train.name_critic",
               f"must be one of {', '.join(map(repr, NAME_CRITICS))}, got {self.name_critic!r}")
        _check(self.name_critic == "round" or (self.advantage == "uniform_q" and self.q_label == "name"),
               "train.name_critic", "pooled pools the critic over option names: it needs "
               f"train.advantage=uniform_q and train.q_label=name, got {self.advantage} / {self.q_label}")
        _check(self.critic_burnin >= 0, "train.critic_burnin", f"must be >= 0, got {self.critic_burnin}")
        _check(not self.critic_burnin or self.name_critic == "pooled", "train.critic_burnin",
               f"seeds the pooled critic's statistics: it needs train.name_critic=pooled, got {self.name_critic}")
        _check(self.critic_keys in CRITIC_KEYS, "train.critic_keys",
               f"must be one of {', '.join(map(repr, CRITIC_KEYS))}, got {self.critic_keys!r}")
        _check(self.critic_keys == "name" or self.q_label == "name", "train.critic_keys",
               f"keys the critic over names: it needs train.q_label=name, got {self.q_label}")
        _check(self.q_horizon >= 1, "train.q_horizon", f"must be >= 1, got {self.q_horizon}")
        _check(self.q_rollouts >= 1, "train.q_rollouts", f"must be >= 1, got {self.q_rollouts}")
        _check(self.segment >= 0, "train.segment", f"must be >= 0, got {self.segment}")
        _check(self.letter_augment >= 0, "train.letter_augment", f"must be >= 0, got {self.letter_augment}")
        _check(self.letter_prior_coef >= 0, "train.letter_prior_coef", f"must be >= 0, got {self.letter_prior_coef}")
        _check(self.objective in OBJECTIVES, "train.objective",
               f"must be one of {', '.join(map(repr, OBJECTIVES))}, got {self.objective!r}")
        _check(self.objective == "clip" or (self.all_options and self.kl_coef > 0), "train.objective",
               "target regresses onto pi_ref exp(A / kl_coef) over every menu entry: it needs "
               f"train.all_options=true and train.kl_coef > 0, got {self.all_options} / {self.kl_coef}")
        _check(self.replay_rounds >= 0, "train.replay_rounds", f"must be >= 0, got {self.replay_rounds}")
        _check(not self.replay_rounds or (self.objective == "target" and self.name_critic == "pooled"),
               "train.replay_rounds", "refits past rounds' decisions under the pooled critic's current weights: it "
               f"needs train.objective=target and train.name_critic=pooled, got {self.objective} / {self.name_critic}")


@dataclasses.dataclass(frozen=True)
class RunConfig:
    out_dir: str = "runs/default"
    """Run directory: metrics.jsonl, per-round decision records, checkpoints, learning curve."""

    keep_checkpoints: int = 2
    """How many most recent round checkpoints to keep (the best one is kept separately)."""

    progress: bool = True
    """Show a tqdm progress bar over rounds and rollout steps."""

    plot_every: int = 1
    """Redraw `learning_curve.png` every this many rounds (and after the last one)."""

    save_decisions: bool = True
    """Write every decision of every round to `decisions/round_XXXX.jsonl` for audits."""

    base_sharding: Literal["auto", "replicate", "shard"] = "auto"
    """Where the frozen base lives when several devices are visible (`omjax.train.sharding`):
    `replicate` puts a copy on every device; `shard` splits its weights over the mesh's "model"
    axis (Megatron-style: column-parallel q/k/v/gate/up, row-parallel o/down, embeddings on the
    vocabulary); `auto` shards only when `memory_estimate` of the run exceeds one device's memory
    (never on the CPU, which reports none)."""

    model_devices: int = 0
    """Devices along the "model" axis that shards the base (the rest split the adapters and
    decision rows); it must divide the device count. 0: `shard` and `auto` take the fewest that
    fit the estimate (`shard` at least 2; every device where no memory limit is known)."""

    def __post_init__(self) -> None:
        _check(bool(self.out_dir), "run.out_dir", "must be a directory path")
        _check(self.base_sharding in ("auto", "replicate", "shard"), "run.base_sharding",
               f"must be auto, replicate or shard, got {self.base_sharding!r}")
        _check(self.model_devices >= 0, "run.model_devices", f"must be >= 0, got {self.model_devices}")
        _check(not (self.model_devices > 1 and self.base_sharding == "replicate"), "run.model_devices",
               f"{self.model_devices} devices shard the base, but run.base_sharding=replicate: "
               "set run.base_sharding=shard (or auto)")
        _check(self.keep_checkpoints >= 1, "run.keep_checkpoints", "must be >= 1")
        _check(self.plot_every >= 1, "run.plot_every", "must be >= 1")


@dataclasses.dataclass(frozen=True)
class Config:
    seed: int = 0
    """Training seed: LoRA init, env initial states, sampling, minibatch order."""

    model: ModelConfig = dataclasses.field(default_factory=ModelConfig)
    """Backbone."""

    lora: LoRAConfig = dataclasses.field(default_factory=LoRAConfig)
    """Adapters."""

    env: EnvConfig = dataclasses.field(default_factory=EnvConfig)
    """Game."""

    policy: PolicyConfig = dataclasses.field(default_factory=PolicyConfig)
    """Action interface and decoding."""

    train: TrainConfig = dataclasses.field(default_factory=TrainConfig)
    """PA-MAGRPO optimisation."""

    run: RunConfig = dataclasses.field(default_factory=RunConfig)
    """Outputs."""

    def __post_init__(self) -> None:
        _check(self.seed >= 0, "seed", f"must be >= 0, got {self.seed}")
        # Cross-field checks that need no game facts; the layout and agent count are checked
        # against the game registry by `omjax.games.registry.check_env`.
        _check(
            not (self.policy.action_interface == "compound_json" and self.policy.decision_mode == "letter"),
            "policy.decision_mode",
            "letter mode scores menu letters, but the compound_json prompt shows no menu: "
            "set policy.decision_mode=sample",
        )
        _check(
            self.env.menu_format == "letter_first" or self.policy.action_interface == "options",
            "env.menu_format",
            f"writes the option menu; the {self.policy.action_interface} interface has its own: set it to letter_first",
        )
        _check(
            self.train.segment <= self.env.horizon, "train.segment",
            f"a segment of {self.train.segment} steps does not fit env.horizon={self.env.horizon}",
        )
        _check(
            not self.train.segment or self.env.game == "overcooked", "train.segment",
            f"needs the K rollouts of a cohort to start in one state, which Overcooked's do and "
            f"{self.env.game}'s do not: set train.segment=0",
        )
        _check(
            self.train.advantage != "uniform_q"
            or (self.env.game == "overcooked" and self.policy.action_interface == "options"),
            "train.advantage",
            "uniform_q simulates continuations in the Overcooked option executor: it needs "
            f"env.game=overcooked and policy.action_interface=options, got {self.env.game} / "
            f"{self.policy.action_interface}",
        )
        _check(
            not self.train.all_options or (self.train.advantage == "uniform_q"
                                           and self.policy.decision_mode == "letter"),
            "train.all_options",
            "needs every menu entry's advantage and an explicit menu distribution: set "
            "train.advantage=uniform_q and policy.decision_mode=letter",
        )
        _check(
            not (self.train.all_options and self.train.letter_baseline),
            "train.all_options",
            "credits every entry of the menu, so there is no sampled letter for train.letter_baseline "
            "to correct: set it off",
        )
        _check(
            not (self.lora.scope == "reply" and self.policy.decision_mode != "letter"),
            "lora.scope",
            "reply scores the reply after a prompt run without the adapter: it needs policy.decision_mode=letter",
        )
        _check(
            not (self.train.letter_augment and self.policy.decision_mode != "letter"),
            "train.letter_augment",
            "reletters the menus of scored letter decisions: it needs policy.decision_mode=letter",
        )
        _check(
            not (self.train.letter_baseline and self.policy.decision_mode != "letter"),
            "train.letter_baseline",
            "groups decisions by their menu letter: it needs policy.decision_mode=letter",
        )
        _check(
            not (self.train.letter_prior_coef and self.policy.decision_mode != "letter"),
            "train.letter_prior_coef",
            "regularises the distribution over menu letters: it needs policy.decision_mode=letter",
        )

    @property
    def n_adapters(self) -> int:
        """Adapters in the bank: one per agent, or one in total under `shared_lora`."""
        return 1 if self.train.shared_lora else self.env.n_agents

    def to_dict(self) -> dict[str, Any]:
        return _to_plain(dataclasses.asdict(self))


def _to_plain(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {k: _to_plain(v) for k, v in obj.items()}
    if isinstance(obj, tuple):
        return [_to_plain(v) for v in obj]
    return obj


# ------------------------------------------------------------------------------------------------
# Building from plain data


def _coerce(value: Any, tp: Any, key: str) -> Any:
    """Convert a YAML or command-line value to the declared field type, or raise naming `key`."""
    origin = typing.get_origin(tp)
    if origin is Literal:
        choices = typing.get_args(tp)
        _check(value in choices, key, f"must be one of {list(choices)}, got {value!r}")
        return value
    if origin in (typing.Union, types.UnionType):
        errors = []
        for arg in typing.get_args(tp):
            try:
                return _coerce(value, arg, key)
            except ConfigError as e:
                errors.append(str(e))
        raise ConfigError("; ".join(errors))
    if origin is tuple:
        (item_tp, _) = typing.get_args(tp)
        if isinstance(value, str):
            value = [v.strip() for v in value.split(",") if v.strip()]
        _check(isinstance(value, (list, tuple)), key, f"expected a list, got {value!r}")
        return tuple(_coerce(v, item_tp, f"{key}[{i}]") for i, v in enumerate(value))
    if tp is bool:
        if isinstance(value, str) and value.lower() in ("true", "false", "yes", "no", "1", "0"):
            return value.lower() in ("true", "yes", "1")
        _check(isinstance(value, bool), key, f"expected true or false, got {value!r}")
        return value
    if tp is int:
        if isinstance(value, str):
            try:
                return int(value)
            except ValueError:
                raise ConfigError(f"{key}: expected an integer, got {value!r}") from None
        _check(isinstance(value, int) and not isinstance(value, bool), key, f"expected an integer, got {value!r}")
        return value
    if tp is float:
        if isinstance(value, str):
            try:
                return float(value)
            except ValueError:
                raise ConfigError(f"{key}: expected a number, got {value!r}") from None
        _check(
            isinstance(value, (int, float)) and not isinstance(value, bool),
            key,
            f"expected a number, got {value!r}",
        )
        return float(value)
    if tp is str:
        _check(isinstance(value, (str, int, float)) and not isinstance(value, bool), key, f"expected a string, got {value!r}")
        return str(value)
    raise ConfigError(f"{key}: unsupported field type {tp!r}")


def from_dict(cls: type, data: dict[str, Any], prefix: str = "") -> Any:
    """Build dataclass `cls` from nested plain data; unknown keys and bad values name the key."""
    if not isinstance(data, dict):
        raise ConfigError(f"{prefix.rstrip('.') or 'config'}: expected a mapping, got {data!r}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise ConfigError(
            f"unknown config key {prefix + unknown[0]!r} (known keys in "
            f"{prefix.rstrip('.') or 'the top level'}: {', '.join(sorted(fields))})"
        )
    kwargs = {}
    for name, value in data.items():
        tp = hints[name]
        key = prefix + name
        if dataclasses.is_dataclass(tp):
            kwargs[name] = from_dict(tp, value if value is not None else {}, key + ".")
        else:
            kwargs[name] = _coerce(value, tp, key)
    try:
        return cls(**kwargs)
    except ConfigError:
        raise
    except TypeError as e:
        raise ConfigError(f"{prefix.rstrip('.') or 'config'}: {e}") from None


def _deep_merge(base: dict, over: dict) -> dict:
    out = dict(base)
    for k, v in over.items():
        out[k] = _deep_merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def _read_yaml(path: Path, seen: tuple[Path, ...] = ()) -> dict[str, Any]:
    path = path.resolve()
    if not path.is_file():
        raise ConfigError(f"config file not found: {path}")
    if path in seen:
        raise ConfigError(f"config `base` chain loops back to {path}")
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not valid YAML: {e}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: top level must be a mapping of sections")
    base = data.pop("base", None)
    if base is None:
        return data
    return _deep_merge(_read_yaml(path.parent / str(base), seen + (path,)), data)


def apply_overrides(data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Apply `a.b=value` strings to nested plain data; the value is parsed as YAML."""
    out = _deep_merge({}, data)
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"override {item!r} is not of the form key=value")
        key, raw = item.split("=", 1)
        parts = key.strip().split(".")
        if not all(parts):
            raise ConfigError(f"override {item!r} has an empty key part")
        try:
            value = yaml.safe_load(raw) if raw.strip() else ""
        except yaml.YAMLError:
            value = raw
        node = out
        for p in parts[:-1]:
            child = node.get(p)
            if child is None:
                child = node[p] = {}
            if not isinstance(child, dict):
                raise ConfigError(f"override {item!r}: {p!r} is not a section")
            node = child
        node[parts[-1]] = value
    return out


def load_config(path: str | Path | None = None, overrides: list[str] | None = None) -> Config:
    """Read a YAML config (following `base:`), apply `key=value` overrides, validate."""
    data = _read_yaml(Path(path)) if path is not None else {}
    return from_dict(Config, apply_overrides(data, list(overrides or [])))


def dump_config(cfg: Config, path: str | Path) -> None:
    Path(path).write_text(yaml.safe_dump(cfg.to_dict(), sort_keys=False))
