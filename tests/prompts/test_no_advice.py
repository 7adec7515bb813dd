"""The default prompts carry the paper's content (goal, rules, state, menu) and no strategy advice;
the advice the paper does not give appears only with `env.prompt_advice`."""

from pathlib import Path

import pytest

from omjax.config import EnvConfig, load_config
from omjax.games import GAMES, make_game
from omjax.prompts import meltingpot as pm
from omjax.prompts.interface import INTERFACES

REMOVED = ("needs both cleaners and eaters", "Restraint keeps the patches alive", "restraint")
"""Phrases of the hints that used to sit in the Melting Pot system messages."""

CONFIGS = sorted((Path(__file__).resolve().parents[2] / "configs").glob("*.yaml"))
SETUPS = {"overcooked": ("asymmetric_advantages", 2), "cleanup": ("clean_up", 7),
          "harvest": ("commons_harvest__open", 7)}


def advised(text: str) -> list[str]:
    return [p for p in REMOVED + tuple(pm.ADVICE.values()) if p.lower() in text.lower()]


@pytest.mark.parametrize("game", GAMES)
@pytest.mark.parametrize("interface", INTERFACES)
def test_default_system_messages_give_no_strategy_advice(game, interface):
    layout, agents = SETUPS[game]
    env = EnvConfig(game=game, layout=layout, n_agents=agents, horizon=5)
    assert env.prompt_advice is False
    system = make_game(env, interface).system_message()  # Melting Pot: no engine starts before reset
    assert advised(system) == []
    if game != "overcooked":
        assert "Goal: eat apples" in system  # the goal and rules stay
        with_advice = make_game(EnvConfig(game=game, layout=layout, n_agents=agents, horizon=5,
                                          prompt_advice=True), interface).system_message()
        assert advised(with_advice) and with_advice.replace(" " + pm.ADVICE[game], "") == system


def test_the_rules_the_paper_gives_stay_in_the_melting_pot_goals():
    cleanup = pm.system_message("cleanup", 7)
    assert "Apples only regrow while the river is clean" in cleanup and "Cleaning earns nothing directly." in cleanup
    harvest = pm.system_message("harvest", 7)
    assert "a patch eaten bare never grows back." in harvest


@pytest.mark.parametrize("path", CONFIGS, ids=[p.name for p in CONFIGS])
def test_no_shipped_config_turns_advice_on(path):
    assert load_config(path).env.prompt_advice is False
