"""Melting Pot prompts (Cleanup, Commons Harvest) in the shape of paper §5.1's worked example.

The system message is fixed per game, team size and action interface: the game's goal and rules
(no strategy advice unless `advice`), that the menu only lists currently-feasible actions (option
menu) or what the primitive letters do (native), and the two-line reply contract -- or, for compound-JSON, that free JSON actions are
executed unfiltered and the reply is the object alone. The user message is rebuilt at every decision: the
agent's text observation (`omjax.envs.meltingpot.text.observation_text`: own position and
facing, visible dirt and apples with Manhattan distances, Harvest patches alive, the layout hint,
the step), the teammates in view, the memory block (last macros, team reward over a window) and
the lettered menu (compound-JSON: the action vocabulary).
"""

from __future__ import annotations

import numpy as np

from omjax.envs.meltingpot.adapter import ORIENTATIONS, SymbolicState
from omjax.envs.meltingpot.engine import Substrate
from omjax.envs.meltingpot.layout import Layout
from omjax.envs.meltingpot.text import observation_text, view_mask
from omjax.prompts import interface as contract
from omjax.prompts.memory import Memory

STATES = {
    "cleanup": ("river_dirty", "apples_ripe", "nothing_in_view"),
    "harvest": ("apples_ripe", "nothing_in_view", "depleted"),
}
"""Labels of the reply's `state:` line per game (what the agent's view says about the task)."""

_GOALS = {
    "cleanup": (
        "Goal: eat apples in the orchard. Apples only regrow while the river is clean, and dirt keeps "
        "accumulating in the river; the cleaning beam (fire_clean) removes dirt in front of you. "
        "Cleaning earns nothing directly."
    ),
    "harvest": (
        "Goal: eat apples on the apple patches. An eaten apple regrows only while uneaten apples remain "
        "nearby on its patch: a patch eaten bare never grows back."
    ),
}
"""The goal and the rules, as the paper's prompts give them: no strategy or role advice."""

ADVICE = {
    "cleanup": "The team needs both cleaners and eaters.",
    "harvest": "Restraint keeps the patches alive.",
}
"""Strategy hints the paper does not give (they confound its emergence claims: roles without
labels, restraint under a flat reward); shown only with `env.prompt_advice`."""
_TITLES = {"cleanup": "Melting Pot Cleanup", "harvest": "Melting Pot Commons Harvest"}

NATIVE_TAIL = (
    "Each turn you choose ONE primitive action, applied for one step: forward, backward, step left "
    "and step right move relative to your facing; turn left and turn right rotate you; fire zap "
    "shoots a beam ahead that removes a hit agent from play for a while{clean}. Pick one letter."
)

COMPOUND_TAIL = (
    "Each time your previous action has finished you choose the next one by writing a JSON object "
    "naming an action and, for actions on a cell, its target (x, y) from your observation. It is "
    "executed only if it is valid; nothing filters the actions for you."
)


def game_of(substrate: Substrate) -> str:
    """`cleanup` or `harvest` (the substrate with a dirt layer is Cleanup)."""
    return "cleanup" if substrate.dirt_layer is not None else "harvest"


def system_message(game: str, n_agents: int, apple_reward: float = 1.0, interface: str = "options",
                   advice: bool = False) -> str:
    """The fixed system message of an action interface: the option menu, primitive letters
    (`native`) or free JSON actions (`compound_json`, whose reply is the JSON object alone);
    `advice` adds the game's `ADVICE` sentence after its goal (off in the paper's setup)."""
    if game not in STATES:
        raise ValueError(f"no Melting Pot prompt for game {game!r}; known: {', '.join(STATES)}")
    contract.check_interface(interface)
    others = n_agents - 1
    head = (f"You are an agent in a {n_agents}-player cooperative {_TITLES[game]} game.\n\n"
            f"{_GOALS[game]}{' ' + ADVICE[game] if advice else ''} Each apple eaten scores +{apple_reward:g} for the team (shared with your "
            f"{others} teammate{'s' if others != 1 else ''}).\n\n")
    clean = "; fire clean shoots the cleaning beam ahead" if game == "cleanup" else ""
    menu = {"options": contract.OPTIONS_MENU_RULE, "native": NATIVE_TAIL.format(clean=clean),
            "compound_json": COMPOUND_TAIL}
    return contract.system_message(head, interface, menu[interface], STATES[game])


def state_label(game: str, state: SymbolicState, agent: int) -> str:
    """The task as `agent` sees it (the `state:` line of a letter-mode reply)."""
    view = view_mask(state.pos[agent], int(state.ori[agent]), state.apples.shape)
    if game == "cleanup" and np.any(state.dirt & view):
        return "river_dirty"
    if game == "harvest" and len(state.patch_apples) and not np.any(state.patch_apples > 0):
        return "depleted"
    return "apples_ripe" if np.any(state.apples & view) else "nothing_in_view"


def others_in_view(state: SymbolicState, agent: int) -> str:
    """`Teammates in view: agent 3 @ (x, y) 4st facing North, ...` (alive teammates only)."""
    view = view_mask(state.pos[agent], int(state.ori[agent]), state.apples.shape)
    x0, y0 = (int(v) for v in state.pos[agent])
    seen = []
    for j in range(state.num_agents):
        x, y = (int(v) for v in state.pos[j])
        if j != agent and state.alive[j] and view[y, x]:
            seen.append((abs(x - x0) + abs(y - y0), j, x, y))
    parts = [f"agent {j} @ ({x}, {y}) {d}st facing {ORIENTATIONS[int(state.ori[j])]}" for d, j, x, y in sorted(seen)]
    return f"Teammates in view: {', '.join(parts) if parts else 'none'}."


def user_message(substrate: Substrate, layout: Layout, state: SymbolicState, agent: int, menu_text: str,
                 memory: Memory, horizon: int, interface: str = "options") -> str:
    """The per-decision user message: observation, teammates in view, memory, and the
    interface's action block around `menu_text` (the lettered menu or the JSON vocabulary)."""
    lines = [observation_text(substrate, layout, state, agent, horizon), others_in_view(state, agent), "", "Memory:"]
    macros = memory.last_macros
    lines.append(f"- Last {memory.macros} macros decided: {', '.join(macros) if macros else '(none)'}")
    lines.append(f"- Total reward last {memory.window} steps: {memory.recent_reward:g}")
    lines += contract.action_block(interface, menu_text)
    return "\n".join(lines)
