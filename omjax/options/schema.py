"""The typed option schema: the 4-part contract of paper §5.1, made hard to get wrong.

An option library is a `Schema`: a tuple of `OptionSpec`s plus the features they are judged on.
Each `OptionSpec` carries the four parts of the contract:

1. instantiation: `target_class` names a bounded class of targets (every pot, every counter, ...);
   the menu makes ONE instance per target of that class. There is no way to ask for "the nearest"
   target, so defect 3 of §5.1 (nearest-only instantiation) cannot be expressed.
2. raw executor: game code (shortest interact plan + INTERACT) that may fail explicitly only with a
   `Reason` (`TargetAbsent`, `NoPath`, `NothingHeld`).
3. termination: the plan is drained, or a timeout (logged as `effect_fail`).
4. effect: an `Effect` built only from delta conditions (`Transition` with disjoint from/to value
   sets, `Increased`), so an absolute-form predicate (defect 1) cannot be written: a no-op
   execution leaves pre == post and no delta condition holds on it. Shared-state conditions are
   only accepted next to a transition of a private feature of the acting agent; an option whose
   effect has no private part is marked `solo_only` and synthesised from solo records only
   (defect 2).

Features are small categorical variables with a fixed vocabulary, encoded as their index in
`Feature.values` everywhere (records, guard tables, JAX evaluators).
"""

from __future__ import annotations

import dataclasses
from enum import IntEnum

import jax.numpy as jnp
import numpy as np
from flax import struct


class Reason(IntEnum):
    """The only typed failures a raw executor may report (the domain of the partial executor)."""

    TargetAbsent = 0
    NoPath = 1
    NothingHeld = 2


# Outcome codes as stored in records: 0 success, 1 effect_fail, 2 + Reason for explicit failures.
SUCCESS = 0
EFFECT_FAIL = 1
EXPLICIT_BASE = 2
NUM_OUTCOMES = EXPLICIT_BASE + len(Reason)


def outcome_name(code: int) -> str:
    """`success`, `effect_fail` or `explicit:<Reason>` for an outcome code."""
    code = int(code)
    if code == SUCCESS:
        return "success"
    if code == EFFECT_FAIL:
        return "effect_fail"
    if EXPLICIT_BASE <= code < NUM_OUTCOMES:
        return f"explicit:{Reason(code - EXPLICIT_BASE).name}"
    raise ValueError(f"unknown outcome code {code}; valid codes are 0..{NUM_OUTCOMES - 1}")


def outcome_code(name: str) -> int:
    """Inverse of `outcome_name`."""
    if name == "success":
        return SUCCESS
    if name == "effect_fail":
        return EFFECT_FAIL
    if name.startswith("explicit:"):
        reason = name[len("explicit:"):]
        if reason in Reason.__members__:
            return EXPLICIT_BASE + Reason[reason]
        raise ValueError(f"unknown explicit failure {reason!r}; allowed: {', '.join(Reason.__members__)}")
    raise ValueError(f"unknown outcome {name!r}; expected success, effect_fail or explicit:<Reason>")


@dataclasses.dataclass(frozen=True)
class Feature:
    """A categorical feature; values are stored as indices into `values`."""

    name: str
    values: tuple[str, ...]
    private: bool = False  # True iff only the acting agent's own actions can change it

    def __post_init__(self):
        if not self.values or len(set(self.values)) != len(self.values):
            raise ValueError(f"feature {self.name!r}: values must be non-empty and distinct, got {self.values}")

    def code(self, value: str) -> int:
        try:
            return self.values.index(value)
        except ValueError:
            raise ValueError(f"feature {self.name!r} has no value {value!r}; values: {self.values}") from None


@dataclasses.dataclass(frozen=True)
class Transition:
    """Delta condition: pre[feature] in `from_` and post[feature] in `to`, with disjoint sets.

    `from_=None` means "anything not in `to`", the acquire form `pre != X and post == X`.
    """

    feature: str
    to: tuple[str, ...]
    from_: tuple[str, ...] | None = None


@dataclasses.dataclass(frozen=True)
class Increased:
    """Delta condition: post[feature] > pre[feature] in the feature's value order."""

    feature: str


Condition = Transition | Increased


@dataclasses.dataclass(frozen=True)
class Effect:
    """Effect predicate: the conjunction of a private transition and shared delta conditions.

    `private` must name a private feature of the acting agent; `shared` conditions may name any
    effect feature. `Effect()` (no conditions) is the null promise of an option such as `wait`,
    which promises nothing and always succeeds.
    """

    private: Transition | None = None
    shared: tuple[Condition, ...] = ()

    @property
    def is_null(self) -> bool:
        return self.private is None and not self.shared


