"""The solo test of trained policies: the masked game, and the audit command on a checkpoint."""

import json

import numpy as np
import pytest

from omjax.config import EnvConfig
from omjax.games.overcooked import OvercookedOptionsGame
from omjax.games.registry import guards_file


def test_inactive_agent_never_decides_and_never_moves():
    env = EnvConfig(game="overcooked", layout="asymmetric_advantages", horizon=6, n_agents=2)
    game = OvercookedOptionsGame(env.layout, env.horizon, guards_file(env), active=[False, True])
    game.reset([10_000])
    start = np.asarray(game.states.pos)[0].copy()
    menu = game.menu(0, 1, np.random.default_rng(0))
    onion = next(item for item in menu if item.opt == "pick_onion")
    for _ in range(6):
        decide = game.needs_decision()
        assert not decide[0, 0]  # the inactive agent is never asked
        game.step(np.array([[0, onion.index if decide[0, 1] else 0]]))
    pos = np.asarray(game.states.pos)[0]
    np.testing.assert_array_equal(pos[0], start[0])
    assert not np.array_equal(pos[1], start[1])
    with pytest.raises(ValueError, match="at least one"):
        OvercookedOptionsGame(env.layout, env.horizon, "", active=[False, False])


@pytest.mark.slow
def test_audit_solo_on_a_checkpoint(tiny_model_dir, tmp_path):
    from omjax.config import load_config
    from omjax.eval.audit_cli import main
    from omjax.train.trainer import Trainer

    run = tmp_path / "run"
    Trainer(load_config(None, [f"model.name={tiny_model_dir}", "env.horizon=3", "train.rounds=1", "train.rollouts=2",
                               "train.minibatch_size=4", "lora.rank=2", "lora.targets=q,v", "run.progress=false",
                               "policy.action_interface=native", f"run.out_dir={run}"])).run()
    out = tmp_path / "solo.png"
    assert main(["audit", "solo", "--checkpoint", str(run), "--seeds", "10000", "--horizon", "3",
                 "--out", str(out)]) == 0
    summary = json.loads(out.with_suffix(".json").read_text())["asymmetric_advantages"]
    assert len(summary["solo_mean"]) == 2 and out.is_file()
