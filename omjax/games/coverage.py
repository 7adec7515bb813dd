"""Guard coverage vs burn-in size: how many burn-in episodes a game's guard set needs.

For n = 1, 2, 4, ..., n_max the guards are synthesised from the game's own burn-in of n solo + n
team episodes, the records `omjax guards --solo n --team n` would synthesise from. In the Melting
Pot games every burn-in episode is a pure function of its key (`omjax.options.meltingpot.burnin`),
so the burn-in of n + n is the first n solo and n team episodes of any larger one: the curve runs
ONE burn-in, adding the episodes n .. 2n-1 of each kind at each doubling, and each point is still
exactly the records of that command. Other games (Overcooked) run each point's burn-in afresh.

The curve has converged at the smallest n from which no doubling adds or drops a guard. The
guard COUNT need not settle while the set still changes: the certificate (hide no logged success)
refines a guard into a two-literal one when a rare success under its one literal appears. So
each point also reports `menu_change`: the fraction of that burn-in's records whose instance the
inferred guards of n hide while those of the previous n do not, or the reverse (how much of what
the agents would be shown the doubling changed).

    python -m omjax.games.coverage --game harvest --layout lib_a --max 64 \
        --out runs/coverage_harvest_lib_a.png
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
from omjax.options.synthesis import Guard, SynthesisConfig, covered, synthesize


def doublings(n_max: int) -> list[int]:
    """1, 2, 4, ... up to n_max (n_max itself last even when it is no power of two)."""
    if n_max < 1:
        raise ValueError(f"n_max must be >= 1, got {n_max}")
    out = [1]
    while out[-1] * 2 <= n_max:
        out.append(out[-1] * 2)
    return out if out[-1] == n_max else out + [n_max]


def points(text: str) -> list[int]:
    """`--points`: "1,2,4,7" -> [1, 2, 4, 7] (increasing, each >= 1)."""
    try:
        out = [int(v) for v in text.split(",")]
    except ValueError:
        raise ValueError(f"--points must be comma-separated integers, got {text!r}") from None
    if not out or out[0] < 1 or any(b <= a for a, b in zip(out, out[1:])):
        raise ValueError(f"--points must increase from >= 1, got {text!r}")
    return out


def guard_key(g: Guard) -> str:
    """One line naming a guard (option, channel, literals): what the curve compares and lists."""
    return f"{g.opt} {g.channel} " + ", ".join(f"{k}={v}" for k, v in sorted(g.when.items()))


def hidden_records(guards: list[Guard], table: RecordTable, schema: Schema) -> np.ndarray:
    """bool [N]: records whose instance some inferred guard hides (explicit guards act live)."""
    hidden = np.zeros(len(table), bool)
    for g in guards:
        if g.channel == "inferred":
            hidden |= covered(g, table, schema)
    return hidden


def coverage_curve(burnin: Callable[[int], RecordTable], schema: Schema, counts: list[int],
                   config: SynthesisConfig = SynthesisConfig(),
                   on_row: Callable[[list[dict]], None] | None = None) -> list[dict]:
    """Per n in `counts`: the records and guards of `burnin(n)` (a burn-in of n solo + n team
    episodes), the guards new and lost since the previous n, `menu_change` (module docstring)
    and the guards themselves. `on_row(rows)` is called after each point."""
    rows, seen, previous = [], set(), []
    for n in counts:
        table = burnin(n)
        guards = synthesize(table, schema, config)
        keys = {guard_key(g) for g in guards}
        flips = hidden_records(guards, table, schema) != hidden_records(previous, table, schema)
        rows.append({"episodes": n, "records": len(table), "guards": len(keys), "new": len(keys - seen),
                     "lost": len(seen - keys), "menu_change": round(float(flips.mean()) if len(table) else 0.0, 6),
                     "guard_set": sorted(keys)})
        seen, previous = keys, guards
        if on_row is not None:
            on_row(rows)
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
    if all("menu_change" in r for rows in curves.values() for r in rows):
        ax2 = ax.twinx()
        for label, rows in curves.items():
            ax2.plot([r["episodes"] for r in rows], [100 * r["menu_change"] for r in rows], ls="--", marker=".",
                     alpha=0.6)
        ax2.set_ylabel("menu change vs previous n, % (dashed)")
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
    p.add_argument("--points", default=None, metavar="N,N,...",
                   help="the n to measure, increasing (default: the doublings up to --max)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", required=True, help="PNG path (a .json summary is written beside it)")
    p.add_argument("--save-records", default=None, metavar="DIR",
                   help="also write each point's burn-in to DIR/burnin_<game>_<variant>_<n>.npz "
                        "(`omjax guards --records` of one writes that point's guard file)")
    args = p.parse_args(argv)
    try:
        lib = library(args.game)
        variant = resolve_variant(lib, args.game, args.variant)
        counts = doublings(args.max) if args.points is None else points(args.points)
    except ValueError as err:
        print(f"coverage: {err}", file=sys.stderr)
        return 2

    results: dict = {}
    done = [0]  # episodes of each kind already in `results`

    def burnin(n: int) -> RecordTable:
        if hasattr(lib, "burnin_episodes"):  # episodes are pure functions of their keys: extend one burn-in
            keys = [(solo, k) for solo in (True, False) for k in range(done[0], n)]
            results.update(lib.burnin_episodes(variant, keys, args.seed, progress=False))
            done[0] = n
            table = lib.assemble(variant, results, n, n)
        else:
            table = lib.burnin(variant, n, n, args.seed, progress=False)
        if args.save_records:
            Path(args.save_records).mkdir(parents=True, exist_ok=True)
            save_npz(Path(args.save_records) / f"burnin_{args.game}_{variant}_{n}.npz", table)
        return table

    t0 = time.perf_counter()
    label = f"{args.game} / {variant}"

    def write(rows: list[dict]) -> None:
        out = plot_coverage({label: rows}, args.out)
        summary = {"game": args.game, "variant": variant, "seed": args.seed,
                   "burnins_s": round(time.perf_counter() - t0, 1), "default_episodes": list(lib.DEFAULT_EPISODES),
                   "curve": rows, "converged_at": converged_at(rows)}
        out.with_suffix(".json").write_text(json.dumps(summary, indent=2) + "\n")
        print(json.dumps({**summary, "curve": [{k: v for k, v in r.items() if k != "guard_set"} for r in rows[-1:]]}),
              flush=True)

    coverage_curve(burnin, lib.SCHEMA, counts, on_row=write)
    return 0


if __name__ == "__main__":
    sys.exit(main())