@dataclasses.dataclass(frozen=True)
class OptionSpec:
    """One option of a library, with its contract.

    `label` is a format string with `{target}` (rendered as `(x, y)` or the game's target text).
    `target_class` is None for target-less options (one instance); those can never be
    `TargetAbsent`. `reasons` lists the typed failures the raw executor can raise.
    """

    name: str
    target_class: str | None
    label: str
    effect: Effect
    reasons: tuple[Reason, ...] = ()
    doc: str = ""

    @property
    def solo_only(self) -> bool:
        """Options whose effect has no private part are synthesised from solo records only."""
        return self.effect.private is None and not self.effect.is_null


@dataclasses.dataclass(frozen=True)
class Schema:
    """An option library: options, guard-eligible read set, effect features, transient features."""

    game: str
    options: tuple[OptionSpec, ...]
    read_set: tuple[Feature, ...]  # logged at initiation; the only guard-eligible features
    effect_features: tuple[Feature, ...]  # evaluated before/after the executor's last step
    transient: tuple[Feature, ...] = ()  # logged, never guard-eligible (partner adjacency, ...)

    def __post_init__(self):
        names = [o.name for o in self.options]
        if len(set(names)) != len(names):
            raise ValueError(f"schema {self.game!r}: duplicate option names in {names}")
        for group in (self.read_set, self.effect_features, self.transient):
            fnames = [f.name for f in group]
            if len(set(fnames)) != len(fnames):
                raise ValueError(f"schema {self.game!r}: duplicate feature names in {fnames}")
        read = {f.name for f in self.read_set}
        clash = read & {f.name for f in self.transient}
        if clash:
            raise ValueError(f"schema {self.game!r}: features {sorted(clash)} are both read-set and transient")
        effect_by_name = {f.name: f for f in self.effect_features}
        for opt in self.options:
            _validate_effect(opt, effect_by_name)
            if opt.target_class is None and Reason.TargetAbsent in opt.reasons:
                raise ValueError(f"option {opt.name!r} has no target class, so it cannot fail TargetAbsent")

    @property
    def option_names(self) -> tuple[str, ...]:
        return tuple(o.name for o in self.options)

    def option_index(self, name: str) -> int:
        try:
            return self.option_names.index(name)
        except ValueError:
            raise ValueError(f"{self.game}: unknown option {name!r}; options: {', '.join(self.option_names)}") from None

    def read_feature(self, name: str) -> Feature:
        for f in self.read_set:
            if f.name == name:
                return f
        raise ValueError(f"{self.game}: {name!r} is not a read-set feature; read set: "
                         f"{', '.join(f.name for f in self.read_set)}")

    def read_index(self, name: str) -> int:
        return self.read_set.index(self.read_feature(name))

    def effect_index(self, name: str) -> int:
        for i, f in enumerate(self.effect_features):
            if f.name == name:
                return i
        raise ValueError(f"{self.game}: {name!r} is not an effect feature")

    def encode_read(self, features: dict[str, str]) -> np.ndarray:
        """int8 [F]: a read-set dict (value names) as codes; every read feature must be given."""
        missing = [f.name for f in self.read_set if f.name not in features]
        if missing:
            raise ValueError(f"{self.game}: read-set features missing: {missing}")
        return np.array([f.code(features[f.name]) for f in self.read_set], np.int8)

    def decode_read(self, codes) -> dict[str, str]:
        return {f.name: f.values[int(c)] for f, c in zip(self.read_set, codes)}


