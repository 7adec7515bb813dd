"""Step-for-step parity with overcooked_ai_py 1.1.0 on random joint actions (see overcooked_parity)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from overcooked_parity import assert_same_state, run_parity, sample_actions

from omjax.envs.overcooked import EVENTS, Action, Item, Overcooked, initial_state, list_layouts, load_layout
from omjax.envs.overcooked.env import transition
from omjax.envs.overcooked.items import Direction
from omjax.envs.overcooked.reference import from_overcooked_ai, load_overcooked_ai, make_mdp, to_overcooked_ai

PARITY_LAYOUTS = ["asymmetric_advantages", "forced_coordination", "cramped_room"]


@pytest.mark.parametrize("layout", PARITY_LAYOUTS)
def test_random_episodes_match_overcooked_ai(layout):
    episodes, horizon = 50, 400
    actions = sample_actions(np.random.default_rng(PARITY_LAYOUTS.index(layout)), episodes, horizon, 2)
    totals = run_parity(layout, actions, horizon)
    # The comparison is only meaningful if the games actually did things: items moved, pots filled
    # and started, soups plated.
    for name in ("onion_pickup", "dish_pickup", "onion_drop", "potting_onion", "cook_start", "soup_pickup"):
        assert totals[name] > 0, f"{layout}: no {name} event in {episodes} random episodes: {totals}"


def test_tomato_layout_matches_overcooked_ai():
    # Mixed soups and per-recipe values and cook times; the slow sweep covers every other layout.
    layout = "cramped_room_tomato"
    actions = sample_actions(np.random.default_rng(7), 4, 400, 2)
    totals = run_parity(layout, actions, 400)
    assert totals["potting_tomato"] > 0 and totals["potting_onion"] > 0, totals


@pytest.mark.slow
@pytest.mark.parametrize("layout", list_layouts())
def test_every_layout_matches_overcooked_ai(layout):
    env_agents = Overcooked(layout).num_agents
    actions = sample_actions(np.random.default_rng(11), 20, 400, env_agents)
    run_parity(layout, actions, 400)


def _one_step_matches_overcooked_ai(layout: str, state, actions) -> np.ndarray:
    """Step `state` once with `actions` [A] in both simulators; assert equal next states, rewards
    and shared events. Returns our shaped reward by agent."""
    env = Overcooked(layout)
    oa = load_overcooked_ai()
    mdp = make_mdp(layout)
    oa_next, info = mdp.get_state_transition(to_overcooked_ai(env, state),
                                             [oa.Action.INDEX_TO_ACTION[a] for a in actions])
    ours, sparse, shaped, events = jax.jit(transition, static_argnums=0)(env.layout, state, jnp.asarray(actions))
    assert_same_state(jax.tree.map(np.asarray, ours), from_overcooked_ai(env, oa_next), layout)
    np.testing.assert_array_equal(np.asarray(sparse), np.asarray(info["sparse_reward_by_agent"], np.float32))
    np.testing.assert_array_equal(np.asarray(shaped), np.asarray(info["shaped_reward_by_agent"], np.float32))
    for name in EVENTS:
        if name in oa.EVENT_TYPES:
            np.testing.assert_array_equal(np.asarray(events[name]), np.asarray(info["event_infos"][name]), name)
    return np.asarray(shaped)


# five_by_five: agent 0 at (1, 1) faces the counter (0, 1) to its west, agent 1 at (3, 3) faces the
# dish dispenser (4, 3) to its east; both pots hold one onion (2 non-empty pots), both INTERACT.
# (counter dishes, agent 0 holds, expected shaped reward)
DISH_PICKUP_CASES = {
    # Agent 0 takes the only counter dish first, so agent 1's dispenser dish is useful (1 held < 2
    # pots); this is the slow sweep's five_by_five episode 5 step 152, where a bool mask `&` -1
    # once counted the taken dish as +1 on the counters.
    "counter_dish_taken_first": ([(0, 1)], Item.NONE, [0, 3]),
    # Another dish is still on a counter: not useful.
    "other_counter_dish_left": ([(0, 1), (0, 3)], Item.NONE, [0, 0]),
    # Agent 0 drops its dish on the counter first: not useful.
    "dish_dropped_first": ([], Item.DISH, [0, 0]),
    # Nothing on the counters, agent 0 empty-handed: 0 held < 2 pots.
    "no_counter_dish": ([], Item.NONE, [0, 3]),
}


@pytest.mark.parametrize("case", list(DISH_PICKUP_CASES))
def test_dish_pickup_shaping_sees_earlier_agents_counter_moves(case):
    counter_dishes, held0, expected = DISH_PICKUP_CASES[case]
    layout = "five_by_five"
    state = initial_state(load_layout(layout))
    counter = np.zeros(state.counter.shape, np.int32)
    for x, y in counter_dishes:
        counter[y, x] = Item.DISH
    state = state.replace(
        pos=jnp.asarray([[1, 1], [3, 3]], jnp.int32),
        facing=jnp.asarray([Direction.WEST, Direction.EAST], jnp.int32),
        held=jnp.asarray([held0, Item.NONE], jnp.int32), counter=jnp.asarray(counter),
        pot_onions=jnp.asarray([1, 1], jnp.int32), time=jnp.asarray(152, jnp.int32))
    shaped = _one_step_matches_overcooked_ai(layout, state, [Action.INTERACT, Action.INTERACT])
    assert shaped.tolist() == expected


def test_five_by_five_episode_prefix_matches_overcooked_ai():
    # The slow sweep's five_by_five episode 5 up to its step 152 (the dish pickup case above).
    actions = sample_actions(np.random.default_rng(11), 20, 400, 2)[5:6, :153]
    run_parity("five_by_five", actions, 400, roundtrip_episodes=0)
