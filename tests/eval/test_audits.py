import numpy as np
import pytest
from PIL import Image

from omjax.eval.audits import (
    SoloReport,
    choice_fractions,
    macro_counts,
    patch_survival,
    plot_macro_histogram,
    plot_patch_survival,
    plot_solo_test,
    plot_visit_heatmaps,
    solo_test,
    visit_counts,
)


def _assert_png(path):
    with Image.open(path) as image:
        assert image.format == "PNG"
        assert image.size[0] > 200 and image.size[1] > 200


def test_macro_counts_and_fractions(tmp_path):
    records = (
        [{"aid": 0, "opt": "pick_onion"}] * 6
        + [{"aid": 0, "opt": "place_in_pot"}] * 3
        + [{"aid": 0, "opt": "deliver"}]
        + [{"aid": 2, "opt": "wait"}] * 4
    )
    counts, names = macro_counts(records, n_agents=3, options=["wait"])
    assert names == ["wait", "pick_onion", "place_in_pot", "deliver"]
    np.testing.assert_array_equal(counts, [[0, 6, 3, 1], [0, 0, 0, 0], [4, 0, 0, 0]])
    fractions = choice_fractions(counts)
    np.testing.assert_allclose(fractions[0], [0.0, 0.6, 0.3, 0.1])
    np.testing.assert_array_equal(fractions[1], 0.0)  # never decided: zeros, not NaN
    np.testing.assert_array_equal(fractions[2], [1.0, 0.0, 0.0, 0.0])
    _assert_png(plot_macro_histogram(counts, names, tmp_path / "fig1.png"))


def test_macro_counts_rejects_bad_records():
    with pytest.raises(ValueError, match="aid 5"):
        macro_counts([{"aid": 5, "opt": "wait"}], n_agents=2)
    with pytest.raises(ValueError, match="lacks"):
        macro_counts([{"agent": 0, "opt": "wait"}], n_agents=2)


def test_patch_survival_depletion_and_plot(tmp_path):
    steps = 400
    t = np.arange(steps)
    # Frozen: every patch gone by step 200 in each episode; tuned: 2 or 3 patches survive.
    frozen = np.stack([np.clip(6 - (t // (30 + 3 * e)), 0, 6) for e in range(4)])
    tuned = np.stack([np.maximum(6 - t // 50, 2 + (e % 2)) for e in range(4)])
    frozen_curve = patch_survival(frozen)
    tuned_curve = patch_survival(tuned)
    # 6 - t // (30 + 3e) first reaches 0 at t = 6 * (30 + 3e).
    np.testing.assert_array_equal(frozen_curve.depletion_step, [180, 198, 216, 234])
    np.testing.assert_array_equal(tuned_curve.depletion_step, -1)
    assert tuned_curve.mean[-1] == pytest.approx(2.5)
    assert frozen_curve.mean[-1] == 0.0
    _assert_png(plot_patch_survival({"frozen": frozen, "tuned": tuned}, tmp_path / "fig2.png", n_patches=6))
    with pytest.raises(ValueError, match="episodes, steps"):
        patch_survival(np.zeros(10))


def test_visit_counts_and_heatmaps(tmp_path):
    # Agent 0 walks along row 1, agent 1 stays at (3, 4).
    positions = np.array([[[1, c], [3, 4]] for c in range(5)])  # [T=5, A=2, 2]
    counts = visit_counts(positions, (5, 6))
    assert counts.shape == (2, 5, 6)
    np.testing.assert_array_equal(counts[0, 1, :5], 1)
    assert counts[0].sum() == 5
    assert counts[1, 3, 4] == 5 and counts[1].sum() == 5
    walls = np.zeros((5, 6), dtype=bool)
    walls[0] = True
    _assert_png(plot_visit_heatmaps(counts, tmp_path / "fig3.png", walls=walls))
    with pytest.raises(ValueError, match="outside"):
        visit_counts(np.array([[[9, 0]]]), (5, 6))


def test_solo_report_verdicts(tmp_path):
    # Asymmetric Advantages: each agent can deliver alone, so team reward does not certify
    # coordination; Forced Coordination: nobody delivers alone, the team does.
    aa = solo_test(lambda seed: 7.0, lambda agent, seed: [4.0, 2.0][agent], n_agents=2, seeds=[0, 1, 2])
    fc = SoloReport(team=np.array([7.0, 8.0]), solo=np.zeros((2, 2)))
    assert not aa.coordination_certified
    assert aa.summary()["solo_mean"] == [4.0, 2.0]
    assert fc.coordination_certified
    assert fc.summary()["solo_capable"] == [False, False]
    assert (aa.verdict, fc.verdict) == ("solo-solvable", "coordination certified")
    nobody = SoloReport(team=np.zeros(3), solo=np.zeros((2, 3)))
    assert not nobody.coordination_certified and nobody.summary()["verdict"] == "nobody scored"
    _assert_png(plot_solo_test({"asymmetric_advantages": aa, "forced_coordination": fc}, tmp_path / "solo.png"))
    with pytest.raises(ValueError, match="PNG"):
        plot_solo_test({"aa": aa}, tmp_path / "solo.jpg")


def test_fire_clean_audit_counts_turns_right_before_the_beam(tmp_path):
    from omjax.eval.audits import fire_clean_audit, plot_fire_clean_audit

    # Agent 0 turns then fires (counted), fires twice more (not); agent 1 fires after a move;
    # the second episode starts agent 0 with a fire (nothing before it). Steps arrive unordered.
    records = [
        {"episode": 1, "agent": 0, "step": 1, "option": "turn left"},
        {"episode": 1, "agent": 0, "step": 0, "option": "noop"},
        {"episode": 1, "agent": 0, "step": 2, "option": "fire clean"},
        {"episode": 1, "agent": 0, "step": 3, "option": "fire_clean"},
        {"episode": 1, "agent": 1, "step": 0, "option": "forward"},
        {"episode": 1, "agent": 1, "step": 1, "option": "fire clean"},
        {"episode": 2, "agent": 0, "step": 0, "option": "fire clean"},
        {"episode": 2, "agent": 1, "step": 0, "option": "turn right"},
    ]
    audit = fire_clean_audit(records, 2)
    assert audit.fire_clean.tolist() == [3, 1] and audit.after_turn.tolist() == [1, 0]
    summary = audit.summary()
    assert summary["decisions"] == 8 and summary["shares"]["fire clean"] == 4 / 8
    with pytest.raises(ValueError, match="lacks"):
        fire_clean_audit([{"agent": 0, "step": 0, "option": "noop"}], 2)
    with pytest.raises(ValueError, match="outside"):
        fire_clean_audit([{"episode": 0, "agent": 2, "step": 0, "option": "noop"}], 2)
    assert plot_fire_clean_audit(audit, tmp_path / "fire.png").stat().st_size > 0