def _validate_effect(opt: OptionSpec, features: dict[str, Feature]) -> None:
    """Reject effects that are not in delta form or that attribute shared state without a private part."""
    effect = opt.effect
    conds: list[tuple[str, Condition]] = []
    if effect.private is not None:
        if not isinstance(effect.private, Transition):
            raise ValueError(f"option {opt.name!r}: the private part must be a Transition")
        conds.append(("private", effect.private))
    conds += [("shared", c) for c in effect.shared]
    for part, cond in conds:
        if cond.feature not in features:
            raise ValueError(f"option {opt.name!r}: effect names unknown feature {cond.feature!r}")
        feat = features[cond.feature]
        if part == "private" and not feat.private:
            raise ValueError(f"option {opt.name!r}: private transition on shared feature {feat.name!r}")
        if isinstance(cond, Transition):
            to = set(cond.to)
            frm = set(feat.values) - to if cond.from_ is None else set(cond.from_)
            unknown = (to | frm) - set(feat.values)
            if unknown:
                raise ValueError(f"option {opt.name!r}: values {sorted(unknown)} not in feature {feat.name!r}")
            if not to or not frm:
                raise ValueError(f"option {opt.name!r}: transition on {feat.name!r} has an empty side")
            if to & frm:
                # A value on both sides would let a no-op execution satisfy the predicate.
                raise ValueError(f"option {opt.name!r}: transition on {feat.name!r} is not a delta: "
                                 f"{sorted(to & frm)} on both sides")
        elif not isinstance(cond, Increased):
            raise ValueError(f"option {opt.name!r}: unknown effect condition {cond!r}")


def transition_sets(feature: Feature, cond: Transition) -> tuple[frozenset[int], frozenset[int]]:
    """(from codes, to codes) of a transition."""
    to = {feature.code(v) for v in cond.to}
    frm = (set(range(len(feature.values))) - to if cond.from_ is None
           else {feature.code(v) for v in cond.from_})
    return frozenset(frm), frozenset(to)


def effect_holds(schema: Schema, opt: int, pre, post) -> bool:
    """Python effect predicate of option `opt` on effect-feature code vectors `pre`, `post` [E]."""
    effect = schema.options[opt].effect
    conds = ([effect.private] if effect.private is not None else []) + list(effect.shared)
    for cond in conds:
        i = schema.effect_index(cond.feature)
        a, b = int(pre[i]), int(post[i])
        if isinstance(cond, Increased):
            if not b > a:
                return False
        else:
            frm, to = transition_sets(schema.effect_features[i], cond)
            if a not in frm or b not in to:
                return False
    return True


@struct.dataclass
class EffectTable:
    """A schema's effects compiled to arrays for a jitted evaluator; C = max conditions per option.

    Condition slot c of option o is unused when `feat[o, c] == -1`.
    """

    feat: np.ndarray  # int32 [O, C] effect-feature index, -1 unused
    increased: np.ndarray  # bool [O, C] True: Increased, False: Transition
    from_mask: np.ndarray  # bool [O, C, V]
    to_mask: np.ndarray  # bool [O, C, V]


def compile_effects(schema: Schema) -> EffectTable:
    conds_per = []
    for opt in schema.options:
        e = opt.effect
        conds_per.append(([e.private] if e.private is not None else []) + list(e.shared))
    num_c = max(1, max(len(c) for c in conds_per))
    num_v = max(len(f.values) for f in schema.effect_features)
    num_o = len(schema.options)
    feat = np.full((num_o, num_c), -1, np.int32)
    inc = np.zeros((num_o, num_c), bool)
    frm_m = np.zeros((num_o, num_c, num_v), bool)
    to_m = np.zeros((num_o, num_c, num_v), bool)
    for o, conds in enumerate(conds_per):
        for c, cond in enumerate(conds):
            i = schema.effect_index(cond.feature)
            feat[o, c] = i
            if isinstance(cond, Increased):
                inc[o, c] = True
            else:
                frm, to = transition_sets(schema.effect_features[i], cond)
                frm_m[o, c, sorted(frm)] = True
                to_m[o, c, sorted(to)] = True
    return EffectTable(feat=feat, increased=inc, from_mask=frm_m, to_mask=to_m)


def effect_holds_jax(table: EffectTable, opt, pre, post):
    """Jittable effect predicate. opt int [...], pre/post int [..., E] -> bool [...]."""
    feat = jnp.asarray(table.feat)[opt]  # [..., C]
    used = feat >= 0
    idx = jnp.maximum(feat, 0)
    a = jnp.take_along_axis(pre, idx, axis=-1)  # [..., C]
    b = jnp.take_along_axis(post, idx, axis=-1)  # [..., C]
    frm = jnp.asarray(table.from_mask)[opt]  # [..., C, V]
    to = jnp.asarray(table.to_mask)[opt]
    in_from = jnp.take_along_axis(frm, a[..., None], axis=-1)[..., 0]
    in_to = jnp.take_along_axis(to, b[..., None], axis=-1)[..., 0]
    ok = jnp.where(jnp.asarray(table.increased)[opt], b > a, in_from & in_to)
    return jnp.all(ok | ~used, axis=-1)
