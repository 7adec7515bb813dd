"""Scripted Overcooked episodes, each checked step for step against overcooked_ai_py 1.1.0.

Random play rarely cooks and serves a soup, so these scripts do: a full 3-onion soup delivered,
a 1-onion soup (scored only where the layout orders it), collisions, and two chefs using one
counter in the same step (interacts resolve in agent order).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from overcooked_parity import _scan_episodes, cached_env, run_parity

from omjax.envs.overcooked import Action, Item, PotPhase, pot_phase

N, S, E, W, STAY, INTERACT = (int(a) for a in Action)

# cramped_room: agent_0 starts at (1, 2), agent_1 at (3, 1); onions at (0, 1), pot at (2, 0),
# dishes at (1, 3), serving at (3, 3).
FETCH_ONION_TO_POT = [W, INTERACT, E, N, INTERACT]  # from (2, 1) facing the pot, and back
FIRST_ONION = [N, W, INTERACT, E, N, INTERACT]  # from the start to (2, 1), one onion potted
FETCH_DISH_AND_WAIT = [W, S, S, INTERACT, N, E, N]  # a dish, back at (2, 1) facing the pot
SERVE = [S, E, S, INTERACT]  # from (2, 1) to (3, 2), facing the serving counter


# Every script is padded with STAY to one length, so each layout's rollout compiles once.
T = 64


def _script(agent_0: list[int]) -> np.ndarray:
    """int32 [1, T, 2]: agent_0 follows the script, then stays; agent_1 stays."""
    return _joint(list(zip(agent_0, [STAY] * len(agent_0))))


def _joint(joint: list[tuple[int, int]]) -> np.ndarray:
    """int32 [1, T, 2]: the joint actions, then both agents stay."""
    assert len(joint) <= T
    actions = np.full((1, T, 2), STAY, np.int32)
    actions[0, : len(joint)] = joint
    return actions


def _soup_script(onions: int, wait: int) -> list[int]:
    """Cook a soup of `onions`, fetch a dish, wait `wait` steps at the pot, plate and serve.

    Cooking starts at step 5 * onions + 1 (tick 1 after it); fetching the dish takes 7 steps, so
    the soup is ready (tick 20 = cook time) for the INTERACT after exactly 12 waiting steps."""
    return (FIRST_ONION + FETCH_ONION_TO_POT * (onions - 1) + [INTERACT] + FETCH_DISH_AND_WAIT
            + [STAY] * wait + [INTERACT] + SERVE)


def test_scripted_three_onion_soup_is_cooked_plated_and_served():
    script = _soup_script(onions=3, wait=12)
    totals = run_parity("cramped_room", _script(script), horizon=T)
    assert totals["potting_onion"] == 3 and totals["cook_start"] == 1
    assert totals["soup_pickup"] == 1 and totals["soup_delivery"] == 1
    assert totals["sparse_reward"] == 20.0


def test_scripted_plating_waits_for_the_cook_time():
    # One tick short: the dish cannot take the soup yet, so nothing is served.
    script = _soup_script(onions=3, wait=11)
    totals = run_parity("cramped_room", _script(script), horizon=T)
    assert totals["soup_pickup"] == 0 and totals["soup_delivery"] == 0 and totals["sparse_reward"] == 0.0
    env = cached_env("cramped_room", T)
    states = _scan_episodes(env, jnp.asarray(_script(script)))[0]
    plate_step = len(script) - len(SERVE) - 1
    before, after = (jax.tree.map(lambda x, t=t: x[0, t], states) for t in (plate_step - 1, plate_step))
    assert int(pot_phase(env, before)[0]) == PotPhase.COOKING and int(before.pot_tick[0]) == 19
    assert int(after.held[0]) == Item.DISH and int(pot_phase(env, after)[0]) == PotPhase.READY


def test_scripted_one_onion_soup_scores_only_where_ordered():
    script = _soup_script(onions=1, wait=12)
    # cramped_room orders only the 3-onion soup: a 1-onion soup is served for 0.
    totals = run_parity("cramped_room", _script(script), horizon=T)
    assert totals["soup_delivery"] == 1 and totals["sparse_reward"] == 0.0
    # cramped_room_o_3orders (same paths) values the 1-onion soup at 4.
    totals = run_parity("cramped_room_o_3orders", _script(script), horizon=T)
    assert totals["soup_delivery"] == 1 and totals["sparse_reward"] == 4.0


def test_scripted_collisions_block_every_agent():
    # agent_0 at (1, 2), agent_1 at (3, 1).
    joint = [(E, W),  # -> (2, 2) and (2, 1): no conflict
             (N, STAY),  # agent_0 into agent_1's cell: both stay, agent_0 turns north
             (N, S),  # swap: both stay, both turn
             (N, W)]  # agent_1 leaves (2, 1) as agent_0 enters it: allowed
    actions = _joint(joint)
    run_parity("cramped_room", actions, horizon=T)
    states = _scan_episodes(cached_env("cramped_room", T), jnp.asarray(actions))[0]
    expected = [[[2, 2], [2, 1]], [[2, 2], [2, 1]], [[2, 2], [2, 1]], [[2, 1], [1, 1]]]
    np.testing.assert_array_equal(np.asarray(states.pos[0, : len(joint)]), expected)
    np.testing.assert_array_equal(np.asarray(states.facing[0, 2]), [Action.NORTH, Action.SOUTH])


def test_scripted_same_step_counter_use_resolves_in_agent_order():
    # forced_coordination: agent_0 starts at (3, 1), agent_1 at (1, 2); counter (2, 2) between them.
    agent_1 = [W, INTERACT, E, INTERACT, W, INTERACT, E, INTERACT]  # onion on the counter, fetch another
    agent_0 = [S, W, STAY, STAY, STAY, STAY, STAY, INTERACT]  # reach (3, 2) facing the counter
    actions = _joint(list(zip(agent_0, agent_1)))
    run_parity("forced_coordination", actions, horizon=T)
    states = _scan_episodes(cached_env("forced_coordination", T), jnp.asarray(actions))[0]
    # agent_0 takes the first onion, and only then can agent_1 put its second one down.
    np.testing.assert_array_equal(np.asarray(states.held[0, -1]), [Item.ONION, Item.NONE])
    assert int(states.counter[0, -1, 2, 2]) == Item.ONION
