"""Guard coverage curves on real uniform burn-ins (a recorded Commons Harvest one, and Overcooked)."""

import json
from pathlib import Path

import pytest

from omjax.options import overcooked as oc
from omjax.options.records import load_npz
from omjax.games.coverage import converged_at, coverage_curve, doublings, main, prefix


def test_doublings_and_convergence_point():
    assert doublings(1) == [1] and doublings(8) == [1, 2, 4, 8] and doublings(12) == [1, 2, 4, 8, 12]
    rows = [{"episodes": n, "new": new, "lost": lost} for n, new, lost in
            ((1, 4, 0), (2, 0, 0), (4, 1, 1), (8, 0, 0), (16, 0, 0))]
    assert converged_at(rows) == 4  # the 1 -> 2 plateau does not count: 4 changed the set again
    assert converged_at(rows[:3]) is None


def test_curve_on_a_recorded_harvest_burnin():
    from omjax.options import harvest

    table = load_npz(Path(__file__).resolve().parents[1] / "data" / "meltingpot" / "burnin_harvest_lib_a.npz")
    rows = coverage_curve(table, harvest.LIBRARY.SCHEMA, 7, doublings(7))  # the shipped 7 + 7 episodes
    assert [r["episodes"] for r in rows] == [1, 2, 4, 7]
    assert [r["records"] for r in rows] == sorted(r["records"] for r in rows) and rows[-1]["records"] == len(table)
    assert sum(r["new"] - r["lost"] for r in rows) == rows[-1]["guards"] > 0


@pytest.mark.slow
def test_curve_prefixes_and_convergence(tmp_path):
    table = oc.burnin("forced_coordination", 16, 16, seed=0, progress=False, horizon=200, batch=16)
    sub = prefix(table, 16, 4)
    assert set(sub.ep[sub.solo]) == {0, 1, 2, 3} and set(sub.ep[~sub.solo]) == {16, 17, 18, 19}
    rows = coverage_curve(table, oc.SCHEMA, 16, doublings(16))
    assert [r["episodes"] for r in rows] == [1, 2, 4, 8, 16]
    assert rows[0]["new"] == rows[0]["guards"] and rows[-1]["guards"] > rows[0]["guards"]
    assert sum(r["new"] for r in rows) - sum(r["lost"] for r in rows) == rows[-1]["guards"]
    n = converged_at(rows)
    assert n is None or all(r["new"] == r["lost"] == 0 for r in rows if r["episodes"] > n)
    out = tmp_path / "cov.png"
    assert main(["--game", "overcooked", "--layout", "forced_coordination", "--max", "2", "--out", str(out)]) == 0
    summary = json.loads(out.with_suffix(".json").read_text())
    assert out.is_file() and [r["episodes"] for r in summary["curve"]] == [1, 2]
