"""Parity harness: omjax's JAX Overcooked against overcooked_ai_py 1.1.0 `OvercookedGridworld`.

Both simulators get the same pre-sampled joint actions. Ours runs as one jitted `lax.scan`, vmapped
over episodes; the reference steps in Python. At every step the reference state must convert to
exactly our state (`from_overcooked_ai`), ours must convert to a state equal to the reference's
(`to_overcooked_ai`, compared with overcooked_ai_py's own `__eq__`), and sparse rewards, shaped
rewards, the shared event flags and `done` must agree.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from omjax.envs.overcooked import EVENTS, Action, Overcooked, State, initial_state
from omjax.envs.overcooked.reference import (
    from_overcooked_ai,
    load_overcooked_ai,
    make_mdp,
    to_overcooked_ai,
)

FIELDS = [f for f in State.__dataclass_fields__]


@functools.lru_cache(maxsize=None)
def cached_env(layout: str, horizon: int) -> Overcooked:
    """One env per (layout, horizon), so the jitted rollout below compiles once per shape."""
    return Overcooked(layout, horizon=horizon)


@functools.partial(jax.jit, static_argnums=0)
def _scan_episodes(env: Overcooked, actions: jax.Array):
    """actions int32 [E, T, A] -> per-step (state, team reward, done, infos), each [E, T, ...]."""

    def episode(episode_actions):  # [T, A]
        def body(state, joint):
            _, state, rewards, dones, infos = env.step_env(jax.random.PRNGKey(0), state, joint)
            return state, (state, rewards[env.agents[0]], dones["__all__"], infos)

        return jax.lax.scan(body, initial_state(env.layout), episode_actions)[1]

    return jax.vmap(episode)(actions)


def sample_actions(rng: np.random.Generator, episodes: int, horizon: int, num_agents: int) -> np.ndarray:
    """int32 [E, T, A]: uniform actions in the first half of the episodes, and INTERACT-heavy
    ones (p = 1/2) in the second half, so that pots, plates and deliveries get exercised too."""
    uniform = rng.integers(0, len(Action), size=(episodes - episodes // 2, horizon, num_agents))
    heavy_p = np.array([0.1, 0.1, 0.1, 0.1, 0.1, 0.5])
    heavy = rng.choice(len(Action), size=(episodes // 2, horizon, num_agents), p=heavy_p)
    return np.concatenate([uniform, heavy]).astype(np.int32)


def _canonical(oa_state):
    """An overcooked_ai_py state as plain tuples, soup ingredients sorted (their order is history)."""

    def obj(o):
        if o is None:
            return None
        if o.name == "soup":
            return ("soup", o.position, o._cooking_tick, tuple(sorted(o.ingredients)))
        return (o.name, o.position)

    players = tuple((p.position, p.orientation, obj(p.held_object)) for p in oa_state.players)
    objects = tuple(sorted((pos, obj(o)) for pos, o in oa_state.objects.items()))
    return players, objects, oa_state.timestep, tuple(oa_state.all_orders), tuple(oa_state.bonus_orders)


def assert_same_state(ours: State, theirs: State, where: str) -> None:
    for field in FIELDS:
        a, b = np.asarray(getattr(ours, field)), np.asarray(getattr(theirs, field))
        assert a.shape == b.shape and np.array_equal(a, b), (
            f"{where}: field {field!r} differs\nours:\n{a}\novercooked_ai_py:\n{b}")


def assert_same_trajectory(name: str, ours: np.ndarray, theirs: np.ndarray, layout: str, actions) -> None:
    """Equal stacked per-step arrays [E, T, ...]; on failure name the first differing step."""
    assert ours.shape == theirs.shape, f"{layout}: {name} shapes {ours.shape} vs {theirs.shape}"
    differs = (ours != theirs).reshape(ours.shape[0], ours.shape[1], -1).any(-1)  # [E, T]
    if differs.any():
        e, t = np.argwhere(differs)[0]
        raise AssertionError(f"{layout} episode {e} step {t} (actions {actions[e, t].tolist()}): "
                             f"{name} ours {ours[e, t].tolist()} vs overcooked_ai_py {theirs[e, t].tolist()}")


def run_parity(layout: str, actions: np.ndarray, horizon: int, roundtrip_episodes: int = 10) -> dict:
    """Drive both simulators with `actions` [E, T, A] and assert equality at every step.

    Every reference state goes through `from_overcooked_ai` and must equal ours; in the first
    `roundtrip_episodes` episodes ours also goes through `to_overcooked_ai` at every step and must
    equal the reference's state. Returns event totals of our rollout.
    """
    env = cached_env(layout, horizon)
    states, team_reward, done, infos = jax.tree.map(np.asarray, _scan_episodes(env, jnp.asarray(actions)))
    mdp = make_mdp(layout)
    oa = load_overcooked_ai()
    oa_actions = oa.Action.INDEX_TO_ACTION
    onion_only = not env.layout.has_tomatoes
    start = mdp.get_standard_start_state()
    assert_same_state(from_overcooked_ai(env, start), initial_state(env.layout), f"{layout} start")
    shared_events = [name for name in EVENTS if name in oa.EVENT_TYPES]
    ref = {"sparse": [], "shaped": [], "done": [], **{name: [] for name in shared_events},
           **{field: [] for field in FIELDS}}
    for e in range(actions.shape[0]):
        oa_state = start
        for t in range(actions.shape[1]):
            oa_state, info = mdp.get_state_transition(oa_state, [oa_actions[a] for a in actions[e, t]])
            theirs = from_overcooked_ai(env, oa_state)
            for field in FIELDS:
                ref[field].append(getattr(theirs, field))
            if e < roundtrip_episodes:
                back = to_overcooked_ai(env, State(**{f: getattr(states, f)[e, t] for f in FIELDS}))
                where = f"{layout} episode {e} step {t} actions {actions[e, t].tolist()}"
                if onion_only:
                    assert back == oa_state, f"{where}: to_overcooked_ai differs:\n{back}\nvs\n{oa_state}"
                else:
                    assert _canonical(back) == _canonical(oa_state), f"{where}: to_overcooked_ai differs"
            ref["sparse"].append(info["sparse_reward_by_agent"])
            ref["shaped"].append(info["shaped_reward_by_agent"])
            ref["done"].append(oa_state.timestep >= horizon)
            for name in shared_events:
                ref[name].append(info["event_infos"][name])
    ref = {k: np.asarray(v).reshape(actions.shape[:2] + np.asarray(v).shape[1:]) for k, v in ref.items()}
    check = lambda name, ours, theirs: assert_same_trajectory(name, ours, theirs, layout, actions)  # noqa: E731
    for field in FIELDS:
        check(f"state.{field}", getattr(states, field), ref[field])
    check("sparse_reward_by_agent", infos["sparse_reward_by_agent"], ref["sparse"].astype(np.float32))
    check("shaped_reward_by_agent", infos["shaped_reward_by_agent"], ref["shaped"].astype(np.float32))
    check("team reward", team_reward, ref["sparse"].sum(-1).astype(np.float32))
    check("done", done, ref["done"])
    for name in shared_events:
        check(f"event {name}", infos["events"][name], ref[name])
    totals = {name: int(infos["events"][name].sum()) for name in EVENTS}
    totals["sparse_reward"] = float(team_reward.sum())
    return totals
