"""Behavioural probes collected during any rollout (what Figs. 1-3 of the paper plot).

A `Probes` value is updated by pure functions: `probes_step` after every env step with the joint
actions that produced the new state, `probes_decisions` whenever agents make an LLM decision
(an option choice, or a primitive letter in the native interface).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from omjax.envs.meltingpot.adapter import SymbolicState


@dataclasses.dataclass(frozen=True)
class Probes:
    """Per-agent behaviour of one episode so far. A agents, H x W grid, P Harvest patches."""

    apples: np.ndarray  # int32 [A] apples eaten
    cleaned: np.ndarray  # int32 [A] dirt cells cleaned
    fire_clean: np.ndarray  # int32 [A] FIRE_CLEAN actions taken (whether or not they hit dirt)
    visits: np.ndarray  # int32 [A, H, W] steps spent on each cell (counted at every state)
    patches_alive: np.ndarray  # int32 [T + 1] Harvest patches with at least one apple, per state
    decisions: np.ndarray  # int32 [A] LLM decisions made
    steps: int  # env steps taken

    @property
    def call_ratio(self) -> float:
        """LLM decisions per agent per env step (1.0 for the native one-letter-per-step interface)."""
        agents = len(self.decisions)
        return float(self.decisions.sum()) / (self.steps * agents) if self.steps else 0.0

    def to_dict(self) -> dict:
        """JSON-ready summary (visits as nested lists)."""
        return {"apples": self.apples.tolist(), "cleaned": self.cleaned.tolist(),
                "fire_clean": self.fire_clean.tolist(), "visits": self.visits.tolist(),
                "patches_alive": self.patches_alive.tolist(), "decisions": self.decisions.tolist(),
                "steps": self.steps, "call_ratio": self.call_ratio}


def _alive_patches(state: SymbolicState) -> int:
    return int((state.patch_apples > 0).sum())


def _visit(visits: np.ndarray, state: SymbolicState) -> np.ndarray:
    visits = visits.copy()
    agents = np.nonzero(state.alive)[0]
    np.add.at(visits, (agents, state.pos[agents, 1], state.pos[agents, 0]), 1)
    return visits


def probes_init(state: SymbolicState, shape: tuple[int, int]) -> Probes:
    """Probes of an episode that starts in `state` (the reset state counts as one visit)."""
    a = state.num_agents
    zeros = np.zeros(a, np.int32)
    return Probes(apples=zeros, cleaned=zeros, fire_clean=zeros,
                  visits=_visit(np.zeros((a, *shape), np.int32), state),
                  patches_alive=np.array([_alive_patches(state)], np.int32), decisions=zeros, steps=0)


def probes_step(probes: Probes, actions, state: SymbolicState, fire_clean_action: int | None) -> Probes:
    """Account for one env step: `actions` int [A] led to `state`.

    `fire_clean_action` is the env index of FIRE_CLEAN (None in Harvest, which has no beam)."""
    actions = np.asarray(actions)
    fired = (actions == fire_clean_action).astype(np.int32) if fire_clean_action is not None else 0
    return dataclasses.replace(
        probes,
        apples=probes.apples + state.ate,
        cleaned=probes.cleaned + state.cleaned,
        fire_clean=probes.fire_clean + fired,
        visits=_visit(probes.visits, state),
        patches_alive=np.append(probes.patches_alive, _alive_patches(state)).astype(np.int32),
        steps=probes.steps + 1,
    )


def probes_decisions(probes: Probes, deciding) -> Probes:
    """Count one LLM decision for every agent with `deciding[a]` True (bool [A])."""
    return dataclasses.replace(probes, decisions=probes.decisions + np.asarray(deciding, bool).astype(np.int32))
