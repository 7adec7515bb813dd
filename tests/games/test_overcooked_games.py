"""The Overcooked game adapter of the rollout engine."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from omjax.config import EnvConfig
from omjax.envs.overcooked.items import Action, Direction, Item
from omjax.games.registry import make_game


@pytest.mark.parametrize("pots, expected", [((0, 0), 0.0), ((1, 0), 3.0)])
def test_team_reward_is_overcooked_ai_shaping(pots, expected):
    """The shaped team reward is Overcooked-AI's: a dish taken while no pot holds anything is not
    paid (`is_dish_pickup_useful`); one taken while a pot is filling is (+3)."""
    game = make_game(EnvConfig(layout="five_by_five", horizon=5, reward_shaping=1.0), "native")
    game.reset([0])
    # Agent 1 at (3, 3) faces the dish dispenser (4, 3) to its east; agent 0 stands still.
    state = game._state(0).replace(pos=np.array([[1, 1], [3, 3]], np.int32),
                                   facing=np.array([Direction.WEST, Direction.EAST], np.int32),
                                   pot_onions=np.array(pots, np.int32))
    game.states = jax.tree.map(lambda x: jnp.asarray(x)[None], state)
    reward = game.step(np.array([[Action.STAY, Action.INTERACT]], np.int32))
    assert np.asarray(game.states.held)[0].tolist() == [Item.NONE, Item.DISH]
    assert reward.tolist() == [expected]


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


def test_start_held_puts_the_item_in_every_hand_and_on_the_menu():
    game = make_game(EnvConfig(layout="asymmetric_advantages", horizon=5, start_held="onion"), "options")
    game.reset([0, 1])
    assert (np.asarray(game.states.held) == Item.ONION).all()
    assert "place_in_pot" in {it.opt for it in game.menu(0, 0, np.random.default_rng(0))}
    plain = make_game(EnvConfig(layout="asymmetric_advantages", horizon=5), "options")
    plain.reset([0])
    assert (np.asarray(plain.states.held) == Item.NONE).all()


@pytest.mark.parametrize("bad, match", [({"start_held": "onions"}, "env.start_held"),
                                        ({"start_held": "onion", "game": "cleanup"}, "env.start_held")])
def test_start_held_rejects_bad_values(bad, match):
    with pytest.raises(ValueError, match=match):
        EnvConfig(**bad)
