"""Contract diagnostics (paper §5.1, outer repair loop): make a defective contract visible.

After a burn-in, three symptoms point at a defect in the Stage-1 schema rather than at the game:

* an option whose explicit failure rate is 100 % (defect 3: e.g. `deliver` instantiated only for an
  unreachable nearest station),
* an option that never succeeds, or never succeeds in the records synthesis may learn from
  (then every literal it was seen with becomes a guard and the option vanishes from the menu),
* a success whose effect features did not change across the execution (a vacuous success, the
  signature of an absolute-form or mis-attributed effect: defects 1 and 2). Options with a null
  effect (`wait`) promise no change and are exempt.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from omjax.options.records import RecordTable
from omjax.options.schema import EFFECT_FAIL, EXPLICIT_BASE, SUCCESS, Reason, Schema
from omjax.options.synthesis import SynthesisConfig, eligible_mask


@dataclasses.dataclass(frozen=True)
class OptionStats:
    opt: str
    n: int
    success: int
    effect_fail: int
    explicit: dict[str, int]
    empty_delta_successes: int
    eligible_successes: int

    @property
    def explicit_rate(self) -> float:
        return sum(self.explicit.values()) / self.n if self.n else 0.0


@dataclasses.dataclass(frozen=True)
class Diagnostics:
    stats: list[OptionStats]
    always_explicit: list[str]  # options whose every execution failed explicitly
    never_succeed: list[str]  # options with records but no success
    never_succeed_eligible: list[str]  # options with eligible records but no eligible success
    never_run: list[str]  # options with no records at all (the burn-in never reached them)
    empty_delta: list[str]  # options with at least one success whose delta is empty

    @property
    def clean(self) -> bool:
        return not (self.always_explicit or self.never_succeed or self.never_succeed_eligible
                    or self.empty_delta or self.never_run)

    def to_dict(self) -> dict:
        return {"always_explicit": self.always_explicit, "never_succeed": self.never_succeed,
                "never_succeed_eligible": self.never_succeed_eligible,
                "never_run": self.never_run, "empty_delta": self.empty_delta,
                "per_option": [dataclasses.asdict(s) for s in self.stats]}

    def render(self) -> str:
        lines = [f"{'option':<20} {'n':>8} {'success':>8} {'eff_fail':>8} {'explicit':>9}  reasons"]
        for s in self.stats:
            reasons = ", ".join(f"{k}:{v}" for k, v in s.explicit.items() if v)
            lines.append(f"{s.opt:<20} {s.n:>8} {s.success:>8} {s.effect_fail:>8} "
                         f"{100 * s.explicit_rate:>8.1f}%  {reasons}")
        for name, lst in (("100% explicit failure", self.always_explicit),
                          ("never succeeds", self.never_succeed),
                          ("never succeeds in synthesis records", self.never_succeed_eligible),
                          ("never run", self.never_run),
                          ("success with empty delta", self.empty_delta)):
            lines.append(f"{name}: {', '.join(lst) if lst else '-'}")
        return "\n".join(lines)


def diagnose(table: RecordTable, schema: Schema, config: SynthesisConfig = SynthesisConfig(),
             options: Sequence[str] | None = None) -> Diagnostics:
    """Per-option statistics of `table`; `options` restricts them to one candidate library's
    options when `schema` is the union of several (the others could never have run)."""
    eligible = eligible_mask(table, schema, config)
    stats = []
    for o, spec in enumerate(schema.options):
        if options is not None and spec.name not in options:
            continue
        rows = table.opt == o
        out = table.outcome[rows]
        succ = out == SUCCESS
        empty = 0 if spec.effect.is_null else int(np.sum(succ & ~table.changed[rows]))
        stats.append(OptionStats(
            opt=spec.name, n=int(rows.sum()), success=int(succ.sum()),
            effect_fail=int(np.sum(out == EFFECT_FAIL)),
            explicit={r.name: int(np.sum(out == EXPLICIT_BASE + r)) for r in Reason},
            empty_delta_successes=empty,
            eligible_successes=int(np.sum(succ & eligible[rows]))))
    return Diagnostics(
        stats=stats,
        always_explicit=[s.opt for s in stats if s.n and s.explicit_rate == 1.0],
        never_succeed=[s.opt for s in stats if s.n and s.success == 0],
        never_succeed_eligible=[s.opt for s in stats
                                if np.any(eligible & (table.opt == schema.option_index(s.opt)))
                                and s.eligible_successes == 0],
        never_run=[s.opt for s in stats if s.n == 0],
        empty_delta=[s.opt for s in stats if s.empty_delta_successes])
