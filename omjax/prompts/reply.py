"""The two-line reply contract and its parser.

    state: <one of the game's state labels>
    choice: <single capital letter>

Parsing is tolerant of whitespace, case, markdown emphasis and a missing `state:` line (small
models often drop it); it is strict about the letter: a reply whose choice is not on the menu, or
that names no choice at all, does not parse, and the caller counts it.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Collection

_CHOICE = re.compile(r"choice\s*[:=]\s*[*_`\"'(\[]*\s*([A-Za-z]{1,2})(?![A-Za-z])", re.IGNORECASE)
_STATE = re.compile(r"state\s*[:=]\s*[*_`\"']*\s*([A-Za-z_ ]+?)\s*[*_`\"']*\s*$", re.IGNORECASE | re.MULTILINE)
_BARE = re.compile(r"^\s*[*_`\"'(\[]*([A-Za-z]{1,2})\s*[)\].:*_`\"']*\s*$")


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
    match = _CHOICE.search(text)
    if match is None:
        match = _BARE.match(text)
    if match is None:
        return None
    choice = match.group(1).upper()
    if choice not in letters:
        return None
    state = _STATE.search(text)
    return Reply(choice=choice, state=state.group(1).strip().lower().replace(" ", "_") if state else None)


def format_reply(state: str | None, choice: str | None = None) -> str:
    """The reply text of the contract; `state=None` leaves out the state line
    (`policy.state_line=none`). Without `choice` it stops after `choice:` (where letter mode
    scores the letter as the next token)."""
    head = "choice:" if state is None else f"{STATE_PREFIX} {state}\nchoice:"
    return head if choice is None else f"{head} {choice}"


STATE_PREFIX = "state:"
"""How a reply starts when it has a state line: a letter-mode prompt ends here and each state
label is scored as a continuation `" <label>\nchoice:"` of it."""
