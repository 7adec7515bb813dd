"""Held-out episodes of a bank and of the frozen base (`omjax.eval.heldout`): played through the
shipped decision path on a tiny random model, kept and resumed per batch, summarised against
hand-computed statistics."""

import numpy as np
import pytest

from omjax.eval import heldout
from omjax.eval.stats import bootstrap_ci


@pytest.fixture(scope="module")
def trainer(tiny_model_dir, tmp_path_factory):
    from omjax.config import load_config
    from omjax.train.trainer import Trainer

    out = tmp_path_factory.mktemp("heldout")
    cfg = load_config(None, [f"model.name={tiny_model_dir}", "env.layout=asymmetric_advantages", "env.horizon=4",
                             "env.reward_shaping=1.0", "lora.rank=2", "lora.targets=q,v", "run.progress=false",
                             f"run.out_dir={out}"])
    trainer = Trainer(cfg)
    yield trainer
    trainer.game.close()


def test_evaluate_plays_one_row_per_seed_and_replays_them(trainer):
    frozen = trainer.init_state().bank  # B = 0: the base itself
    rows = heldout.evaluate(trainer, frozen, [10000, 10001, 10002], batch=2)
    assert [(r["seed"], r["horizon"]) for r in rows] == [(10000, 4), (10001, 4), (10002, 4)]
    for r in rows:
        assert len(r["agent_units"]) == 2 and r["units"] == pytest.approx(sum(r["agent_units"]))
        assert r["patches_alive"] is None  # Overcooked has no patches
        assert r["choices"] and {c["aid"] for c in r["choices"]} <= {0, 1}
        assert all(isinstance(c["opt"], str) for c in r["choices"])
    # The same seeds in the same batches are the same episodes, choice for choice.
    again = heldout.evaluate(trainer, frozen, [10000, 10001, 10002], batch=2)
    assert again == rows


def test_load_or_play_plays_only_the_batches_it_lacks(trainer, tmp_path):
    frozen = trainer.init_state().bank
    played = []

    def play(chunk):
        played.append(list(chunk))
        return heldout.evaluate(trainer, frozen, chunk, len(chunk))

    path = tmp_path / "frozen" / "eval.jsonl"
    first = heldout.load_or_play(path, [10000, 10001], 2, play)
    assert played == [[10000, 10001]] and [e["seed"] for e in first] == [10000, 10001]
    assert heldout.load_or_play(path, [10000, 10001, 10002, 10003], 2, play)[:2] == first
    assert played == [[10000, 10001], [10002, 10003]]  # only the new batch
    assert len(path.read_text().splitlines()) == 4
    assert heldout.load_or_play(path, [10000, 10001, 10002, 10003, 10004], 2, None)[-1]["seed"] == 10003  # plays nothing


def episode(seed, units, shaped, choices):
    return {"seed": seed, "horizon": 150, "units": units, "agent_units": [units, 0.0], "shaped_return": shaped,
            "patches_alive": None, "choices": [{"aid": a, "opt": o} for a, o in choices]}


def test_summarize_and_compare_against_hand_computed_values():
    trained = [episode(10000, 1.0, 50.0, [(0, "deliver"), (1, "wait")]), episode(10001, 0.0, 40.0, [(0, "wait")]),
               episode(10002, 2.0, 60.0, [(0, "deliver"), (1, "deliver")])]
    frozen = [episode(s, 0.0, r, [(0, "wait"), (1, "wait")]) for s, r in ((10000, 30.0), (10001, 20.0), (10002, 25.0))]
    row = heldout.summarize(trained, "deliveries", 2)
    ci = bootstrap_ci([1.0, 0.0, 2.0])
    assert row["deliveries_mean"] == 1.0 and row["ci95"] == [ci.low, ci.high] and row["episodes"] == 3
    assert row["deliveries_per_episode"] == [1.0, 0.0, 2.0] and row["scoring_episodes"] == 2
    assert row["macro_counts"] == {"deliver": [2, 1], "wait": [1, 1]}  # option -> [A]
    assert row["shaped_return_mean"] == 50.0 and "patches_alive_mean" not in row
    base = heldout.summarize(frozen, "deliveries", 2)
    assert base["ci95"] == [0.0, 0.0] and base["scoring_episodes"] == 0
    test = heldout.compare(trained, frozen)
    # U of trained: 1 > 0 three times, 2 > 0 three times, 0 = 0 three ties (1/2 each).
    assert test["u"] == 7.5 and test["effect"] == pytest.approx(7.5 / 9)
    # Normal approximation with the tie and continuity corrections (scipy's for tied samples):
    # var U = n1 n2 / 12 ((N + 1) - sum(t^3 - t) / (N (N - 1))) = 9 / 12 (7 - 60 / 30) = 3.75.
    z = (7.5 - 4.5 - 0.5) / np.sqrt(3.75)
    from math import erfc, sqrt

    assert test["p"] == pytest.approx(erfc(z / sqrt(2)), rel=1e-6)
    assert test["shaped_u"] == 9.0  # every trained shaped return above every frozen one
    harvest = [dict(episode(10000, 3.0, 3.0, []), patches_alive=4), dict(episode(10001, 5.0, 5.0, []), patches_alive=6)]
    assert heldout.summarize(harvest, "apples", 2)["patches_alive_mean"] == 5.0
