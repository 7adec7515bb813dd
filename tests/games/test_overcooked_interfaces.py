"""The native-action and compound-JSON Overcooked games on the real env and option executor."""

import jax.numpy as jnp
import numpy as np
import pytest

from omjax.config import EnvConfig
from omjax.envs.overcooked.env import initial_state, transition
from omjax.envs.overcooked.items import Action, Item
from omjax.games.overcooked import OvercookedCompoundGame, OvercookedNativeGame
from omjax.games.registry import make_game
from omjax.prompts.memory import Memory

ENV = EnvConfig(game="overcooked", layout="asymmetric_advantages", horizon=20, n_agents=2)


def test_native_game_applies_one_primitive_per_step():
    game = make_game(ENV, "native")
    assert isinstance(game, OvercookedNativeGame)
    game.reset([10_000, 10_001])
    assert game.needs_decision().all()
    menu = game.menu(0, 0, np.random.default_rng(0))
    assert [m.letter for m in menu] == list("ABCDEF") and menu[game.fallback(0, 0, menu)].opt == "stay"
    assert "F) interact" in game.user_message(0, 0, menu, Memory())
    assert "only lists currently-feasible" not in game.system_message()
    expected = initial_state(game.layout)
    for actions in ([Action.WEST, Action.EAST], [Action.NORTH, Action.STAY], [Action.INTERACT, Action.SOUTH]):
        reward = game.step(np.array([actions, actions]))
        expected = transition(game.layout, expected, jnp.array(actions))[0]
        assert reward.tolist() == [0.0, 0.0]
        np.testing.assert_array_equal(game.positions()[1], np.asarray(expected.pos))
    assert game.needs_decision().all()  # call ratio 1: everyone decides every step


def test_compound_game_executes_valid_json_and_counts_invalid_and_noop():
    game = make_game(ENV, "compound_json")
    assert isinstance(game, OvercookedCompoundGame)
    game.reset([10_000])
    menu = game.menu(0, 0, np.random.default_rng(0))
    prompt = game.user_message(0, 0, menu, Memory())
    assert '"pick_onion" args {"target": [x, y]}' in prompt and "Action menu:" not in prompt
    assert "- <onion_dispenser>: (0, 1), (5, 1)" in prompt  # the cells a reply can name
    system = game.system_message()
    assert "one JSON object" in system and "choice: <single capital letter>" not in system
    # Agent 0 starts at (6, 2) on the right: the onion dispenser at (5, 1) is reachable.
    pick = game.parse_choice(0, 0, menu, 'Going for onions. {"action": "pick_onion", "args": {"target": [5, 1]}}')
    assert menu[pick].opt == "pick_onion" and menu[pick].target == (5, 1)
    # Agent 1 emits an unparsable reply (falls back to wait) ...
    assert game.parse_choice(0, 1, menu, "choice: B") is None
    choices = np.array([[menu[pick].index, game.fallback(0, 1, menu)]])
    for _ in range(12):
        game.step(choices)
        if game.needs_decision()[0, 0]:
            break
    assert int(np.asarray(game.states.held)[0, 0]) == Item.ONION
    # ... then a no-op: drop_held on a counter the agent cannot reach from the left half.
    assert game.needs_decision()[0, 1]
    drop = game.parse_choice(0, 1, menu, '{"action": "drop_held", "args": {"target": [6, 1]}}')
    choices[0, 1] = menu[drop].index
    game.step(choices)
    np.testing.assert_array_equal(game.invalid_counts(), [[0, 1]])
    np.testing.assert_array_equal(game.noop_counts(), [[0, 1]])
    np.testing.assert_array_equal(game.tallies[0].emitted, [1, 2])


def test_unknown_interface_is_a_clear_error():
    with pytest.raises(ValueError, match="no action interface 'telepathy'"):
        make_game(ENV, "telepathy")
