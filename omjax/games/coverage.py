"""Guard coverage vs burn-in size: how many burn-in episodes a game's guard set needs.

For n = 1, 2, 4, ..., n_max the game's own burn-in of n solo + n team episodes is run (the one
`omjax guards --solo n --team n` runs, in the Melting Pot games a fresh fixed-layout process:
`omjax.envs.meltingpot.isolated`) and the guards are synthesised from it, so the point at n is
the guard file that command writes, whatever `--max` is, and two runs of one command draw the
same curve. (Prefixes of one large burn-in are no such thing: its team episodes start after all
`n_max` solo episodes, on other engine seeds and another stretch of the random stream.) The
curve has converged at the smallest n from which no doubling adds or drops a guard; the shipped
burn-in count (`DEFAULT_EPISODES`) is at least that, or the largest n measured where the curve
has not converged (Commons Harvest, `omjax.options.harvest`).

    python -m omjax.games.coverage --game harvest --layout lib_a --max 64 \
        --out experiments/results/cpu/coverage_harvest_lib_a.png
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from omjax.games.registry import GAMES, library, resolve_variant
from omjax.options.records import RecordTable, save_npz
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


def guard_key(g: Guard) -> str:
    """One line naming a guard (option, channel, literals): what the curve compares and lists."""
    return f"{g.opt} {g.channel} " + ", ".join(f"{k}={v}" for k, v in sorted(g.when.items()))


def coverage_curve(burnin: Callable[[int], RecordTable], schema: Schema, counts: list[int],
                   config: SynthesisConfig = SynthesisConfig()) -> list[dict]:
    """Per n in `counts`: the records and guards of `burnin(n)` (a burn-in of n solo + n team
    episodes), the guards new and lost since the previous n, and the guards themselves."""
    rows, seen = [], set()
    for n in counts:
        table = burnin(n)
        guards = {guard_key(g) for g in synthesize(table, schema, config)}
        rows.append({"episodes": n, "records": len(table), "guards": len(guards), "new": len(guards - seen),
                     "lost": len(seen - guards), "guard_set": sorted(guards)})
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
    p.add_argument("--save-records", default=None, metavar="DIR",
                   help="also write each point's burn-in to DIR/burnin_<game>_<variant>_<n>.npz "
                        "(`omjax guards --records` of one writes that point's guard file)")
    args = p.parse_args(argv)
    try:
        lib = library(args.game)
        variant = resolve_variant(lib, args.game, args.variant)
        counts = doublings(args.max)
    except ValueError as err:
        print(f"coverage: {err}", file=sys.stderr)
        return 2

    def burnin(n: int) -> RecordTable:
        table = lib.burnin(variant, n, n, args.seed, progress=False)
        if args.save_records:
            Path(args.save_records).mkdir(parents=True, exist_ok=True)
            save_npz(Path(args.save_records) / f"burnin_{args.game}_{variant}_{n}.npz", table)
        return table

    t0 = time.perf_counter()
    rows = coverage_curve(burnin, lib.SCHEMA, counts)
    secs = time.perf_counter() - t0
    label = f"{args.game} / {variant}"
    out = plot_coverage({label: rows}, args.out)
    summary = {"game": args.game, "variant": variant, "seed": args.seed, "burnins_s": round(secs, 1),
               "default_episodes": list(lib.DEFAULT_EPISODES), "curve": rows, "converged_at": converged_at(rows)}
    out.with_suffix(".json").write_text(json.dumps(summary, indent=2) + "\n")
    print(json.dumps({**summary, "curve": [{k: v for k, v in r.items() if k != "guard_set"} for r in rows]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
