"""Overcooked prompts in the shape of paper §5.1's worked example."""

import jax
import numpy as np
import pytest

from omjax.envs.overcooked import initial_state
from omjax.games.registry import guard_path
from omjax.options.menu import episode_rng, render_menu
from omjax.options.overcooked import SCHEMA, library
from omjax.options.synthesis import read_guards
from omjax.prompts import Memory, format_reply, render_chat
from omjax.prompts import overcooked as po


def test_system_message_has_goal_feasibility_note_and_reply_format():
    text = po.system_message(2, 20.0)
    assert "2-player cooperative Overcooked-AI kitchen" in text
    assert "Each delivery scores +20 (shared with partner)" in text
    assert "The action menu only lists currently-feasible actions." in text
    assert text.endswith("state: <empty | filling | cooking | ready_to_plate | delivering>\nchoice: <single capital letter>")


def test_user_message_lists_position_partner_pots_counters_memory_and_menu():
    lib = library("asymmetric_advantages")
    state = jax.tree.map(np.asarray, initial_state(lib.layout))
    state = state.replace(held=np.array([0, 1], np.int32), pot_onions=np.array([2, 0], np.int32), time=np.int32(4))
    guards = read_guards(guard_path("overcooked", "asymmetric_advantages"), SCHEMA)
    menu = lib.menu(state, 1, guards, episode_rng(0, 1))
    memory = Memory(macros=5, window=100)
    memory.decided("pick_onion")
    memory.stepped(20.0)
    text = po.user_message(lib, state, 1, render_menu(menu), memory, horizon=150)
    x, y = state.pos[1]
    assert text.startswith(f"You are player 1. World position: ({x}, {y}).")
    assert "Holding: onion." in text
    assert "Partner (player 0): pos=" in text
    assert "  - pot@(4, 2): 2/3 onions" in text and "  - pot@(4, 3): 0/3 onions" in text
    assert "you: " in text and "partner: " in text
    assert "Counters: (empty)" in text
    assert "Layout: asymmetric_advantages.   Step 4/150." in text
    assert "- Last 5 macros decided: pick_onion" in text
    assert "- Total reward last 100 steps: 20" in text
    lines = text.splitlines()
    start = lines.index("Action menu:")
    assert [l.split(")")[0] for l in lines[start + 1: start + 1 + len(menu)]] == [it.letter for it in menu]
    assert lines[-1] == "Choose one. Reply with exactly two lines."
    # Holding an onion: the pot options are on the menu, the guards hide picking another onion.
    opts = {it.opt for it in menu}
    assert "place_in_pot" in opts and "pick_onion" not in opts
    assert po.state_label(lib, state, 1) == "filling"


def test_letter_last_menu_ends_each_line_with_its_letter():
    """`env.menu_format=letter_last` (departure 19): the same entries in the same order, each line
    `label -> letter`; the game renders its menus so when built from such a config."""
    from omjax.config import load_config
    from omjax.games.registry import make_game

    lib = library("asymmetric_advantages")
    state = jax.tree.map(np.asarray, initial_state(lib.layout)).replace(held=np.array([1, 0], np.int32))
    menu = lib.menu(state, 0, read_guards(guard_path("overcooked", "asymmetric_advantages"), SCHEMA),
                    episode_rng(3, 0))
    assert len(menu) >= 3
    assert render_menu(menu).splitlines() == [f"{it.letter}) {it.label}" for it in menu]
    assert render_menu(menu, "letter_last").splitlines() == [f"{it.label} -> {it.letter}" for it in menu]
    with pytest.raises(ValueError, match="unknown menu format 'letter_middle'; known: letter_first, letter_last"):
        render_menu(menu, "letter_middle")
    cfg = load_config(None, ["env.library=lib_a", "env.horizon=20", "env.menu_format=letter_last"])
    game = make_game(cfg.env, "options")
    game.reset([5])
    shown = game.menu(0, 1, episode_rng(5, 1))
    text = game.user_message(0, 1, shown, Memory())
    lines = text.splitlines()
    start = lines.index("Action menu:")
    assert lines[start + 1: start + 1 + len(shown)] == [f"{it.label} -> {it.letter}" for it in shown]


def test_chat_rendering_ends_with_the_reply_prefix():
    class Template:
        def apply_chat_template(self, messages, tokenize, add_generation_prompt):
            if messages[0]["role"] == "system":
                raise ValueError("System role not supported")
            return "<user>" + messages[0]["content"] + "<model>"

    text = render_chat(Template(), "SYS", "USER", format_reply("empty"))
    assert text == "<user>SYS\n\nUSER<model>state: empty\nchoice:"
