"""The LLM burn-in's recording game logs exactly the records of the reference burn-in."""

import numpy as np

from omjax.eval.burnin_control import RecordingOvercookedGame
from omjax.options import overcooked as oc


def test_recording_game_matches_the_python_burnin_for_the_same_choices():
    layout, horizon = "asymmetric_advantages", 40
    lib = oc.library(layout)
    choices = oc.burnin_choices(3, 0, 1, horizon, lib)  # [1, T, A]
    game = RecordingOvercookedGame(layout, horizon)
    game.reset([0])
    for t in range(horizon):
        game.step(choices[:, t])
    got = game.table(0, solo=False)
    want = oc.burnin_python(layout, [(0, False)], choices, horizon)
    assert len(got) == len(want) > 5
    order_g, order_w = np.lexsort((got.aid, got.step)), np.lexsort((want.aid, want.step))
    for col in ("step", "aid", "opt", "target", "features", "outcome", "changed"):
        np.testing.assert_array_equal(getattr(got, col)[order_g], getattr(want, col)[order_w], err_msg=col)
