"""The Overcooked game adapter of the rollout engine."""

import numpy as np
import pytest

from omjax.config import EnvConfig
from omjax.envs.overcooked import initial_state, load_layout
from omjax.envs.overcooked.items import Item
from omjax.games.overcooked import progress_rewards
from omjax.games.registry import make_game


def test_progress_bonus_hand_values():
    s = initial_state(load_layout("asymmetric_advantages"))
    s = s.replace(held=np.array([Item.ONION, Item.DISH]))
    # Agent 0 puts its onion in pot 0, agent 1 plates a soup: 3 + 5.
    nxt = s.replace(held=np.array([Item.NONE, Item.SOUP_3]), pot_onions=np.array([1, 0]))
    assert float(progress_rewards(s, nxt)) == 8.0
    # Agent 0 takes a dish: 3; nothing else changed.
    s2 = s.replace(held=np.array([Item.NONE, Item.NONE]))
    assert float(progress_rewards(s2, s2.replace(held=np.array([Item.DISH, Item.NONE])))) == 3.0
    assert float(progress_rewards(s, s)) == 0.0


@pytest.mark.slow
def test_overcooked_adapter_menus_and_steps():
    game = make_game(EnvConfig(layout="asymmetric_advantages", horizon=5), "options")
    game.reset([0, 1, 2])
    assert game.needs_decision().shape == (3, 2) and game.needs_decision().all()
    menu = game.menu(0, 1, np.random.default_rng(0))
    assert menu and menu[game.fallback(0, 1, menu)].opt == "wait"
    choices = np.array([[it.index for it in game.menu(k, i, np.random.default_rng(k))][0] for k in range(3) for i in range(2)])
    reward = game.step(choices.reshape(3, 2))
    assert reward.shape == (3,) and np.all(reward == 0)
    with pytest.raises(ValueError, match="env.layout: game 'cleanup' has no layout 'asymmetric_advantages'"):
        make_game(EnvConfig(game="cleanup", n_agents=7), "compound_json")
