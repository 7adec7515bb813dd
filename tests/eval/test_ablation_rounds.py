"""Each of the six Table 2 cells runs one PA-MAGRPO round on Overcooked with a tiny random model."""

import numpy as np
import pytest

from omjax.eval.ablations import TABLE2_CELLS, cell_config
from omjax.games.registry import make_game
from omjax.train.trainer import Trainer

SMALL = ["env.horizon=3", "train.rollouts=2", "train.rounds=1", "train.minibatch_size=4", "lora.rank=2",
         "lora.targets=q,v", "policy.max_new_tokens=6", "run.progress=false", "run.save_decisions=false",
         "env.layout=asymmetric_advantages", "env.n_agents=2"]


@pytest.fixture(scope="module")
def games():
    """One game per interface, shared by the cells (each compiles its env step once)."""
    cfg = cell_config("ours", overrides=SMALL)
    return {interface: make_game(cfg.env, interface) for interface in ("options", "native", "compound_json")}


@pytest.mark.slow
@pytest.mark.parametrize("cell", list(TABLE2_CELLS))
def test_cell_runs_one_round(cell, games, tiny_model, tmp_path):
    cfg = cell_config(cell, overrides=[*SMALL, f"run.out_dir={tmp_path}"])
    trainer = Trainer(cfg, model=tiny_model, game=games[cfg.policy.action_interface])
    rows = trainer.run()
    assert len(rows) == 1
    row = rows[0]
    assert len(row["team_returns"]) == 2 and all(np.isfinite(row["team_returns"]))
    assert sum(row["decisions_per_agent"]) > 0
    if cfg.policy.action_interface == "native":
        assert row["call_ratio"] == 1.0  # one decision per agent per env step
    elif cfg.policy.action_interface == "options":
        assert row["call_ratio"] < 1.0  # options span several steps
    else:
        # Compound-JSON: a random model's invalid emissions fall back to a one-step wait.
        assert 0.0 < row["call_ratio"] <= 1.0
    if not cfg.train.train:
        assert not row["updated"]
    assert (tmp_path / "checkpoints").is_dir()
