"""Guard coverage curves on real uniform burn-ins (Commons Harvest in its isolated process, and Overcooked)."""

import dataclasses
import json

import numpy as np
import pytest

from omjax.games.coverage import guard_key, converged_at, coverage_curve, doublings, main
from omjax.options import harvest
from omjax.options import overcooked as oc
from omjax.options.synthesis import synthesize


def test_doublings_and_convergence_point():
    assert doublings(1) == [1] and doublings(8) == [1, 2, 4, 8] and doublings(12) == [1, 2, 4, 8, 12]
    rows = [{"episodes": n, "new": new, "lost": lost} for n, new, lost in
            ((1, 4, 0), (2, 0, 0), (4, 1, 1), (8, 0, 0), (16, 0, 0))]
    assert converged_at(rows) == 4  # the 1 -> 2 plateau does not count: 4 changed the set again
    assert converged_at(rows[:3]) is None


@pytest.mark.slow
def test_harvest_curve_points_are_reproducible_burnins_of_their_size():
    """Each point is its own n + n burn-in in a fresh isolated process: a later burn-in of the
    same size gives the same records and guards, so the curve depends on neither `--max` nor
    the run. Runtime: three child processes of 200-step episodes, about 1 min on a quiet
    2-core machine (each child builds the engine; slow-marked)."""
    schema = harvest.LIBRARY.SCHEMA
    tables = {}

    def burn(n):
        tables[n] = harvest.LIBRARY.burnin("lib_a", n, n, seed=5, progress=False, episode_length=200)
        return tables[n]

    rows = coverage_curve(burn, schema, [1, 2])
    assert [r["episodes"] for r in rows] == [1, 2] and 0 < rows[0]["records"] < rows[1]["records"]
    assert rows[0]["new"] == rows[0]["guards"] == len(rows[0]["guard_set"]) and rows[0]["lost"] == 0
    assert rows[1]["guards"] == rows[0]["guards"] + rows[1]["new"] - rows[1]["lost"] and rows[1]["guards"] > 0
    first = tables[1]
    again = burn(1)
    for field in dataclasses.fields(again):
        assert np.array_equal(getattr(again, field.name), getattr(first, field.name)), field.name
    assert sorted(guard_key(g) for g in synthesize(again, schema)) == rows[0]["guard_set"]


@pytest.mark.slow
def test_overcooked_curve_and_command(tmp_path):
    rows = coverage_curve(lambda n: oc.burnin("forced_coordination", n, n, seed=0, progress=False, horizon=200,
                                              batch=16), oc.SCHEMA, doublings(16))
    assert [r["episodes"] for r in rows] == [1, 2, 4, 8, 16]
    assert rows[0]["new"] == rows[0]["guards"] and rows[-1]["guards"] > rows[0]["guards"]
    assert all(b["guards"] == a["guards"] + b["new"] - b["lost"] for a, b in zip(rows, rows[1:]))
    n = converged_at(rows)
    assert n is None or all(r["new"] == r["lost"] == 0 for r in rows if r["episodes"] > n)
    out = tmp_path / "cov.png"
    assert main(["--game", "overcooked", "--layout", "forced_coordination", "--max", "2", "--out", str(out)]) == 0
    summary = json.loads(out.with_suffix(".json").read_text())
    assert out.is_file() and [r["episodes"] for r in summary["curve"]] == [1, 2]
