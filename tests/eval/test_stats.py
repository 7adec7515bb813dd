import itertools
import math

import numpy as np
import pytest
from scipy import stats as scipy_stats

from omjax.eval.stats import (
    TABLE2_ROWS,
    bootstrap_ci,
    bootstrap_means,
    format_mean_std,
    mann_whitney,
    mean_std,
    table1_markdown,
    table2_markdown,
)

SAMPLE = np.array([3.0, 7.5, 0.0, 12.0, 6.0, 6.0, 9.5, 1.0, 4.0, 8.0, 10.0, 2.5, 5.0, 7.0, 11.0, 0.5, 6.5, 3.5, 9.0, 4.5])


def _slow_reference_ci(values, n_resamples, seed, confidence):
    """One resample per loop iteration, means by explicit summation, percentiles by hand."""
    rng = np.random.default_rng(seed)
    n = len(values)
    means = []
    for _ in range(n_resamples):
        idx = rng.integers(0, n, size=n)
        means.append(sum(values[i] for i in idx) / n)
    means.sort()

    def percentile(q):  # linear interpolation between closest ranks, numpy's default rule
        pos = q / 100.0 * (len(means) - 1)
        lo = math.floor(pos)
        hi = min(lo + 1, len(means) - 1)
        return means[lo] + (means[hi] - means[lo]) * (pos - lo)

    tail = 100.0 * (1.0 - confidence) / 2.0
    return percentile(tail), percentile(100.0 - tail)


def test_bootstrap_ci_matches_slow_reference_loop():
    ci = bootstrap_ci(SAMPLE, n_resamples=10_000, seed=1234)
    low, high = _slow_reference_ci(list(SAMPLE), 10_000, 1234, 0.95)
    assert ci.low == pytest.approx(low, abs=1e-12)
    assert ci.high == pytest.approx(high, abs=1e-12)
    assert ci.mean == pytest.approx(SAMPLE.mean())
    assert ci.n_resamples == 10_000
    assert ci.low < ci.mean < ci.high


def test_bootstrap_chunking_does_not_change_stream(monkeypatch):
    import omjax.eval.stats as stats_module

    full = bootstrap_means(SAMPLE, n_resamples=1000, seed=7)
    monkeypatch.setattr(stats_module, "_MAX_CHUNK_ELEMENTS", 3 * SAMPLE.size)
    chunked = bootstrap_means(SAMPLE, n_resamples=1000, seed=7)
    np.testing.assert_array_equal(full, chunked)


def test_bootstrap_ci_is_seeded_and_close_to_normal_theory():
    a = bootstrap_ci(SAMPLE, seed=5)
    b = bootstrap_ci(SAMPLE, seed=5)
    assert a == b
    # For a 20-point sample the percentile interval is close to mean ± 1.96 * s / sqrt(n)
    # (with the plug-in, ddof=0, standard error that the bootstrap estimates).
    half_width = 1.96 * SAMPLE.std(ddof=0) / math.sqrt(SAMPLE.size)
    assert (a.high - a.low) / 2 == pytest.approx(half_width, rel=0.06)


def test_bootstrap_ci_known_values():
    # Constant sample: every resample mean equals the constant.
    ci = bootstrap_ci([4.0] * 20)
    assert (ci.low, ci.mean, ci.high) == (4.0, 4.0, 4.0)
    assert ci.excludes_zero()
    # {0, 1}: resample means are 0, 0.5, 1 with probabilities 1/4, 1/2, 1/4, so the 2.5th and
    # 97.5th percentiles are exactly 0 and 1.
    ci = bootstrap_ci([0.0, 1.0], seed=0)
    assert (ci.low, ci.high) == (0.0, 1.0)
    assert not ci.excludes_zero()
    assert ci.format() == "0.50 [0.00, 1.00]"


@pytest.mark.parametrize("bad", [[], [[1.0, 2.0]], [1.0, float("nan")]])
def test_bootstrap_rejects_bad_samples(bad):
    with pytest.raises(ValueError):
        bootstrap_ci(bad)


def test_bootstrap_rejects_bad_confidence():
    with pytest.raises(ValueError, match="confidence"):
        bootstrap_ci(SAMPLE, confidence=1.5)


def _u_by_pair_counting(x, y):
    return sum(1.0 if a > b else 0.5 if a == b else 0.0 for a in x for b in y)


def test_mann_whitney_exact_small_sample_against_enumeration():
    # No ties, small samples: scipy uses the exact null distribution, which we rebuild by
    # enumerating every split of the pooled ranks.
    x = [1.2, 3.4, 5.6, 7.8]
    y = [0.5, 2.2, 2.9, 4.1, 4.4]
    result = mann_whitney(x, y)
    u = _u_by_pair_counting(x, y)
    assert result.u == u
    pooled = x + y
    null_u = [
        _u_by_pair_counting([pooled[i] for i in chosen], [pooled[i] for i in range(9) if i not in chosen])
        for chosen in itertools.combinations(range(9), 4)
    ]
    mean_u = len(x) * len(y) / 2
    p_exact = sum(abs(v - mean_u) >= abs(u - mean_u) for v in null_u) / len(null_u)
    assert result.p_value == pytest.approx(p_exact, rel=1e-9)
    assert result.effect_size == pytest.approx(u / 20)


