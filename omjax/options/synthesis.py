"""Guard synthesis (paper §5.1 Stage 3) and guard-file IO.

Two channels over a burn-in `RecordTable`, per option:

* explicit: a typed executor failure seen at least `min_explicit` times becomes a guard
  `{"__reason__": <Reason>}`; menu assembly re-checks it live (NoPath by the planner).
* inferred: every 1- and 2-literal conjunction over the read set is adopted iff it covers at
  least `min_support` failures (any non-success outcome) and zero successes (the acceptance
  certificate). A 2-literal conjunction containing an adopted 1-literal guard is dropped.

Options whose effect has no private part (`OptionSpec.solo_only`) are synthesised from solo
records only (the paper's rule), except where the option never succeeded in any solo episode
(default `solo_only_records="auto"`): then solo data holds no evidence for it (every literal would
become a guard and hide it outright, e.g. `start_cooking` on forced_coordination, where no single
agent can fill a pot), and it learns from the uncontested records instead: solo records plus team
records in which no other agent acted on the same target on the execution's final step. Effect
deltas are taken across the acting agent's own final step, so that is the only way a partner
could still forge the effect. Everything runs on the columnar table with `np.bincount`, so a
million records take a fraction of a second.

A guard file is jsonl, one `{"opt", "channel", "when", "support"}` object per line.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os

import numpy as np

from omjax.options.records import RecordTable
from omjax.options.schema import EXPLICIT_BASE, NUM_OUTCOMES, SUCCESS, Reason, Schema

REASON_KEY = "__reason__"
_JOINT_LIMIT = 1 << 22  # cells of the joint literal-count table before falling back to per-shape counts


@dataclasses.dataclass(frozen=True)
class SynthesisConfig:
    """Thresholds of guard synthesis (the paper's values are the defaults)."""

    min_explicit: int = 5
    """a typed failure reason seen at least this often (per option) becomes an explicit guard"""
    min_support: int = 5
    """an inferred conjunction must cover at least this many failures (and zero successes)"""
    max_literals: int = 2
    """conjunction size limit for the inferred channel (1 or 2)"""
    solo_only_records: str = "auto"
    """records that options without a private effect part learn from: "solo" (solo episodes
    only, the paper's rule), "uncontested" (solo records plus team records in which no other
    agent acted on the same target on the execution's final step), or "auto" (per option: "solo"
    if the option ever succeeded in a solo episode, else "uncontested")"""

    def __post_init__(self):
        if self.min_explicit < 1 or self.min_support < 1:
            raise ValueError(f"synthesis thresholds must be >= 1, got min_explicit={self.min_explicit}, "
                             f"min_support={self.min_support}")
        if self.max_literals not in (1, 2):
            raise ValueError(f"max_literals must be 1 or 2, got {self.max_literals}")
        if self.solo_only_records not in ("solo", "uncontested", "auto"):
            raise ValueError(f"solo_only_records must be 'solo', 'uncontested' or 'auto', "
                             f"got {self.solo_only_records!r}")


@dataclasses.dataclass(frozen=True)
class Guard:
    """An adopted guard: hide instances of `opt` when `when` holds (all literals)."""

    opt: str
    channel: str  # "explicit" | "inferred"
    when: dict[str, str]
    support: int

    @property
    def reason(self) -> Reason | None:
        return Reason[self.when[REASON_KEY]] if self.channel == "explicit" else None

    def to_dict(self) -> dict:
        return {"opt": self.opt, "channel": self.channel, "when": dict(self.when), "support": int(self.support)}


def eligible_mask(table: RecordTable, schema: Schema, config: SynthesisConfig = SynthesisConfig()) -> np.ndarray:
    """bool [N]: records synthesis may learn from.

    Options whose effect has no private part could have their shared-state delta caused by
    another agent; they learn only from records where that cannot happen (`solo_only_records`).
    """
    solo_only = np.array([o.solo_only for o in schema.options], bool)  # [O]
    if config.solo_only_records == "solo":
        use_solo = solo_only
    elif config.solo_only_records == "uncontested":
        use_solo = np.zeros_like(solo_only)
    else:
        solo_succ = np.bincount(table.opt[table.solo & (table.outcome == SUCCESS)], minlength=len(solo_only))
        use_solo = solo_only & (solo_succ > 0)
    safe = np.where(use_solo[table.opt], table.solo, table.solo | ~table.contested)
    return ~solo_only[table.opt] | safe


def synthesize(table: RecordTable, schema: Schema, config: SynthesisConfig = SynthesisConfig()) -> list[Guard]:
    """Adopted guards, in option order; explicit before inferred, 1-literal before 2-literal."""
    keep = eligible_mask(table, schema, config)
    opt = table.opt[keep].astype(np.int64)  # [n]
    outcome = table.outcome[keep].astype(np.int64)
    feats = table.features[keep].astype(np.int64)  # [n, F]
    succ = (outcome == SUCCESS).astype(np.int64)
    num_o = len(schema.options)
    sizes = [len(f.values) for f in schema.read_set]
    num_f = len(sizes)
    explicit = np.bincount(opt * NUM_OUTCOMES + outcome, minlength=num_o * NUM_OUTCOMES).reshape(num_o, -1)
    # Literal counts[o, value..., success]. With small read sets one bincount of the joint table
    # serves every 1- and 2-literal conjunction (marginals); otherwise one bincount per shape.
    if num_o * math.prod(sizes) * 2 <= _JOINT_LIMIT:
        code = np.zeros(len(opt), np.int64)
        for f, v in enumerate(sizes):
            code = code * v + feats[:, f]
        joint = np.bincount((opt * math.prod(sizes) + code) * 2 + succ,
                            minlength=num_o * math.prod(sizes) * 2).reshape(num_o, *sizes, 2)

        def counts(*fs):
            return joint.sum(axis=tuple(1 + f for f in range(num_f) if f not in fs))
    else:
        def counts(*fs):
            key, shape = opt, [num_o]
            for f in fs:
                key, shape = key * sizes[f] + feats[:, f], shape + [sizes[f]]
            return np.bincount(key * 2 + succ, minlength=math.prod(shape) * 2).reshape(*shape, 2)

    singles = [counts(f) for f in range(num_f)]
    pairs = {}
    if config.max_literals >= 2:
        pairs = {(f1, f2): counts(f1, f2) for f1 in range(num_f) for f2 in range(f1 + 1, num_f)}

    def pure(counts):  # [..., 2] (failures, successes) -> adopted cells
        return (counts[..., 0] >= config.min_support) & (counts[..., 1] == 0)

    guards: list[Guard] = []
    for o, spec in enumerate(schema.options):
        for reason in Reason:
            count = int(explicit[o, EXPLICIT_BASE + reason])
            if count >= config.min_explicit:
                guards.append(Guard(spec.name, "explicit", {REASON_KEY: reason.name}, count))
        adopted_single: set[tuple[int, int]] = set()
        for f, counts in enumerate(singles):
            for v in np.nonzero(pure(counts[o]))[0]:
                adopted_single.add((f, int(v)))
                guards.append(Guard(spec.name, "inferred",
                                    {schema.read_set[f].name: schema.read_set[f].values[v]}, int(counts[o, v, 0])))
        for (f1, f2), counts in pairs.items():
            for v1, v2 in zip(*np.nonzero(pure(counts[o]))):
                if (f1, int(v1)) in adopted_single or (f2, int(v2)) in adopted_single:
                    continue
                when = {schema.read_set[f1].name: schema.read_set[f1].values[v1],
                        schema.read_set[f2].name: schema.read_set[f2].values[v2]}
                guards.append(Guard(spec.name, "inferred", when, int(counts[o, v1, v2, 0])))
    return guards


def covered(guard: Guard, table: RecordTable, schema: Schema) -> np.ndarray:
    """bool [N]: records of the guard's option whose read-set features satisfy an inferred guard."""
    if guard.channel != "inferred":
        raise ValueError("only inferred guards are feature conjunctions; explicit guards are checked live")
    mask = table.opt == schema.option_index(guard.opt)
    for name, value in guard.when.items():
        feat = schema.read_feature(name)
        mask &= table.features[:, schema.read_index(name)] == feat.code(value)
    return mask


def certificate_violations(guards: list[Guard], table: RecordTable, schema: Schema,
                           config: SynthesisConfig = SynthesisConfig()) -> int:
    """Number of eligible logged successes hidden by some inferred guard (must be 0)."""
    succ = (table.outcome == SUCCESS) & eligible_mask(table, schema, config)
    hidden = np.zeros(len(table), bool)
    for g in guards:
        if g.channel == "inferred":
            hidden |= covered(g, table, schema)
    return int(np.sum(hidden & succ))


# ---------------------------------------------------------------------- guard files
def validate_guard(guard: Guard, schema: Schema) -> Guard:
    """Raise a clear error if a guard does not fit the schema."""
    schema.option_index(guard.opt)
    if guard.channel == "explicit":
        if set(guard.when) != {REASON_KEY} or guard.when[REASON_KEY] not in Reason.__members__:
            raise ValueError(f"explicit guard for {guard.opt!r} must be when={{{REASON_KEY!r}: <Reason>}}, "
                             f"reasons: {', '.join(Reason.__members__)}; got {guard.when}")
    elif guard.channel == "inferred":
        if not guard.when:
            raise ValueError(f"inferred guard for {guard.opt!r} has no literals")
        for name, value in guard.when.items():
            schema.read_feature(name).code(value)
    else:
        raise ValueError(f"guard for {guard.opt!r}: channel must be 'explicit' or 'inferred', got {guard.channel!r}")
    if guard.support < 0:
        raise ValueError(f"guard for {guard.opt!r}: negative support {guard.support}")
    return guard


def write_guards(path: str | os.PathLike, guards: list[Guard]) -> None:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        for g in guards:
            f.write(json.dumps(g.to_dict()) + "\n")


def read_guards(path: str | os.PathLike, schema: Schema) -> list[Guard]:
    guards = []
    with open(path) as f:
        for line_no, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                guard = Guard(opt=row["opt"], channel=row["channel"], when=dict(row["when"]),
                              support=int(row["support"]))
                guards.append(validate_guard(guard, schema))
            except (KeyError, ValueError, TypeError, json.JSONDecodeError) as err:
                raise ValueError(f"{path}:{line_no}: bad guard record: {err}") from err
    return guards
