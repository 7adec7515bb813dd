"""Rendering a decision prompt through the backbone's own chat template."""

from __future__ import annotations

from typing import Any


def render_chat(tokenizer: Any, system: str, user: str, assistant_prefix: str = "") -> str:
    """The full text the model reads: chat-templated system + user turns, the generation prompt,
    then `assistant_prefix` (the start of the assistant's reply, e.g. `state: cooking\\nchoice:`).

    Templates without a system role (they raise on one) get the system text as the first
    paragraph of the user turn instead.
    """
    messages = [{"role": "system", "content": system}, {"role": "user", "content": user}]
    try:
        text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    except Exception as err:  # jinja raises TemplateError subclasses named per template
        if "system" not in str(err).lower():
            raise
        merged = [{"role": "user", "content": f"{system}\n\n{user}"}]
        text = tokenizer.apply_chat_template(merged, tokenize=False, add_generation_prompt=True)
    return text + assistant_prefix
