"""`omjax eval` end to end: train one round with a tiny random model, evaluate on held-out seeds."""

import json

import pytest

from omjax.eval.cli import main, parse_seeds
from omjax.eval.results import Trajectory, read_results, trajectory_path

SMALL = ["env.game=overcooked", "env.layout=asymmetric_advantages", "env.n_agents=2", "env.horizon=3",
         "train.rollouts=2", "train.rounds=1", "train.minibatch_size=4", "lora.rank=2", "lora.targets=q,v",
         "run.progress=false", "policy.action_interface=native"]


def test_parse_seeds():
    assert parse_seeds("10000-10003") == [10000, 10001, 10002, 10003]
    assert parse_seeds("10000,10005") == [10000, 10005]
    with pytest.raises(ValueError, match="LO-HI"):
        parse_seeds("10005-10000")
    with pytest.raises(ValueError, match="LO-HI"):
        parse_seeds("ten")


def test_eval_checkpoint_and_frozen_base(tiny_model_dir, tmp_path):
    from omjax.config import load_config
    from omjax.train.trainer import Trainer

    run = tmp_path / "native_run"
    overrides = [*SMALL, f"model.name={tiny_model_dir}"]
    Trainer(load_config(None, [*overrides, f"run.out_dir={run}"])).run()

    assert main(["eval", "--checkpoint", str(run), "--seeds", "10000-10001", "--quiet"]) == 0
    results = read_results(run / "eval" / "eval.jsonl")
    assert [r.seed for r in results] == [10000, 10001]
    first = results[0]
    assert first.interface == "native" and first.env_steps == 3
    assert first.call_ratio == 1.0  # one letter per agent per step
    assert sum(sum(c.values()) for c in first.primitive_counts) == 2 * 3
    assert first.macro_counts == ({}, {})
    traj = Trajectory.load(trajectory_path(run / "eval", 10000))
    assert traj.positions.shape == (3, 2, 2)
    decisions = (run / "eval" / "decisions" / "seed10000.jsonl").read_text().splitlines()
    assert len(decisions) == 6 and json.loads(decisions[0])["option"] in first.primitive_counts[0]

    # A rerun skips finished seeds and only plays the new one.
    before = (run / "eval" / "eval.jsonl").read_text()
    assert main(["eval", "--checkpoint", str(run), "--seeds", "10000-10002", "--quiet"]) == 0
    after = (run / "eval" / "eval.jsonl").read_text()
    assert after.startswith(before) and len(after.splitlines()) == 3

    # The frozen base from the config, compared against the trained run.
    frozen_out = tmp_path / "frozen_eval"
    assert main(["eval", "--config", str(run / "config.yaml"), "--label", "frozen", "--out", str(frozen_out),
                 "--seeds", "10000-10002", "--compare", str(run / "eval"), "--quiet"]) == 0
    report = (frozen_out / "report.md").read_text()
    assert "| frozen |" in report and "| native_run |" in report
    assert "two-sided Mann-Whitney U" in report


def test_eval_reports_bad_arguments(tmp_path, capsys):
    assert main(["eval", "--checkpoint", str(tmp_path), "--quiet"]) == 2
    assert "not a run directory" in capsys.readouterr().err
    assert main(["eval", "--checkpoint", str(tmp_path), "--episodes", "3", "--seeds", "10000-10001"]) == 2
    assert "names 2 seeds" in capsys.readouterr().err
