"""Audits on scripted Overcooked policies whose behaviour is known, on the real env and executor."""

import numpy as np

from omjax.eval.audits import choice_fractions, macro_counts, plot_macro_histogram, plot_solo_test, plot_visit_heatmaps, visit_counts
from omjax.eval.option_rollout import episode_result, play_episode, solo_test_overcooked
from omjax.eval.scripted import cook, idle
from omjax.options.overcooked import library

HORIZON = 150


def test_idle_partner_shows_in_histogram_and_solo_test(tmp_path):
    lib = library("asymmetric_advantages")
    episode = play_episode(lib, [cook, idle], HORIZON)
    counts, names = macro_counts(episode.choices, n_agents=2)
    shares = dict(zip(names, choice_fractions(counts)[1]))
    assert shares["wait"] == 1.0  # agent 1 never does anything but wait
    worker = dict(zip(names, counts[0]))
    assert worker["pick_onion"] >= 3 and worker["place_in_pot"] >= 3 and worker["deliver"] >= 1
    assert episode.deliveries[0] >= 1 and episode.deliveries[1] == 0
    plot_macro_histogram(counts, names, tmp_path / "fig1.png")

    result = episode_result(episode, policy="cook+idle", layout="asymmetric_advantages", seed=10_000)
    assert result.team_return == episode.deliveries.sum() and result.macro_counts[1] == {"wait": len(
        [c for c in episode.choices if c["aid"] == 1])}
    # The idle agent stands at its start cell the whole episode.
    visits = visit_counts(episode.trajectory.positions, episode.trajectory.walls.shape)
    assert (visits[1] > 0).sum() == 1 and (visits[0] > 0).sum() >= 4
    plot_visit_heatmaps(visits, tmp_path / "fig3.png", walls=episode.trajectory.walls)

    # Asymmetric Advantages is solo-solvable: the cook delivers alone, the idler does not.
    aa = solo_test_overcooked("asymmetric_advantages", [cook, idle], HORIZON)
    assert aa.solo[0, 0] == episode.deliveries[0] and aa.solo[1, 0] == 0
    assert aa.solo_capable.tolist() == [True, False]
    assert not aa.coordination_certified

    # Forced Coordination control: nobody can deliver alone, two cooks handing items over can.
    fc = solo_test_overcooked("forced_coordination", [cook, cook], HORIZON)
    assert fc.team[0] >= 1
    np.testing.assert_array_equal(fc.solo, 0.0)
    assert fc.coordination_certified
    plot_solo_test({"asymmetric_advantages": aa, "forced_coordination": fc}, tmp_path / "solo.png")


def test_audit_solo_command(tmp_path):
    import json

    from omjax.eval.audit_cli import main

    out = tmp_path / "solo.png"
    assert main(["audit", "solo", "--policies", "cook", "idle", "--horizon", str(HORIZON), "--out", str(out)]) == 0
    summary = json.loads(out.with_suffix(".json").read_text())
    assert summary["asymmetric_advantages"]["solo_capable"] == [True, False]
    # With an idle partner nothing crosses the Forced Coordination counter: zero everywhere.
    assert summary["forced_coordination"]["team_mean"] == 0.0
    assert not summary["forced_coordination"]["coordination_certified"]
    assert out.is_file()
