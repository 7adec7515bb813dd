"""Guard coverage vs burn-in size: how many burn-in episodes a game's guard set needs.

One uniform burn-in of `n_max` solo + `n_max` team episodes is run once; the guards are then
synthesised from its first n solo and first n team episodes for n = 1, 2, 4, ..., n_max (each
prefix is itself a uniform burn-in of n + n episodes). The curve is the number of guards per n;
it has converged at the smallest n from which no doubling adds or drops a guard, and the shipped
burn-in count (`DEFAULT_EPISODES`) must be at least that.

    python -m omjax.games.coverage --game cleanup --max 32 --out experiments/results/cpu/coverage_cleanup.png
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from omjax.games.registry import GAMES, library, resolve_variant
from omjax.options.records import RecordTable
from omjax.options.schema import Schema
from omjax.options.synthesis import Guard, SynthesisConfig, synthesize


def doublings(n_max: int) -> list[int]:
    """1, 2, 4, ... up to n_max (n_max itself last even when it is no power of two)."""
    if n_max < 1:
        raise ValueError(f"n_max must be >= 1, got {n_max}")
    out = [1]
    while out[-1] * 2 <= n_max:
        out.append(out[-1] * 2)
    return out if out[-1] == n_max else out + [n_max]


def prefix(table: RecordTable, solo_total: int, n: int) -> RecordTable:
    """The records of the first n solo and first n team episodes of a burn-in that ran
    `solo_total` solo episodes first (episode indices: solo 0.., team solo_total..)."""
    keep = np.where(table.solo, table.ep < n, (table.ep >= solo_total) & (table.ep < solo_total + n))
    return table.select(keep)


def _key(g: Guard) -> tuple:
    return g.opt, g.channel, tuple(sorted(g.when.items()))


def coverage_curve(table: RecordTable, schema: Schema, solo_total: int, counts: list[int],
                   config: SynthesisConfig = SynthesisConfig()) -> list[dict]:
    """Per n in `counts`: records, guards and guards new since the previous n."""
    rows, seen = [], set()
    for n in counts:
        sub = prefix(table, solo_total, n)
        guards = {_key(g) for g in synthesize(sub, schema, config)}
        rows.append({"episodes": n, "records": len(sub), "guards": len(guards), "new": len(guards - seen),
                     "lost": len(seen - guards)})
        seen = guards
    return rows


def converged_at(rows: list[dict]) -> int | None:
    """The smallest n from which the guard set never changes again up to the largest n, with at
    least one doubling after it (None when the last doubling still changed it)."""
    stable = None
    for a, b in zip(rows, rows[1:]):
        if b["new"] or b["lost"]:
            stable = None
        elif stable is None:
            stable = a["episodes"]
    return stable


def plot_coverage(curves: dict[str, list[dict]], path: str | Path) -> Path:
    fig = Figure(figsize=(6.0, 3.8))
    ax = fig.add_subplot()
    for label, rows in curves.items():
        ax.plot([r["episodes"] for r in rows], [r["guards"] for r in rows], marker="o", label=label)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("burn-in episodes (solo = team = n)")
    ax.set_ylabel("guards synthesised")
    ax.grid(alpha=0.3)
    ax.legend()
    ax.set_title("Guard coverage vs burn-in size")
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    return path


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m omjax.games.coverage", description=__doc__.split("\n\n")[0])
    p.add_argument("--game", required=True, choices=sorted(GAMES))
    p.add_argument("--layout", "--variant", dest="variant", default=None)
    p.add_argument("--max", type=int, default=32, help="largest n (solo = team episodes)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", required=True, help="PNG path (a .json summary is written beside it)")
    args = p.parse_args(argv)
    try:
        lib = library(args.game)
        variant = resolve_variant(lib, args.game, args.variant)
        counts = doublings(args.max)
    except ValueError as err:
        print(f"coverage: {err}", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    table = lib.burnin(variant, args.max, args.max, args.seed, progress=False)
    secs = time.perf_counter() - t0
    rows = coverage_curve(table, lib.SCHEMA, args.max, counts)
    label = f"{args.game} / {variant}"
    out = plot_coverage({label: rows}, args.out)
    summary = {"game": args.game, "variant": variant, "seed": args.seed, "burnin_s": round(secs, 1),
               "default_episodes": list(lib.DEFAULT_EPISODES), "curve": rows, "converged_at": converged_at(rows)}
    out.with_suffix(".json").write_text(json.dumps(summary, indent=2) + "\n")
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
