"""Scripted Overcooked option policies whose behaviour is known in advance.

They are reference points for the audits: a policy whose macro shares, deliveries and solo
ability are known lets a test (or a newcomer) check that an audit reports what really happened.

* `idle`: always the `wait` option.
* `cook`: a rule-based cook over the option library. It completes soups on its own when it can
  reach everything (Asymmetric Advantages), and otherwise hands items across counters that its
  partner can reach (Forced Coordination: the supplier side drops onions and dishes on shared
  counters, the pot side picks them up). Rules only read the state the menu is built from.

A policy is `policy(lib, state, agent) -> instance index` into `lib.instances`.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import numpy as np

from omjax.envs.overcooked.env import State
from omjax.options.overcooked import HELD_OF_ITEM, OvercookedOptions

OptionPolicy = Callable[[OvercookedOptions, State, int], int]

# `held` / counter item codes (HELD_OF_ITEM) and `tgt_pot_state` codes of the option library.
_NONE, _ONION, _DISH, _SOUP = 0, 1, 2, 3
_EMPTY, _FILLING, _FULL, _COOKING, _READY = 1, 2, 3, 4, 5


def idle(lib: OvercookedOptions, state: State, agent: int) -> int:
    """Always wait."""
    return int(np.flatnonzero(lib.inst_wait)[0])


class _Scene:
    """What the cook's rules read, for one agent at one decision."""

    def __init__(self, lib: OvercookedOptions, state: State, agent: int):
        state = jax.tree.map(np.asarray, state)
        self.lib, self.agent = lib, agent
        self.view = lib.view(np, state)
        self.held = int(HELD_OF_ITEM[self.view.held[agent]])
        x, y = self.view.pos[agent]
        facing = self.view.facing[agent]
        tgt = np.maximum(lib.inst_tgt, 0)
        self.dist = np.where(lib.inst_tgt >= 0, lib.plans.dist[tgt, y, x, facing], 0)  # [I]
        self.reach = (lib.inst_tgt < 0) | lib.plans.reachable[tgt, y, x]  # [I]
        # A counter is shared when some other agent can reach it too: the hand-off surface.
        others = [b for b in range(lib.num_agents) if b != agent]
        self.shared = np.zeros(lib.num_instances, bool)
        for b in others:
            bx, by = self.view.pos[b]
            self.shared |= lib.inst_counter & lib.plans.reachable[tgt, by, bx]
        xy = np.maximum(lib.inst_xy, 0)
        self.counter_item = np.where(lib.inst_counter, HELD_OF_ITEM[self.view.counter[xy[:, 1], xy[:, 0]]], -1)
        pot = np.maximum(lib.inst_pot, 0)
        self.pot_state = np.where(lib.inst_pot >= 0, self.view.pot_state[pot], 0)  # [I]

    def pick(self, option: str, mask: np.ndarray | None = None) -> int | None:
        """Nearest reachable instance of `option` (optionally restricted by `mask` [I])."""
        ok = (self.lib.inst_opt == self.lib.schema.option_index(option)) & self.reach
        if mask is not None:
            ok &= mask
        if not ok.any():
            return None
        candidates = np.flatnonzero(ok)
        return int(candidates[np.argmin(self.dist[candidates])])

    def any_pot(self, states: tuple[int, ...]) -> bool:
        """Some pot this agent can reach is in one of `states`."""
        return self.pick("place_in_pot", np.isin(self.pot_state, states)) is not None

    def can_reach(self, option: str) -> bool:
        return self.pick(option) is not None


def cook(lib: OvercookedOptions, state: State, agent: int) -> int:
    """One decision of the rule-based cook (see the module docstring)."""
    s = _Scene(lib, state, agent)
    has_pots = s.can_reach("place_in_pot")
    empty_shared = s.shared & (s.counter_item == _NONE)
    rules: list[tuple[str, np.ndarray | None]] = []
    if s.held == _SOUP:
        rules = [("deliver", None), ("drop_held", empty_shared)]
    elif s.held == _DISH:
        rules = [("plate_soup", s.pot_state == _READY)] if has_pots else [("drop_held", empty_shared)]
    elif s.held == _ONION:
        rules = [("place_in_pot", np.isin(s.pot_state, (_EMPTY, _FILLING)))] if has_pots else [
            ("drop_held", empty_shared)]
    elif has_pots:
        soup_coming = s.any_pot((_COOKING, _READY))
        rules = [("start_cooking", s.pot_state == _FULL)]
        if soup_coming:
            rules += [("pick_dish", None), ("pick_from_counter", s.counter_item == _DISH)]
        if s.any_pot((_EMPTY, _FILLING)):
            rules += [("pick_onion", None), ("pick_from_counter", s.counter_item == _ONION)]
    else:
        # Supplier side: keep one dish on the shared counters, fill the rest with onions.
        dishes_out = int(np.sum(s.shared & (s.counter_item == _DISH)))
        if empty_shared.any():
            rules = [("pick_dish", None)] if dishes_out == 0 else []
            rules += [("pick_onion", None)]
    for option, mask in rules:
        choice = s.pick(option, mask)
        if choice is not None:
            return choice
    return idle(lib, state, agent)


POLICIES: dict[str, OptionPolicy] = {"idle": idle, "cook": cook}
