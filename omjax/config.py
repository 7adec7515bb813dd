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
    bundled synthesized guard set for the game, `hand` its hand-selected set (the interface the
    paper's Table 2 ablations ran on), `none` the unfiltered menu."""

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

    decide_shapes: Literal["auto", "fixed", "adaptive"] = "auto"
    """The shapes letter-mode decisions run at. `fixed`: one call per env step, its rows padded to
    every decision the step could hold (seeds x K x agents, to a power of two), its prompt length
    and menu width to high-water marks that only grow (a 128-token grid), so a run compiles decide
    a few times at most: the accelerator's shapes. `adaptive`: rows to the power of two of the
    decisions pending and prompts in up to four length groups, so that no row computes much
    padding, at the cost of more programs: the CPU's. `auto`: fixed on an accelerator, adaptive
    on the CPU."""

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


# ------------------------------------------------------------------------------------------------
# Plug-ins of the training loop: credit assignment and the policy objective. Each is one key of
# `train` holding a small dataclass whose `kind` selects it (`train.credit: {kind: cohort}`, or
# the shorthand `train.credit=cohort`); the paper's are the defaults. The code of each kind lives
# in `omjax.train.credit` and `omjax.train.objectives`.


@dataclasses.dataclass(frozen=True)
class CohortCredit:
    """The paper's credit (Algorithm 1): every decision of a rollout gets its rollout's team
    return, normalised over the K rollouts of the cohort (`grpo.group_advantages`)."""

    kind: Literal["cohort"] = "cohort"


CRITIC_KEYS = ("name", "state")
"""What `train.credit.keys` may name (`omjax.train.continuation.entry_keys`)."""


@dataclasses.dataclass(frozen=True)
class ContinuationCredit:
    """Not in the paper (docs/departures.md): each decision is credited by a critic over its
    menu's entries instead of by its rollout's return. Every entry's value under the uniform
    menu policy, Q_u(s, a) - V_u(s), is estimated from `rollouts` simulated continuations of
    `horizon` steps in the Overcooked option executor (`omjax.train.continuation.UniformQ`); a
    table of running means of those labels per entry key, pooled over agents and over every
    round since the run began (`TrainState.critic`, checkpointed), gives each entry its weight
    in units of the labels' sd, less its menu's mean. The picked entry's weight is the
    decision's advantage; with `train.objective: {kind: target}` every entry's weight is used.
    Overcooked option menus only. The setting that held up on fresh held-out seeds
    (docs/results.md) is this credit with its defaults and the target objective."""

    kind: Literal["continuation"] = "continuation"

    horizon: int = 20
    """Env steps each continuation runs (cut at the episode's end)."""

    rollouts: int = 32
    """Continuations per menu entry (the same random streams for every entry)."""

    keys: Literal["name", "state"] = "state"
    """What the critic keys each entry by: `name`, its option name; `state`, its option name
    with the entry's guard read-set features at the decision (`held`, `tgt_pot_state`,
    `tgt_item`), so that e.g. `start_cooking` on a pot of 3 onions and on a pot of 1 are
    credited apart."""

    burnin: int = 16
    """The critic's statistics start from the labels of this many uniform-pick episodes
    (`continuation.uniform_menus`, seeds `rollout.burnin_seed`, apart from every training and
    held-out seed), played before round 0; 0 starts from none."""

    def __post_init__(self) -> None:
        _check(self.horizon >= 1, "train.credit.horizon", f"must be >= 1, got {self.horizon}")
        _check(self.rollouts >= 1, "train.credit.rollouts", f"must be >= 1, got {self.rollouts}")
        _check(self.keys in CRITIC_KEYS, "train.credit.keys",
               f"must be one of {', '.join(CRITIC_KEYS)}, got {self.keys!r}")
        _check(self.burnin >= 0, "train.credit.burnin", f"must be >= 0, got {self.burnin}")


@dataclasses.dataclass(frozen=True)
class ClipObjective:
    """The paper's loss: the PPO-clipped surrogate at each sampled decision (`train.clip_eps`)
    plus kl_coef x KL(pi_theta || pi_ref)."""

    kind: Literal["clip"] = "clip"


@dataclasses.dataclass(frozen=True)
class TargetObjective:
    """Not in the paper (docs/departures.md): over each decision's whole menu, KL(pi* || pi_theta)
    to the clipped loss's KL-regularised optimum pi* ∝ pi_ref exp(A / kl_coef), A every entry's
    advantage (`grpo.target_kl`): the same fixed point, reached by a gradient that does not
    vanish on entries the policy rarely picks. Needs every entry's advantage (the continuation
    credit), letter mode and kl_coef > 0."""

    kind: Literal["target"] = "target"


CREDITS = {"cohort": CohortCredit, "continuation": ContinuationCredit}
"""`train.credit.kind` -> its settings."""
OBJECTIVES = {"clip": ClipObjective, "target": TargetObjective}
"""`train.objective.kind` -> its settings."""
PLUGINS = {"train.credit": CREDITS, "train.objective": OBJECTIVES}


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

    remat: bool | Literal["auto"] = "auto"
    """Recompute decoder layers' activations in the backward pass (less memory for about a third
    more update compute per recomputed layer): `true` every layer, `false` none, `auto` the
    fewest layers, from the bottom, that `memory_estimate` says must be recomputed for the update
    to fit one device (`omjax.train.oom.planned_remat`): none where it all fits or where the
    device's memory is unknown (a CPU without `OMJAX_DEVICE_MEMORY_BYTES`)."""

    shared_lora: bool = False
    """Ablation B: one adapter for all agents, updated on every agent's decisions."""

    update_rows: int = 0
    """Pad each adapter's decisions to at least this many rows (then up to a power of two of
    minibatches). Set it to the most decisions an adapter makes in a round and every round
    reuses one compiled update; minibatches holding only padding are skipped, not computed."""

    update_tokens: int = 0
    """Pad update sequences to at least this many tokens (then up to the length grid), so
    rounds whose longest prompt differs still share one compiled update; where the update runs
    the shared prompt prefix apart, its padded columns count towards this."""

    reuse_trunk: bool = True
    """With `lora.top_layers`, keep the frozen layers' output of each decision from its rollout
    forward and start the update from it instead of recomputing it (letter mode, dense
    families). Costs host memory: prompt tokens x hidden size x 4 bytes per decision (SmolLM2,
    850 tokens: 2 MB)."""

    train: bool = True
    """False keeps the base frozen (the frozen-base baselines): rollouts run, no update."""

    credit: CohortCredit | ContinuationCredit = dataclasses.field(default_factory=CohortCredit)
    """How decisions are credited (`omjax.train.credit`): `{kind: cohort}` (the paper) or
    `{kind: continuation, ...}` (a critic over menu entries; not in the paper)."""

    objective: ClipObjective | TargetObjective = dataclasses.field(default_factory=ClipObjective)
    """What the update minimises (`omjax.train.objectives`): `{kind: clip}` (the paper) or
    `{kind: target}` (KL to the regularised optimum over the menu; not in the paper)."""

    segment: int = 0
    """0: every round's rollouts play whole episodes from the reset state (the paper). S > 0:
    they play S steps of an `env.horizon`-step episode from a root state at step t0, drawn per
    seed and round uniformly from [0, env.horizon - S]; the K rollouts walk to the root together
    with the same uniform-random menu picks and the cohort compares K continuations of that one
    state (`rollout.collect_group`). Not in the paper: short rollouts from the reset state only
    ever train the opening of an episode (Overcooked only: Melting Pot episodes of a cohort
    start apart). The round's return then depends on its root as much as on the policy, so the
    best-round checkpoint marks the richest root as often as the best policy."""

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
        _check(self.segment >= 0, "train.segment", f"must be >= 0, got {self.segment}")
        _check(self.objective.kind != "target" or (self.credit.kind == "continuation" and self.kl_coef > 0),
               "train.objective", "target regresses onto pi_ref exp(A / kl_coef) over every menu entry: it needs "
               f"train.credit.kind=continuation and train.kl_coef > 0, got {self.credit.kind} / {self.kl_coef}")


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
            self.train.credit.kind != "continuation"
            or (self.env.game == "overcooked" and self.policy.action_interface == "options"),
            "train.credit",
            "continuation simulates continuations in the Overcooked option executor: it needs "
            f"env.game=overcooked and policy.action_interface=options, got {self.env.game} / "
            f"{self.policy.action_interface}",
        )
        _check(
            self.train.objective.kind != "target" or self.policy.decision_mode == "letter",
            "train.objective",
            "target needs an explicit distribution over the menu: set policy.decision_mode=letter",
        )
        _check(
            not (self.lora.scope == "reply" and self.policy.decision_mode != "letter"),
            "lora.scope",
            "reply scores the reply after a prompt run without the adapter: it needs policy.decision_mode=letter",
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


def _plugin(kinds: dict[str, type], value: Any, default: Any, key: str) -> Any:
    """A plug-in's settings from `{kind: ..., ...}` or the shorthand `kind`; a mapping without
    `kind` keeps the default's kind."""
    if isinstance(value, str):
        value = {"kind": value}
    if value is None:
        value = {}
    _check(isinstance(value, dict), key, f"expected a kind ({' | '.join(kinds)}) or a mapping, got {value!r}")
    kind = value.get("kind", default.kind)
    _check(kind in kinds, key + ".kind", f"must be one of {', '.join(kinds)}, got {kind!r}")
    return from_dict(kinds[kind], value, key + ".")


REMOVED_ON = "2026-12-07"
LAST_COMMIT = "07b3a66"
"""The research extensions that no confirmed result needed left the library on `REMOVED_ON`;
`LAST_COMMIT` is the last commit where they run (`git checkout 07b3a66`)."""

_OLD_DEFAULTS = {"advantage": "episode", "q_horizon": 20, "q_rollouts": 8, "q_label": "value",
                 "name_critic": "round", "critic_burnin": 0, "critic_keys": "name", "all_options": False,
                 "replay_rounds": 0, "letter_augment": 0, "letter_baseline": False, "letter_prior_coef": 0.0}
"""`train` keys of configs written before the plug-ins, at their values of that time's defaults."""


def _legacy_train(data: dict[str, Any]) -> dict[str, Any]:
    """A `train` section written before the credit/objective plug-ins (every run directory's
    config.yaml of that time lists the old keys), in the new keys: the extensions that stayed
    are translated, keys at their old defaults dropped, and a removed extension that is set
    raises one line naming the commit where it last ran."""
    old = {k: data[k] for k in _OLD_DEFAULTS if k in data}
    if not old:
        return data
    out = {k: v for k, v in data.items() if k not in old}
    gone = f"was removed on {REMOVED_ON} (no confirmed result needed it; it last runs at commit {LAST_COMMIT})"
    for k in ("replay_rounds", "letter_augment", "letter_baseline", "letter_prior_coef"):
        if k in old and old[k] != _OLD_DEFAULTS[k]:
            raise ConfigError(f"train.{k}: {gone}")
    advantage = old.get("advantage", "episode")
    if advantage == "reward_to_go":
        raise ConfigError(f"train.advantage=reward_to_go: {gone}")
    objective = out.get("objective", "clip")
    objective = objective.get("kind", "clip") if isinstance(objective, dict) else objective
    if old.get("all_options") and objective == "clip":
        raise ConfigError(f"train.all_options with the clip objective: {gone}; train.objective=target takes "
                          "every menu entry")
    if advantage == "uniform_q":
        label, critic = old.get("q_label", "value"), old.get("name_critic", "round")
        if label != "name" or critic != "pooled":
            raise ConfigError(f"train.q_label={label}, train.name_critic={critic}: {gone}; "
                              "train.credit: {kind: continuation} is the pooled critic over names")
        out["credit"] = {"kind": "continuation", "horizon": old.get("q_horizon", 20),
                         "rollouts": old.get("q_rollouts", 8), "keys": old.get("critic_keys", "name"),
                         "burnin": old.get("critic_burnin", 0)}
        if isinstance(data.get("credit"), dict):  # new keys set on top of an old section win
            out["credit"].update(data["credit"])
    elif advantage != "episode":
        raise ConfigError(f"train.advantage: is now train.credit.kind (cohort | continuation), got {advantage!r}")
    return out


def from_dict(cls: type, data: dict[str, Any], prefix: str = "") -> Any:
    """Build dataclass `cls` from nested plain data; unknown keys and bad values name the key."""
    if not isinstance(data, dict):
        raise ConfigError(f"{prefix.rstrip('.') or 'config'}: expected a mapping, got {data!r}")
    if cls is TrainConfig:
        data = _legacy_train(data)
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
        if key in PLUGINS:
            kwargs[name] = _plugin(PLUGINS[key], value, fields[name].default_factory(), key)
        elif dataclasses.is_dataclass(tp):
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
        for depth, p in enumerate(parts[:-1]):
            child = node.get(p)
            if child is None:
                child = node[p] = {}
            if isinstance(child, str) and ".".join(parts[:depth + 1]) in PLUGINS:  # a plug-in's shorthand kind
                child = node[p] = {"kind": child}
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


# ------------------------------------------------------------------------------------------------
# Reference documentation: `omjax config --doc` writes docs/configs.md from the docstrings above.


def _field_docs(cls: type) -> dict[str, str]:
    """The docstring under each field of dataclass `cls` (a string literal right after it)."""
    import ast
    import inspect
    import textwrap

    tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    body = tree.body[0].body
    out = {}
    for node, nxt in zip(body, body[1:] + [None]):
        if (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and isinstance(nxt, ast.Expr)
                and isinstance(nxt.value, ast.Constant) and isinstance(nxt.value.value, str)):
            out[node.target.id] = " ".join(inspect.cleandoc(nxt.value.value).split())
    return out


def _type_name(tp: Any) -> str:
    if typing.get_origin(tp) is Literal:
        return " \\| ".join(map(str, typing.get_args(tp)))
    if typing.get_origin(tp) is tuple:
        return f"list of {_type_name(typing.get_args(tp)[0])}"
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        return " \\| ".join(_type_name(a) for a in typing.get_args(tp))
    return getattr(tp, "__name__", str(tp))


def _default(f: dataclasses.Field) -> Any:
    return f.default if f.default is not dataclasses.MISSING else f.default_factory()


def _section_doc(cls: type, prefix: str) -> list[str]:
    hints, docs = typing.get_type_hints(cls), _field_docs(cls)
    lines = []
    for f in dataclasses.fields(cls):
        key = prefix + f.name
        if key in PLUGINS:
            kind = _default(f).kind
            lines.append(f"- **`{key}`**: a plug-in, `{{kind: ...}}` or the kind alone; default `{kind}`. "
                         f"{docs.get(f.name, '')}")
            for name, settings in PLUGINS[key].items():
                head = _class_doc(settings)
                lines.append(f"  - `kind: {name}`: {head}")
                lines += ["  " + line for line in _section_doc(settings, key + ".")
                          if not line.startswith(f"- **`{key}.kind`**")]
            continue
        if dataclasses.is_dataclass(hints[f.name]):  # a section: documented on its own
            continue
        default = _default(f)
        shown = yaml.safe_dump(_to_plain(default), default_flow_style=True).strip().removesuffix("...").strip()
        lines.append(f"- **`{key}`** ({_type_name(hints[f.name])}, default `{shown}`): {docs.get(f.name, '')}")
    return lines


def _class_doc(cls: type) -> str:
    """A dataclass's own docstring, on one line ('' where it has none but the generated signature)."""
    doc = cls.__dict__.get("__doc__") or ""
    return "" if doc.startswith(cls.__name__ + "(") else " ".join(doc.split())


def config_doc() -> str:
    """docs/configs.md: every key of a run config with its type, default and docstring."""
    lines = ["# Run configuration reference", "",
             "Generated by `omjax config --doc > docs/configs.md` from the docstrings of `omjax/config.py`; "
             "a test fails when this file is stale. A run is one YAML file (`base:` chains, "
             "`section.key=value` overrides on the command line); see `omjax.config`.", ""]
    top = typing.get_type_hints(Config)
    for f in dataclasses.fields(Config):
        tp = top[f.name]
        if dataclasses.is_dataclass(tp):
            lines += [f"## `{f.name}`", "", _class_doc(tp) or _field_docs(Config)[f.name], ""]
            lines += _section_doc(tp, f.name + ".") + [""]
    lines += ["## Top level", ""] + _section_doc(Config, "")
    return "\n".join(lines).rstrip() + "\n"


def main(argv: list[str] | None = None) -> int:
    """`omjax config --doc`: print docs/configs.md; `omjax config FILE [key=value ...]`: print the
    resolved config (after `base:` and overrides), or one line naming what is wrong (exit 2)."""
    import argparse
    import sys

    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "config":
        argv = argv[1:]
    p = argparse.ArgumentParser(prog="omjax config", description=main.__doc__)
    p.add_argument("--doc", action="store_true", help="print the reference of every config key (docs/configs.md)")
    p.add_argument("path", nargs="?", help="a run config YAML")
    p.add_argument("overrides", nargs="*", metavar="key=value")
    args = p.parse_args(argv)
    if args.doc:
        sys.stdout.write(config_doc())
        return 0
    try:
        cfg = load_config(args.path, args.overrides)
    except ConfigError as e:
        print(f"omjax config: {e}", file=sys.stderr)
        return EXIT_ERROR
    sys.stdout.write(yaml.safe_dump(cfg.to_dict(), sort_keys=False))
    return 0
