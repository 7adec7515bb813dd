"""The two-line reply parser: tolerant of whitespace/case/markup, strict about the menu."""

import pytest

from omjax.prompts import format_reply, parse_reply

LETTERS = ["A", "B", "C", "AA"]


@pytest.mark.parametrize("text, choice, state", [
    ("state: cooking\nchoice: A", "A", "cooking"),
    ("  State :  Filling \n  CHOICE:   b  ", "B", "filling"),
    ("state: ready to plate\nchoice: **C**", "C", "ready_to_plate"),
    ("choice: c", "C", None),
    ("choice=A)", "A", None),
    ("B", "B", None),
    (" b) ", "B", None),
    ("state: empty\nchoice: AA\n", "AA", "empty"),
    ("state: empty\nchoice: A\nchoice: B", "A", "empty"),
])
def test_parses_tolerantly(text, choice, state):
    reply = parse_reply(text, LETTERS)
    assert reply is not None and reply.choice == choice and reply.state == state


@pytest.mark.parametrize("text", ["", "I think we should cook.", "state: cooking", "choice: Z", "choice: ABC", "choice:"])
def test_unparsable_or_off_menu_replies_return_none(text):
    assert parse_reply(text, LETTERS) is None


def test_format_reply_is_the_contract_and_parses_back():
    assert format_reply("cooking") == "state: cooking\nchoice:"
    assert parse_reply(format_reply("cooking", "B"), LETTERS).choice == "B"
