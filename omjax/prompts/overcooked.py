"""Overcooked-AI prompts in the shape of paper §5.1's worked example.

The system message is fixed per layout and team size; the user message is rebuilt at every
decision from the env state, the agent's memory and its lettered menu. Distances are the
option planner's shortest-plan lengths (`OvercookedOptions.plans`), so "you: 4" is the number of
primitive steps a `place_in_pot` would take from here, turns and the final INTERACT included.
"""

from __future__ import annotations

import jax
import numpy as np

from omjax.envs.overcooked.items import DIRECTION_NAMES, Item, item_name
from omjax.envs.overcooked.layout import MAX_INGREDIENTS, Terrain
from omjax.options.overcooked import OvercookedOptions, pot_state_code
from omjax.options.overcooked_plan import UNREACHABLE
from omjax.prompts import interface as contract
from omjax.prompts.memory import Memory

STATES = ("empty", "filling", "cooking", "ready_to_plate", "delivering")
"""Labels of the reply's `state:` line: the team's progress on the next soup."""

# pot_state_code values (tgt_pot_state codes): 1 empty, 2 filling, 3 full, 4 cooking, 5 ready.
_EMPTY, _FILLING, _FULL, _COOKING, _READY = 1, 2, 3, 4, 5


NATIVE_RULE = (
    "Each turn you choose ONE primitive action, applied for one step: the move letters turn you to "
    "face that way and step if the cell is free; interact acts on the cell you face. Pick one letter."
)
COMPOUND_RULE = (
    "Each time your previous action has finished you choose the next one by writing a JSON object "
    "naming an action and its target cell. It is executed only if it is valid; nothing filters "
    "the actions for you."
)


def system_message(n_agents: int, delivery_reward: float, interface: str = "options") -> str:
    """The fixed system message: the kitchen and its goal, then what the interface's menu is
    (`omjax.prompts.interface`) and the reply contract."""
    partner = "partner" if n_agents == 2 else "partners"
    head = (
        f"You are an agent in a {n_agents}-player cooperative Overcooked-AI kitchen.\n\n"
        "Goal: place 3 onions in a pot, start the cook, plate the soup with a dish, deliver to the "
        f"serving station. Each delivery scores +{delivery_reward:g} (shared with {partner}).\n\n"
    )
    menu = {"options": contract.OPTIONS_MENU_RULE, "native": NATIVE_RULE, "compound_json": COMPOUND_RULE}
    contract.check_interface(interface)
    return contract.system_message(head, interface, menu[interface], STATES)


def _held(code: int) -> str:
    return "nothing" if int(code) == Item.NONE else item_name(int(code))


def _facing(code: int) -> str:
    return DIRECTION_NAMES[int(code)].capitalize()


def _pos(p) -> str:
    return f"({int(p[0])}, {int(p[1])})"


def _others(n_agents: int, agent: int) -> list[int]:
    return [j for j in range(n_agents) if j != agent]


def _who(n_agents: int, j: int) -> str:
    return "partner" if n_agents == 2 else f"player {j}"


def state_label(lib: OvercookedOptions, state, agent: int) -> str:
    """The team's progress as seen by `agent` (the `state:` line of a letter-mode reply)."""
    codes = _pot_codes(lib, state)
    if int(state.held[agent]) >= Item.SOUP:
        return "delivering"
    if np.any(codes == _READY):
        return "ready_to_plate"
    if np.any(codes == _COOKING):
        return "cooking"
    if np.any((codes == _FILLING) | (codes == _FULL)):
        return "filling"
    return "empty"


def _pot_codes(lib: OvercookedOptions, state) -> np.ndarray:
    return np.asarray(pot_state_code(np, lib.layout, np.asarray(state.pot_onions),
                                     np.asarray(state.pot_tomatoes), np.asarray(state.pot_tick)))


def _pot_line(lib: OvercookedOptions, state, p: int, code: int) -> str:
    onions = int(state.pot_onions[p])
    text = f"{onions}/{MAX_INGREDIENTS} onions"
    if code == _COOKING:
        cook = int(lib.layout.soup_cook_time[onions, int(state.pot_tomatoes[p])])
        text += f", cooking {int(state.pot_tick[p])}/{cook}"
    elif code == _READY:
        text += ", ready"
    return text


def _plan_index(lib: OvercookedOptions) -> dict[tuple[int, int], int]:
    return {tuple(map(int, xy)): k for k, xy in enumerate(lib.plans.targets)}


def _dist(lib: OvercookedOptions, plan: int, state, agent: int) -> int | None:
    x, y = (int(v) for v in state.pos[agent])
    d = int(lib.plans.dist[plan, y, x, int(state.facing[agent])])
    return None if d >= UNREACHABLE else d


def user_message(
    lib: OvercookedOptions,
    state,
    agent: int,
    menu_text: str,
    memory: Memory,
    horizon: int,
    interface: str = "options",
) -> str:
    """The per-decision user message (position, partners, pots, counters, memory, and the
    interface's action block around `menu_text`: the rendered menu or the JSON vocabulary)."""
    state = jax.tree.map(np.asarray, state)
    n = lib.num_agents
    others = _others(n, agent)
    lines = [
        f"You are player {agent}. World position: {_pos(state.pos[agent])}.",
        f"Facing: {_facing(state.facing[agent])}. Holding: {_held(state.held[agent])}.",
    ]
    partner_lines = [
        f"{'Partner' if n == 2 else 'Teammate'} (player {j}): pos={_pos(state.pos[j])} "
        f"facing={_facing(state.facing[j])} holding={_held(state.held[j])}."
        for j in others
    ]
    lines += partner_lines
    lines += ["", "Pots:"]
    plan_of = _plan_index(lib)
    codes = _pot_codes(lib, state)
    for p, xy in enumerate(lib.layout.pot_pos):
        lines.append(f"  - pot@{_pos(xy)}: {_pot_line(lib, state, p, int(codes[p]))}")
        plan = plan_of.get((int(xy[0]), int(xy[1])))
        if plan is None:
            continue
        dists = {j: _dist(lib, plan, state, j) for j in range(n)}
        shown = " | ".join(
            f"{'you' if j == agent else _who(n, j)}: {'unreachable' if dists[j] is None else dists[j]}"
            for j in [agent, *others]
        )
        closer = [j for j in others if dists[j] is not None and (dists[agent] is None or dists[j] < dists[agent])]
        note = f"  ({_who(n, closer[0])} closer)" if closer and n == 2 else ""
        lines.append(f"      {shown}{note}")
    counter = np.asarray(state.counter)
    items = [
        f"{_held(counter[y, x])}@({x}, {y})"
        for y, x in zip(*np.nonzero((counter != Item.NONE) & (lib.layout.grid == Terrain.COUNTER)))
    ]
    lines.append(f"Counters: {', '.join(items) if items else '(empty)'}")
    lines.append(f"Layout: {lib.layout.name}.   Step {int(state.time)}/{horizon}.")
    lines += ["", "Memory:"]
    macros = memory.last_macros
    lines.append(f"- Last {memory.macros} macros decided: {', '.join(macros) if macros else '(none)'}")
    lines.append(f"- Total reward last {memory.window} steps: {memory.recent_reward:g}")
    lines += [
        f"- {'Partner' if n == 2 else f'Player {j}'}: pos={_pos(state.pos[j])} "
        f"facing={_facing(state.facing[j])} holding={_held(state.held[j])}"
        for j in others
    ]
    lines += contract.action_block(interface, menu_text)
    return "\n".join(lines)
