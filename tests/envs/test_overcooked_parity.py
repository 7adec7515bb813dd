"""Step-for-step parity with overcooked_ai_py 1.1.0 on random joint actions (see overcooked_parity)."""

from __future__ import annotations

import numpy as np
import pytest
from overcooked_parity import run_parity, sample_actions

from omjax.envs.overcooked import Overcooked, list_layouts

PARITY_LAYOUTS = ["asymmetric_advantages", "forced_coordination", "cramped_room"]


@pytest.mark.parametrize("layout", PARITY_LAYOUTS)
def test_random_episodes_match_overcooked_ai(layout):
    episodes, horizon = 50, 400
    actions = sample_actions(np.random.default_rng(PARITY_LAYOUTS.index(layout)), episodes, horizon, 2)
    totals = run_parity(layout, actions, horizon)
    # The comparison is only meaningful if the games actually did things: items moved, pots filled
    # and started, soups plated.
    for name in ("onion_pickup", "dish_pickup", "onion_drop", "potting_onion", "cook_start", "soup_pickup"):
        assert totals[name] > 0, f"{layout}: no {name} event in {episodes} random episodes: {totals}"


def test_tomato_layout_matches_overcooked_ai():
    # Mixed soups and per-recipe values and cook times; the slow sweep covers every other layout.
    layout = "cramped_room_tomato"
    actions = sample_actions(np.random.default_rng(7), 4, 400, 2)
    totals = run_parity(layout, actions, 400)
    assert totals["potting_tomato"] > 0 and totals["potting_onion"] > 0, totals


@pytest.mark.slow
@pytest.mark.parametrize("layout", list_layouts())
def test_every_layout_matches_overcooked_ai(layout):
    env_agents = Overcooked(layout).num_agents
    actions = sample_actions(np.random.default_rng(11), 20, 400, env_agents)
    run_parity(layout, actions, 400)
