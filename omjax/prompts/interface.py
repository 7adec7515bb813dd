"""The parts of a prompt that belong to the action interface rather than to the game.

A system message is the game's own paragraphs (title, goal, rules), then the interface's menu
paragraph (`menu_rule`, or the game's description of its primitive letters under `native`),
then the reply contract (`reply_format`). A user message ends with the interface's action block
(`action_block`): the lettered menu and the two-line rule, or the compound-JSON vocabulary and
the JSON-only rule.
"""

from __future__ import annotations

from collections.abc import Sequence

INTERFACES = ("options", "native", "compound_json")
"""The action interfaces: the option menu (the method) and the §6.1 ablations."""

OPTIONS_MENU_RULE = "The action menu only lists currently-feasible actions. Pick one letter."

OUTPUT_FORMAT = 'Output format: one JSON object on one line, nothing else, e.g.\n{"action": "wait", "args": {}}'
"""The reply contract of the compound-JSON system messages (it replaces the two-line one;
`omjax.interfaces.compound_json` parses it)."""


def check_interface(interface: str) -> None:
    if interface not in INTERFACES:
        raise ValueError(f"unknown action interface {interface!r}; known: {', '.join(INTERFACES)}")


def reply_format(interface: str, states: Sequence[str]) -> str:
    """The reply contract: two lines (`state:` among `states`, `choice:`) or, under
    `compound_json`, the JSON object alone."""
    check_interface(interface)
    if interface == "compound_json":
        return OUTPUT_FORMAT
    return ("Output format (exactly two lines, nothing else):\n"
            f"state: <{' | '.join(states)}>\n"
            "choice: <single capital letter>")


def system_message(head: str, interface: str, menu_paragraph: str, states: Sequence[str]) -> str:
    """`head` (the game's paragraphs, ending in a blank line), the interface's menu paragraph
    and the reply contract."""
    return f"{head}{menu_paragraph}\n\n{reply_format(interface, states)}"


def action_block(interface: str, menu_text: str) -> list[str]:
    """The closing lines of a user message: the menu (or the vocabulary) and the reply rule."""
    check_interface(interface)
    if interface == "compound_json":
        return ["", "Actions you can write:", menu_text, "", "Reply with the JSON object only."]
    return ["", "Action menu:", menu_text, "", "Choose one. Reply with exactly two lines."]
