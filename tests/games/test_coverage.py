"""Guard coverage curves on real uniform burn-ins (Commons Harvest in its isolated process, and Overcooked)."""

import dataclasses
import json

import numpy as np
import pytest

from omjax.games.coverage import guard_key, converged_at, coverage_curve, doublings, main, points
from omjax.options import harvest
from omjax.options import meltingpot as mp
from omjax.options import overcooked as oc
from omjax.options.synthesis import synthesize


def test_doublings_and_convergence_point():
    assert doublings(1) == [1] and doublings(8) == [1, 2, 4, 8] and doublings(12) == [1, 2, 4, 8, 12]
    rows = [{"episodes": n, "new": new, "lost": lost} for n, new, lost in
            ((1, 4, 0), (2, 0, 0), (4, 1, 1), (8, 0, 0), (16, 0, 0))]
    assert converged_at(rows) == 4  # the 1 -> 2 plateau does not count: 4 changed the set again
    assert converged_at(rows[:3]) is None
    assert points("1,2,4,7") == [1, 2, 4, 7]
    for bad in ("1,1", "0,2", "a"):
        with pytest.raises(ValueError, match="--points must"):
            points(bad)


def test_assemble_numbers_a_burnin_from_its_episodes():
    """A burn-in of n + n is its first n solo then first n team episodes, `ep` in that order."""
    lib = harvest.LIBRARY.library("lib_a")
    f, g = len(lib.schema.read_set), len(lib.schema.transient)

    def episode(n, opt):
        return {"step": list(range(n)), "aid": [0] * n, "opt": [opt] * n, "target": [[1, 2]] * n,
                "features": [[0] * f] * n, "transient": [[0] * g] * n, "outcome": [0] * n, "changed": [True] * n}

    results = {(True, 0): episode(2, 0), (True, 1): episode(1, 1), (False, 0): episode(3, 2), (False, 1): episode(1, 0)}
    table = mp.assemble(lib, results, 1, 2)
    assert table.ep.tolist() == [0, 0, 1, 1, 1, 2] and table.solo.tolist() == [True, True] + [False] * 4
    assert table.opt.tolist() == [0, 0, 2, 2, 2, 0] and table.step.tolist() == [0, 1, 0, 1, 2, 0]
    assert mp.episode_keys(2, 1) == [(True, 0), (True, 1), (False, 0)]
    with pytest.raises(ValueError, match="no records of the solo episode 2"):
        mp.assemble(lib, results, 3, 0)
    with pytest.raises(ValueError, match="burn-in episode counts must lie in 0..500000, got solo -1"):
        mp.episode_keys(-1, 1)


@pytest.mark.slow
def test_harvest_burnins_reproduce_and_nest_across_invocations(monkeypatch, tmp_path):
    """The burn-in of 1 + 1 is the first solo and team episode of a 2 + 2 one run by another
    invocation (other environment, working directory and caller heap), record for record, and
    the curve over them adds up. Runtime: two engine servers of four 30-step episodes, about
    30 s on a quiet 2-core machine (each server imports and builds the engine twice; slow-marked)."""
    lib = harvest.LIBRARY
    small = lib.burnin("lib_a", 1, 1, seed=5, progress=False, episode_length=30)
    monkeypatch.setenv("OMJAX_TEST_PAD", "x" * 3000)
    monkeypatch.chdir(tmp_path)
    results = lib.burnin_episodes("lib_a", mp.episode_keys(2, 2), 5, progress=False, episode_length=30)
    again = lib.assemble("lib_a", results, 1, 1)
    assert 0 < len(small) < len(lib.assemble("lib_a", results, 2, 2))
    for field in dataclasses.fields(again):
        assert np.array_equal(getattr(again, field.name), getattr(small, field.name)), field.name
    rows = coverage_curve(lambda n: lib.assemble("lib_a", results, n, n), lib.SCHEMA, [1, 2])
    assert rows[0]["new"] == rows[0]["guards"] == len(rows[0]["guard_set"]) and rows[0]["lost"] == 0
    assert rows[1]["guards"] == rows[0]["guards"] + rows[1]["new"] - rows[1]["lost"]
    assert sorted(guard_key(g) for g in synthesize(small, lib.SCHEMA)) == rows[0]["guard_set"]
    assert all(0 <= r["menu_change"] <= 1 for r in rows)


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
