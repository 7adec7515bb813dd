"""Post hoc: one set of adapters against the frozen base over every held-out range it has played.

    python -m experiments.lab.pooled_test

The `overcooked_q_last_burn` training (bit for bit the same in every run that retrained it) has
been held out on six seed ranges under four evaluation rules (T = 1 twice, T = 0.5 twice,
T = 0.25, and T = 1 realigned with L = 3). Per range this counts the episodes that delivered at
least one soup, trained and frozen, and tests them together with an exact test stratified by
range: given each range's total of delivering episodes, the trained team's count is
hypergeometric; the ranges' distributions are convolved, and the two-sided p-value sums every
total no more likely than the one observed. This summary was chosen after the last range's
result, so it is reported as post hoc (docs/results.md). Prints one line per range and the
pooled result; the last line is JSON.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
from scipy.stats import hypergeom

RESULTS = Path(__file__).resolve().parents[1] / "results" / "overcooked_learning"
RANGES = ("critic_burnin_2026-12-06", "critic_burnin_confirm_10020_2026-12-06", "critic_burnin_t05_10040_2026-12-06",
          "critic_burnin_t05_16_10060_2026-12-06", "critic_burnin_t025_14_10076_2026-12-06",
          "continuation_target_realign3_2026-12-06")
"""The run folders under `RESULTS`, one per held-out range, in the order they were played."""


def delivering(summary: dict, policy: str) -> tuple[int, int]:
    """(episodes with at least one delivery, episodes) of `policy` in a learning summary.json."""
    values = summary["policies"][policy]["deliveries_per_episode"]
    return sum(v > 0 for v in values), len(values)


def stratified_exact(counts: list[tuple[int, int, int]]) -> float:
    """Two-sided exact p of the trained team's total over strata of (trained k, frozen k, n a side)."""
    pmf, observed = np.array([1.0]), 0
    for trained, frozen, n in counts:
        pmf = np.convolve(pmf, hypergeom(2 * n, trained + frozen, n).pmf(np.arange(trained + frozen + 1)))
        observed += trained
    return float(pmf[pmf <= pmf[observed] * (1 + 1e-9)].sum())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--results", type=Path, default=RESULTS, help="the folder holding the RANGES runs")
    args = parser.parse_args(argv)
    counts, rows = [], []
    for run in RANGES:
        summary = json.loads((args.results / run / "summary.json").read_text())
        (trained, n), (frozen, n_frozen) = delivering(summary, "per_agent"), delivering(summary, "frozen")
        if n != n_frozen:
            raise SystemExit(f"{run}: {n} trained against {n_frozen} frozen episodes")
        seeds = summary["seeds"]
        print(f"seeds {seeds[0]}-{seeds[-1]}: trained {trained}/{n}, frozen {frozen}/{n}")
        counts.append((trained, frozen, n))
        rows.append({"run": run, "seeds": [seeds[0], seeds[-1]], "trained": trained, "frozen": frozen, "episodes": n})
    total = [sum(c[i] for c in counts) for i in range(3)]
    p = stratified_exact(counts)
    print(f"all: trained {total[0]}/{total[2]}, frozen {total[1]}/{total[2]}; stratified exact test, two-sided p = {p:.4f}")
    print(json.dumps({"ranges": rows, "trained": total[0], "frozen": total[1], "episodes": total[2], "p": p}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
