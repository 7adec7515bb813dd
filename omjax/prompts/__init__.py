"""Prompts and replies of the option-menu interface (paper §5.1's worked example).

* `reply`: the two-line response contract (`state: ...` / `choice: <letter>`) and its tolerant
  parser; `ParseFailure` rules live in `omjax.train.rollout`.
* `chat`: rendering a (system, user, assistant-prefix) triple through a backbone's chat template.
* `interface`: what an action interface adds to any game's prompt (the menu paragraph, the reply
  contract, the closing action block); the game builders take the interface as an argument.
* `overcooked`, `meltingpot`: each game's system and user messages and state labels.
* `Memory`: the per-agent memory block (last macros, team reward over a window).
"""

from omjax.prompts.chat import render_chat
from omjax.prompts.memory import Memory
from omjax.prompts.reply import Reply, format_reply, parse_reply

__all__ = ["Memory", "Reply", "format_reply", "parse_reply", "render_chat"]