def test_mann_whitney_with_ties_matches_normal_approximation_by_hand():
    x = [1, 2, 2, 3, 3, 3, 0, 0]
    y = [2, 3, 3, 4, 5, 5, 4, 2]
    result = mann_whitney(x, y)
    scipy_result = scipy_stats.mannwhitneyu(x, y, alternative="two-sided")
    assert result.u == scipy_result.statistic == _u_by_pair_counting(x, y)
    assert result.p_value == scipy_result.pvalue
    # Normal approximation with tie correction and continuity correction, by hand.
    n1, n2 = len(x), len(y)
    n = n1 + n2
    _, counts = np.unique(x + y, return_counts=True)
    tie_term = float(np.sum(counts**3 - counts))
    sigma = math.sqrt(n1 * n2 / 12 * ((n + 1) - tie_term / (n * (n - 1))))
    mu = n1 * n2 / 2
    z = (abs(result.u - mu) - 0.5) / sigma
    p_hand = math.erfc(z / math.sqrt(2))
    assert result.p_value == pytest.approx(p_hand, rel=1e-9)


def test_mann_whitney_separated_groups_and_identical_groups():
    frozen = [0.0] * 20
    ours = [5, 7, 6, 8, 9, 6, 7, 5, 4, 8, 7, 6, 9, 10, 6, 7, 5, 8, 6, 7]
    separated = mann_whitney(ours, frozen)
    assert separated.u == 400.0 and separated.effect_size == 1.0
    assert separated.p_value < 1e-7
    identical = mann_whitney(frozen, frozen)
    assert identical.p_value == 1.0


def test_mean_std_and_format():
    mean, std = mean_std([1.0, 2.0, 3.0, 4.0])
    assert mean == 2.5
    assert std == pytest.approx(math.sqrt(5.0 / 3.0))
    assert mean_std([1.0, 2.0, 3.0, 4.0], ddof=0)[1] == pytest.approx(math.sqrt(1.25))
    assert mean_std([7.0]) == (7.0, 0.0)
    assert format_mean_std([0.0, 0.0, 0.0]) == "0.00 ± 0.00"
    assert format_mean_std([1.0, 2.0, 3.0, 4.0], digits=1) == "2.5 ± 1.3"


def test_table1_layout_and_bold_rows():
    games = ["clean_up", "overcooked_aa"]
    data = {
        ("Qwen3-4B", "frozen", "clean_up"): [0, 0, 0, 0, 0],
        ("Qwen3-4B", "ours", "clean_up"): [90, 100, 95, 80, 85],
        ("Qwen3-4B", "frozen", "overcooked_aa"): [0, 0, 0, 0, 0],
        ("Qwen3-4B", "ours", "overcooked_aa"): [6, 7, 6, 5, 7],
    }
    md = table1_markdown(data, ["Qwen3-4B", "SmolLM2-135M"], games)
    lines = md.strip().splitlines()
    assert lines[0] == "| Base model | Cleanup (apples) | Overcooked AA (deliveries) |"
    assert lines[2] == "| Qwen3-4B (frozen, native actions) | 0.00 ± 0.00 | 0.00 ± 0.00 |"
    assert lines[3] == "| Qwen3-4B (ours) | **90.00 ± 7.91** | **6.20 ± 0.84** |"
    # A backbone with no runs yet keeps its rows, with a dash per cell.
    assert lines[4] == "| SmolLM2-135M (frozen, native actions) | – | – |"
    assert len(lines) == 2 + 4
    with pytest.raises(ValueError, match="variant"):
        table1_markdown({("Qwen3-4B", "tuned", "clean_up"): [1.0]}, ["Qwen3-4B"], games)


def test_table2_layout_bold_best_and_dagger():
    games = ["clean_up", "overcooked_aa"]
    data = {
        ("frozen_native", "clean_up"): [0.0] * 20,
        ("ours", "clean_up"): [93.0, 95.0],
        ("shared_lora", "clean_up"): [0.0, 2.0],
        ("native_magrpo", "overcooked_aa"): [0.0, 0.0],
        ("ours", "overcooked_aa"): [6.0, 8.0],
    }
    md = table2_markdown(data, games, collapsed=[("native_magrpo", "overcooked_aa")])
    lines = md.strip().splitlines()
    assert [line.split(" | ")[0].lstrip("| ") for line in lines[2:2 + len(TABLE2_ROWS)]] == [label for _, label in TABLE2_ROWS]
    assert "| Full method (ours) | **94.00 ± 1.41** | **7.00 ± 1.41** |" in lines
    assert "| Native + MAGRPO (Abl. A) | – | 0.00 ± 0.00 † |" in lines
    assert lines[-1].startswith("† Training collapsed")
    with pytest.raises(ValueError, match="unknown Table 2 cell"):
        table2_markdown({("bogus", "clean_up"): [1.0]}, games)
