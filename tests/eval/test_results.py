import pytest

from omjax.eval.results import EpisodeResult, read_results, render_report, write_results
from omjax.eval.stats import bootstrap_ci, mann_whitney


def _episode(policy, seed, team, agents, calls, interface="options"):
    return EpisodeResult(
        policy=policy,
        game="overcooked",
        layout="asymmetric_advantages",
        interface=interface,
        seed=seed,
        env_steps=100,
        team_return=team,
        agent_returns=tuple(agents),
        llm_calls=tuple(calls),
        parse_failures=(1, 0),
        invalid_actions=(0, 0),
        macro_counts=({"pick_onion": 3, "deliver": 1}, {"wait": 4}),
        primitive_counts=({"north": 60, "interact": 40}, {"stay": 100}),
    )


def test_episode_result_rates_and_roundtrip(tmp_path):
    e = _episode("ours", 10_000, 3.0, [3.0, 0.0], [40, 60])
    assert e.call_ratio == pytest.approx(100 / 200)
    assert e.parse_failure_rate == pytest.approx(1 / 100)
    path = write_results(tmp_path / "eval.jsonl", [e, _episode("ours", 10_001, 2.0, [2.0, 0.0], [30, 30])])
    back = read_results(path)
    assert back[0] == e and len(back) == 2


def test_episode_result_validates_agent_axis():
    with pytest.raises(ValueError, match="llm_calls has 1 entries but there are 2 agents"):
        _episode("ours", 0, 0.0, [0.0, 0.0], [1])


def test_read_results_names_bad_line(tmp_path):
    path = tmp_path / "eval.jsonl"
    path.write_text('{"policy": "x"}\n')
    with pytest.raises(ValueError, match="eval.jsonl:1"):
        read_results(path)


def test_report_has_ci_shares_and_pairwise_test():
    ours = [_episode("ours", 10_000 + i, float(5 + i % 3), [5.0, 0.0], [40, 60]) for i in range(8)]
    frozen = [_episode("frozen", 10_000 + i, 0.0, [0.0, 0.0], [50, 50]) for i in range(8)]
    report = render_report(ours + frozen)
    ci = bootstrap_ci([e.team_return for e in ours])
    assert f"[{ci.low:.2f}, {ci.high:.2f}]" in report
    # Agent 1 always waits: the macro table must show it.
    assert "| a1 | 0.0% | 0.0% | 100.0% |" in report
    test = mann_whitney([e.team_return for e in ours], [0.0] * 8)
    assert f"| ours | frozen | {test.u:.1f} | 1.000 | {test.p_value:.3g} |" in report


def test_cleanup_roles_in_eval_jsonl_and_report(tmp_path):
    import dataclasses
    import json

    episodes = [dataclasses.replace(_episode("ours", 10_000 + k, 5.0, [0.0, 5.0], [10, 10]), game="cleanup",
                                    layout="clean_up", agent_cleaned=(12 + k, 0)) for k in range(2)]
    path = write_results(tmp_path / "eval.jsonl", episodes)
    assert read_results(path) == episodes and json.loads(path.read_text().splitlines()[0])["agent_cleaned"] == [12, 0]
    report = render_report(episodes)
    assert "| agent | dirt cleaned | apples eaten |" in report
    assert "| a0 | 12.50 ± 0.71 | 0.00 ± 0.00 |" in report and "| a1 | 0.00 ± 0.00 | 5.00 ± 0.00 |" in report
    # Lines written before the field existed still read (no cleaning recorded).
    old = json.loads(path.read_text().splitlines()[0])
    del old["agent_cleaned"]
    (tmp_path / "old.jsonl").write_text(json.dumps(old) + "\n")
    assert read_results(tmp_path / "old.jsonl")[0].agent_cleaned == ()
    with pytest.raises(ValueError, match="agent_cleaned has 1 entries"):
        dataclasses.replace(episodes[0], agent_cleaned=(1,))
