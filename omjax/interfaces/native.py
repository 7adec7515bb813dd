"""Native-action interface (Ablations A and C): one primitive action letter per env step.

The menu is the game's whole primitive action set, lettered in the env's own action order and
never filtered or shuffled: that is the interface the paper's §4 failure analysis used
("choice: I" = FIRE_CLEAN in Cleanup). Every env step is an LLM call, so the call ratio is 1.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from omjax.envs.meltingpot.engine import Substrate
from omjax.prompts.reply import parse_reply

# Action orders are those of the simulators' own action sets, so a letter's index is the env
# action index: overcooked_ai_py `Action.ALL_ACTIONS`, Melting Pot substrate `ACTION_SET`.
_OVERCOOKED = ("move north", "move south", "move east", "move west", "stay", "interact")
_MELTINGPOT_MOVES = ("noop", "forward", "backward", "step left", "step right", "turn left", "turn right", "fire zap")


@dataclass(frozen=True)
class NativeActionSet:
    """A game's primitive actions as a fixed lettered menu (A, B, ... in env action order)."""

    game: str
    names: tuple[str, ...]
    """Primitive action names; position k is env action index k and menu letter chr(65 + k)."""

    def __post_init__(self) -> None:
        if not 1 <= len(self.names) <= 26:
            raise ValueError(f"{self.game}: a native action set needs 1..26 actions, got {len(self.names)}")
        if len(set(self.names)) != len(self.names):
            raise ValueError(f"{self.game}: duplicate primitive action names in {self.names}")

    @property
    def letters(self) -> tuple[str, ...]:
        return tuple(chr(ord("A") + k) for k in range(len(self.names)))

    def render_menu(self) -> str:
        return "\n".join(f"{letter}) {name}" for letter, name in zip(self.letters, self.names))

    def parse(self, reply: str) -> int | None:
        """Env action index chosen by the reply, or None on a parse failure."""
        parsed = parse_reply(reply, self.letters)
        return None if parsed is None else ord(parsed.choice) - ord("A")

    def action_counts(self, actions: Sequence[int]) -> dict[str, int]:
        """Primitive-action distribution of one agent: action name -> count."""
        counts = dict.fromkeys(self.names, 0)
        for a in actions:
            if not 0 <= int(a) < len(self.names):
                raise ValueError(f"{self.game}: action index {a} outside 0..{len(self.names) - 1}")
            counts[self.names[int(a)]] += 1
        return counts


NATIVE_ACTIONS: dict[str, NativeActionSet] = {
    "overcooked": NativeActionSet("overcooked", _OVERCOOKED),
    "cleanup": NativeActionSet("cleanup", _MELTINGPOT_MOVES + ("fire clean",)),
    "harvest": NativeActionSet("harvest", _MELTINGPOT_MOVES),
}
"""Keyed by canonical game name (`omjax.games.registry`)."""


def native_action_set(game: str) -> NativeActionSet:
    try:
        return NATIVE_ACTIONS[game]
    except KeyError:
        raise ValueError(f"no native action set for game {game!r}; known: {', '.join(NATIVE_ACTIONS)}") from None


def primitive_actions(substrate: Substrate) -> NativeActionSet:
    """The native action set of a Melting Pot substrate, checked against the engine's own.

    clean_up has 9 (A-I, I = fire clean), commons_harvest__open 8 (A-H, no cleaning beam);
    letter k is env action index k, which `MeltingPotEnv.step` takes directly."""
    actions = native_action_set("cleanup" if substrate.dirt_layer is not None else "harvest")
    if len(actions.names) != len(substrate.action_names):
        raise RuntimeError(f"{actions.game}: native letters name {len(actions.names)} actions, the engine has "
                           f"{len(substrate.action_names)} ({substrate.action_names})")
    return actions
