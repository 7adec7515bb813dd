"""Play Overcooked episodes with Python option policies, recording what the audits need.

This drives the real env through the option library's own executor (`OvercookedOptions.
option_step`, the one training rollouts use), one decision per agent whenever its option has
finished. It is the harness of the audits on policies given as Python callables (scripted
references, or any `policy(lib, state, agent) -> instance`), and of the solo test.

Solo episodes keep the other agents in the kitchen but inactive: they stand still at their start
pose and never decide, as in the solo burn-in episodes of §5.1. In the separated kitchens the
solo test is about (Asymmetric Advantages, Forced Coordination) a partner standing in its own
half cannot block anyone, so this equals removing it, and every condition shares one compiled
step function per layout.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass, replace

import jax
import jax.numpy as jnp
import numpy as np

from omjax.envs.overcooked.env import initial_state
from omjax.envs.overcooked.layout import Layout, Terrain, load_layout
from omjax.eval.audits import SoloReport
from omjax.eval.results import EpisodeResult, Trajectory
from omjax.eval.scripted import OptionPolicy
from omjax.options.overcooked import OvercookedOptions, library
from omjax.options.schema import outcome_name


@dataclass(frozen=True)
class OptionEpisode:
    """One played episode."""

    decisions: list[dict]
    """Per finished execution: step (initiation), aid, opt, target, outcome."""
    choices: list[dict]
    """Per decision: step, aid, opt (what the policy picked, finished or not)."""
    trajectory: Trajectory
    """Positions [T, A, 2] as (row, col) and the layout's walls."""
    deliveries: np.ndarray
    """int [A] soups each agent delivered (the env's sparse reward of the agent, in deliveries)."""

    @property
    def team_deliveries(self) -> int:
        return int(self.deliveries.sum())


@functools.lru_cache(maxsize=8)
def _compiled_step(lib: OvercookedOptions):
    """The jitted executor step of one library, compiled once and reused by every episode."""
    return jax.jit(lib.option_step)


def play_episode(
    lib: OvercookedOptions, policies: Sequence[OptionPolicy], horizon: int, active: Sequence[bool] | None = None
) -> OptionEpisode:
    """Play one episode of `horizon` steps; `policies[a]` decides for agent a.

    `active` [A] (default all) marks the agents that act; the others stand still and never decide.
    """
    n_agents = lib.num_agents
    if len(policies) != n_agents:
        raise ValueError(f"{len(policies)} policies for a layout with {n_agents} agents")
    if horizon < 1:
        raise ValueError(f"horizon must be >= 1, got {horizon}")
    acting = np.ones(n_agents, bool) if active is None else np.asarray(active, bool)
    if acting.shape != (n_agents,):
        raise ValueError(f"active must have one flag per agent ({n_agents}), got shape {acting.shape}")
    step = _compiled_step(lib)
    active_jnp = jnp.asarray(acting)
    state, ex = initial_state(lib.layout), lib.init_exec()
    positions = np.zeros((horizon, n_agents, 2), np.int32)
    decisions: list[dict] = []
    choices: list[dict] = []
    deliveries = np.zeros(n_agents, np.int64)
    for t in range(horizon):
        need = (np.asarray(ex.inst) < 0) & acting  # [A]
        choice = np.zeros(n_agents, np.int32)
        for a in np.flatnonzero(need):
            choice[a] = int(policies[a](lib, state, int(a)))
            choices.append({"step": t, "aid": int(a), "opt": lib.schema.options[lib.inst_opt[choice[a]]].name})
        state, ex, rec, sparse, _ = step(state, ex, jnp.asarray(choice), active_jnp)
        deliveries += np.round(np.asarray(sparse) / lib.layout.delivery_reward).astype(np.int64)
        valid, inst, outcome = (np.asarray(x) for x in (rec.valid, rec.inst, rec.outcome))
        for a in np.flatnonzero(valid):
            instance = lib.instances[int(inst[a])]
            decisions.append({
                "step": int(np.asarray(rec.start)[a]), "aid": int(a),
                "opt": lib.schema.options[instance.opt].name,
                "target": None if instance.target is None else list(instance.target),
                "outcome": outcome_name(int(outcome[a])),
            })
        positions[t] = np.asarray(state.pos)[:, ::-1]  # (x, y) -> (row, col)
    walls = lib.layout.grid != Terrain.FLOOR
    return OptionEpisode(decisions=decisions, choices=choices,
                         trajectory=Trajectory(positions=positions, walls=walls), deliveries=deliveries)


def episode_result(episode: OptionEpisode, *, policy: str, layout: str, seed: int) -> EpisodeResult:
    """Summarise a played episode as an `eval.jsonl` record (returns counted in deliveries)."""
    n_agents = len(episode.deliveries)
    macro = [dict() for _ in range(n_agents)]
    calls = [0] * n_agents
    for c in episode.choices:
        macro[c["aid"]][c["opt"]] = macro[c["aid"]].get(c["opt"], 0) + 1
        calls[c["aid"]] += 1
    return EpisodeResult(
        policy=policy, game="overcooked", layout=layout, interface="options", seed=seed,
        env_steps=int(episode.trajectory.positions.shape[0]), team_return=float(episode.team_deliveries),
        agent_returns=tuple(float(d) for d in episode.deliveries), llm_calls=tuple(calls),
        parse_failures=(0,) * n_agents, invalid_actions=(0,) * n_agents,
        macro_counts=tuple(macro), primitive_counts=tuple({} for _ in range(n_agents)),
    )


def alone_layout(layout: str | Layout, agent: int) -> Layout:
    """The layout with only `agent`'s start pose, facing and held item: a one-player kitchen."""
    lay = load_layout(layout) if isinstance(layout, str) else layout
    if not 0 <= agent < lay.num_agents:
        raise ValueError(f"agent must be in [0, {lay.num_agents}) for layout {lay.name!r}, got {agent}")
    keep = slice(agent, agent + 1)
    return replace(lay, name=f"{lay.name}_alone{agent}", start_pos=lay.start_pos[keep],
                               start_facing=lay.start_facing[keep], start_held=lay.start_held[keep])


def solo_test_overcooked(
    layout: str, policies: Sequence[OptionPolicy], horizon: int, episodes: int = 1
) -> SoloReport:
    """Team deliveries beside each agent's deliveries when it plays alone (§6.4), the partner
    absent (a one-player state of the same layout, `alone_layout`).

    Scripted policies are deterministic and the layout's start state is fixed, so one episode per
    condition is exact for them; `episodes` repeats it for stochastic policies.
    """
    lib = library(layout)
    n_agents = lib.num_agents
    team = np.array([play_episode(lib, policies, horizon).team_deliveries for _ in range(episodes)], float)
    solo = np.zeros((n_agents, episodes))
    for a in range(n_agents):
        alone = OvercookedOptions(alone_layout(lib.layout, a), library=lib.library)
        solo[a] = [play_episode(alone, [policies[a]], horizon).team_deliveries for _ in range(episodes)]
    return SoloReport(team=team, solo=solo, partner="absent")
