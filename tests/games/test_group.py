"""`GroupGame`: the seed slots of a group on the games of their libraries, as one `Game`.

On the real Overcooked engine, a group of three slots (lib_a, lib_b, lib_a) plays every episode
exactly as the slot's own game does alone; every game's candidate libraries agree on what the
rollout engine reads once per round, so `make_group_game` builds a group for each; games that
do not agree are refused by name.
"""

import dataclasses

import numpy as np
import pytest

from omjax.config import EnvConfig
from omjax.games import GAMES, GroupGame, make_game, make_group_game
from omjax.options.libraries import CANDIDATES
from omjax.prompts.interface import INTERFACES
from omjax.prompts.memory import Memory
from tests.games.test_conformance import SETUPS
from tests.train.bandit import MenuBandit

K, STEPS = 2, 4
ENV = EnvConfig(game="overcooked", layout="asymmetric_advantages", n_agents=2, horizon=STEPS + 1)


def env_of(library: str) -> EnvConfig:
    return dataclasses.replace(ENV, library=library)


def test_a_group_plays_each_slot_as_its_own_game_alone():
    libs = ["lib_a", "lib_b", "lib_a"]
    group = make_group_game([env_of(lib) for lib in libs], "options")
    assert isinstance(group, GroupGame) and len(group.games) == 2 and group.parts[0] is group.parts[2]
    seeds = list(range(100, 100 + K * len(libs)))
    group.reset(seeds)
    # Alone: each slot on a game of its library, with that slot's episode seeds.
    alone = [make_game(env_of(lib), "options") for lib in libs]
    for s, g in enumerate(alone):
        g.reset(seeds[s * K:(s + 1) * K])
    rng = np.random.default_rng(0)
    shown = {lib: set() for lib in libs}
    for t in range(STEPS):
        deciding = group.needs_decision()
        np.testing.assert_array_equal(deciding, np.concatenate([g.needs_decision() for g in alone]))
        choices = np.zeros((K * len(libs), group.n_agents), np.int64)
        for k, a in np.argwhere(deciding):
            s, j = divmod(int(k), K)
            menu = group.menu(int(k), int(a), np.random.default_rng([int(k), int(a), t]))
            assert menu == alone[s].menu(j, int(a), np.random.default_rng([int(k), int(a), t]))
            assert group.user_message(int(k), int(a), menu, Memory(3, 10)) == \
                alone[s].user_message(j, int(a), menu, Memory(3, 10))
            assert group.state_label(int(k), int(a)) == alone[s].state_label(j, int(a))
            assert group.fallback(int(k), int(a), menu) == alone[s].fallback(j, int(a), menu)
            pick = int(rng.integers(len(menu)))
            reply = f"state: {group.state_label(int(k), int(a))}\nchoice: {menu[pick].letter}"
            assert group.parse_choice(int(k), int(a), menu, reply) == pick
            choices[k, a] = menu[pick].index
            shown[libs[s]] |= {it.opt for it in menu}
        rewards = group.step(choices)
        np.testing.assert_array_equal(rewards, np.concatenate([g.step(choices[s * K:(s + 1) * K])
                                                               for s, g in enumerate(alone)]))
        np.testing.assert_array_equal(group.positions(), np.concatenate([g.positions() for g in alone]))
    np.testing.assert_array_equal(group.agent_returns(), np.concatenate([g.agent_returns() for g in alone]))
    extras = group.extras()
    assert set(extras) == {"deliveries"}
    np.testing.assert_array_equal(extras["deliveries"], np.concatenate([g.extras()["deliveries"] for g in alone]))
    assert "drop_held" in shown["lib_a"] - shown["lib_b"]  # each slot saw its own library's menus
    assert group.system_message() == alone[0].system_message() == alone[1].system_message()
    np.testing.assert_array_equal(group.walls(), alone[0].walls())
    with pytest.raises(ValueError, match="multiple of 3"):
        group.reset(seeds[:4])


@pytest.mark.parametrize("game", GAMES)
@pytest.mark.parametrize("interface", INTERFACES)
def test_every_games_libraries_form_a_group(game, interface):
    """The libraries of a game differ in options and guards only: one system message, one label
    set, one horizon and team size (Melting Pot: no engine starts before reset)."""
    layout, agents, _ = SETUPS[game]
    envs = [EnvConfig(game=game, layout=layout, n_agents=agents, horizon=5, library=lib) for lib in CANDIDATES[game]]
    group = make_group_game(envs, interface)
    assert isinstance(group, GroupGame) and len(group.games) == len(CANDIDATES[game])
    assert (group.game, group.interface, group.n_agents, group.horizon) == (game, interface, agents, 5)
    assert make_group_game(envs[:1] * 2, interface).__class__ is not GroupGame  # one library: its own game


def test_games_that_disagree_are_refused_by_name():
    with pytest.raises(ValueError, match="state_labels"):
        GroupGame([MenuBandit(2, 2), MenuBandit(2, 2, labels=("now", "later"))])
    with pytest.raises(ValueError, match="`horizon`"):
        GroupGame([MenuBandit(2, 2), MenuBandit(2, 3)])
    with pytest.raises(ValueError, match="system_message"):
        GroupGame([MenuBandit(2, 2), MenuBandit(2, 2, shuffle=True)])
