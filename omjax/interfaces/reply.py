"""Reading the `choice: <letter>` line of a two-line reply (paper §5.1 response contract)."""

from __future__ import annotations

import re
from collections.abc import Collection

_CHOICE = re.compile(r"choice\s*[:=]\s*\**\s*([A-Za-z]{1,2})\b", re.IGNORECASE)
_BARE = re.compile(r"^\s*([A-Za-z]{1,2})\s*[).:]?\s*$")


def parse_choice(reply: str, letters: Collection[str]) -> str | None:
    """The letter the reply chose, or None when it names no letter in `letters`.

    The first `choice:` line decides; a reply that is nothing but one letter is also accepted,
    because small models often drop the `state:` line. Anything else is a parse failure: the
    caller counts it rather than guessing.
    """
    match = _CHOICE.search(reply)
    if match is None:
        match = _BARE.match(reply)
    if match is None:
        return None
    letter = match.group(1).upper()
    return letter if letter in letters else None
