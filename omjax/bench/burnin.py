"""`python -m omjax.bench burnin`: the paper's Stage-2 burn-in plus Stage-3 synthesis, timed.

The paper's burn-in (2,000 solo + 2,000 two-agent asymmetric_advantages episodes, ~550k
decisions) took ~70 s on one CPU core. This runs the same burn-in with the jitted, vmapped
executor (`omjax.options.overcooked.burnin`), then the same library as a plain-Python per-env loop
on the reference simulator (`burnin_python`) for a few episodes of the same batches (its
decisions/s is extrapolated to the full burn-in, and its records are checked equal to the jitted
ones), then guard synthesis. Compile time is reported apart: the first call compiles (or loads
the persistent compilation cache), the timed call reuses the compiled program.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from omjax.jax_cache import enable_compilation_cache
from omjax.options import overcooked as oc
from omjax.options.synthesis import certificate_violations, synthesize

PAPER_SECONDS = 70.0
PAPER_DECISIONS = 550_000


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m omjax.bench burnin")
    p.add_argument("--layout", default="asymmetric_advantages")
    p.add_argument("--solo", type=int, default=2000)
    p.add_argument("--team", type=int, default=2000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--python-episodes", type=int, default=4,
                   help="episodes per mode (solo, team) for the plain-Python loop")
    args = p.parse_args(argv)
    if min(args.solo, args.team) < args.python_episodes or args.python_episodes < 1:
        p.error("need --python-episodes >= 1 and no more than --solo / --team")

    enable_compilation_cache()
    lib = oc.library(args.layout)

    t0 = time.perf_counter()
    oc.burnin(args.layout, args.solo, args.team, args.seed, progress=False)
    first_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    table = oc.burnin(args.layout, args.solo, args.team, args.seed, progress=True)
    jax_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    guards = synthesize(table, oc.SCHEMA)
    synth_s = time.perf_counter() - t0
    assert certificate_violations(guards, table, oc.SCHEMA) == 0

    # The plain-Python loop replays the first episodes of the first solo and team batches with
    # the jitted run's own option choices, so the two must log identical records.
    n = args.python_episodes
    batch = 1000
    py_records, py_s, identical = 0, 0.0, True
    for solo, ep0, count in ((True, 0, args.solo), (False, args.solo, args.team)):
        choices = oc.burnin_choices(args.seed, ep0, min(batch, count), oc.HORIZON, lib)[:n]
        t0 = time.perf_counter()
        py = oc.burnin_python(args.layout, [(ep0 + e, solo) for e in range(n)], choices, progress=True)
        py_s += time.perf_counter() - t0
        py_records += len(py)
        jx = table.select((table.ep >= ep0) & (table.ep < ep0 + n))
        op, oj = np.lexsort((py.aid, py.step, py.ep)), np.lexsort((jx.aid, jx.step, jx.ep))
        identical &= len(py) == len(jx) and all(
            np.array_equal(getattr(py, c)[op], getattr(jx, c)[oj])
            for c in ("ep", "step", "aid", "opt", "target", "features", "outcome", "changed", "contested"))

    jax_rate = len(table) / jax_s
    py_rate = py_records / py_s
    paper_rate = PAPER_DECISIONS / PAPER_SECONDS
    episodes = args.solo + args.team
    rows = [("jitted + vmapped (JAX)", episodes, len(table), jax_s, jax_rate),
            ("plain Python per env", 2 * n, py_records, py_s, py_rate)]
    print(f"\nburn-in {args.layout}: {args.solo} solo + {args.team} team episodes of {oc.HORIZON} steps")
    print(f"{'implementation':<24} {'episodes':>9} {'decisions':>10} {'seconds':>9} {'decisions/s':>12}")
    for name, eps, dec, secs, rate in rows:
        print(f"{name:<24} {eps:>9} {dec:>10} {secs:>9.2f} {rate:>12,.0f}")
    print(f"ratio JAX / Python (same run, Python extrapolated from {2 * n} episodes): {jax_rate / py_rate:,.1f}x")
    print(f"plain-Python records identical to the jitted run's: {identical}")
    print(f"paper: {PAPER_DECISIONS:,} decisions in {PAPER_SECONDS:.0f} s ({paper_rate:,.0f}/s, one core; "
          f"reported, not measured here) -> JAX is {jax_rate / paper_rate:,.1f}x that rate")
    print(f"first call (compile or compilation-cache load + run): {first_s:.2f} s")
    print(f"synthesis: {len(guards)} guards in {synth_s:.3f} s; burn-in + synthesis: {jax_s + synth_s:.2f} s "
          f"(target < 7 s)")
    print(json.dumps({
        "bench": "burnin", "layout": args.layout, "episodes": episodes, "decisions": len(table),
        "jax_s": round(jax_s, 3), "jax_decisions_per_s": round(jax_rate), "python_episodes": 2 * n,
        "python_decisions": py_records, "python_s": round(py_s, 3), "python_decisions_per_s": round(py_rate),
        "ratio": round(jax_rate / py_rate, 1), "records_identical": bool(identical),
        "synthesis_s": round(synth_s, 3), "guards": len(guards), "total_s": round(jax_s + synth_s, 3),
        "first_call_s": round(first_s, 3), "paper_decisions_per_s": round(paper_rate),
        "speedup_vs_paper": round(jax_rate / paper_rate, 1)}))
    return 0
