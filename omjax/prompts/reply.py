"""The two-line reply contract and its parser.

    state: <one of the game's state labels>
    choice: <single capital letter>

Parsing is tolerant of whitespace, case, markdown emphasis and a missing `state:` line (small
models often drop it); it is strict about the letter: a reply whose choice is not on the menu, or
that names no choice at all, does not parse, and the caller counts it.

The parser is total and linear-time: only the first `MAX_REPLY_CHARS` characters are read, and
no pattern has two adjacent repeats that can match the same character (the nested-quantifier
shape that backtracks catastrophically on long whitespace runs).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Collection

MAX_REPLY_CHARS = 4096
"""Characters of a reply the parser reads; a two-line reply is about 30."""

_CHOICE = re.compile(r"choice\s*[:=][\s*_`\"'(\[]*([A-Za-z]{1,2})(?![A-Za-z])", re.IGNORECASE)
_STATE_KEY = re.compile(r"state\s*[:=]", re.IGNORECASE)
_BARE = re.compile(r"[\s*_`\"'(\[]*([A-Za-z]{1,2})[\s)\].:*_`\"']*")
_EMPHASIS = "*_`\"'"
_LABEL_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_ ")


@dataclasses.dataclass(frozen=True)
class Reply:
    """A parsed reply: the chosen menu letter (upper case) and the state label, if any."""

    choice: str
    state: str | None


def parse_reply(text: str, letters: Collection[str]) -> Reply | None:
    """The reply's menu choice, or None when it names no letter in `letters`.

    The first `choice:` line decides; a reply that is nothing but one letter (optionally
    `B)` or `B.`) is accepted too.
    """
    text = text[:MAX_REPLY_CHARS]
    match = _CHOICE.search(text)
    if match is None:
        match = _BARE.fullmatch(text)
    if match is None:
        return None
    choice = match.group(1).upper()
    if choice not in letters:
        return None
    return Reply(choice=choice, state=_state_label(text))


def _state_label(text: str) -> str | None:
    """The label of the first `state:` line whose value is letters, `_` and spaces (emphasis
    around it ignored), lower-cased with spaces as `_`; None when no line has one."""
    for key in _STATE_KEY.finditer(text):
        end = text.find("\n", key.end())
        value = text[key.end():end if end != -1 else len(text)].strip().strip(_EMPHASIS).strip()
        if value and _LABEL_CHARS.issuperset(value):
            return value.lower().replace(" ", "_")
    return None


def format_reply(state: str | None, choice: str | None = None) -> str:
    """The reply text of the contract; `state=None` leaves out the state line
    (`policy.state_line=none`). Without `choice` it stops after `choice:` (where letter mode
    scores the letter as the next token)."""
    head = "choice:" if state is None else f"{STATE_PREFIX} {state}\nchoice:"
    return head if choice is None else f"{head} {choice}"


STATE_PREFIX = "state:"
"""How a reply starts when it has a state line: a letter-mode prompt ends here and each state
label is scored as a continuation `" <label>\nchoice:"` of it."""
