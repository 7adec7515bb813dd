"""The Overcooked env's API: layouts, reset/step, jit/vmap, auto-reset, errors, renderers, CLI."""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from omjax.envs.overcooked import (
    EVENTS,
    MAX_INGREDIENTS,
    OBS_CHANNELS,
    Action,
    Item,
    Overcooked,
    PotPhase,
    Terrain,
    initial_state,
    list_layouts,
    load_layout,
    pot_phase,
    random_actions,
    render_ascii,
    render_rgb,
    render_text,
    soup_item,
    soup_onions,
    soup_tomatoes,
)
from omjax.envs.overcooked.reference import load_overcooked_ai, make_mdp


@pytest.fixture(scope="module")
def env():
    return Overcooked("cramped_room", horizon=6)


def test_every_shipped_layout_parses_like_overcooked_ai():
    oa = load_overcooked_ai()
    names = list_layouts()
    assert len(names) >= 40 and "asymmetric_advantages" in names
    for name in names:
        layout = load_layout(name)
        mdp = make_mdp(name)
        assert layout.char_rows() == ["".join(row) for row in mdp.terrain_mtx], name
        assert [tuple(p) for p in layout.pot_pos] == mdp.get_pot_locations(), name
        assert layout.num_agents == mdp.num_players, name
        start = mdp.get_standard_start_state()
        assert [tuple(p) for p in layout.start_pos] == [p.position for p in start.players], name
        # Recipe values and cook times, as overcooked_ai_py scores a delivered soup.
        for onions in range(MAX_INGREDIENTS + 1):
            for tomatoes in range(MAX_INGREDIENTS + 1 - onions):
                if onions + tomatoes == 0:
                    continue
                recipe = oa.Recipe(["onion"] * onions + ["tomato"] * tomatoes)
                assert layout.soup_value[onions, tomatoes] == mdp.get_recipe_value(start, recipe), (name, recipe)
                assert layout.soup_cook_time[onions, tomatoes] == recipe.time, (name, recipe)


def test_classic_layout_constants():
    layout = load_layout("asymmetric_advantages")
    assert (layout.height, layout.width, layout.num_agents, layout.num_pots) == (5, 9, 2, 2)
    assert layout.cook_time == 20 and layout.delivery_reward == 20.0
    assert layout.soup_value[1, 0] == 0.0 and layout.soup_value[2, 0] == 0.0  # not ordered
    np.testing.assert_array_equal(layout.start_pos, [[6, 2], [1, 3]])
    assert layout.grid[1, 0] == Terrain.ONION_DISPENSER and layout.grid[2, 4] == Terrain.POT
    assert layout.pot_index[2, 4] == 0 and layout.pot_index[0, 0] == -1


def test_item_codes_carry_soup_ingredients():
    assert soup_item(3) == Item.SOUP_3 and soup_item(1) == Item.SOUP_1
    for onions in range(MAX_INGREDIENTS + 1):
        for tomatoes in range(MAX_INGREDIENTS + 1 - onions):
            if onions + tomatoes:
                code = soup_item(onions, tomatoes)
                assert (soup_onions(code), soup_tomatoes(code)) == (onions, tomatoes)
    codes = jnp.array([Item.NONE, Item.ONION, Item.DISH, Item.SOUP_2, soup_item(1, 2)])
    np.testing.assert_array_equal(soup_onions(codes), [0, 0, 0, 2, 1])
    np.testing.assert_array_equal(soup_tomatoes(codes), [0, 0, 0, 0, 2])


def test_reset_and_step_follow_the_jaxmarl_api(env):
    obs, state = env.reset(jax.random.PRNGKey(0))
    assert env.agents == ["agent_0", "agent_1"]
    shape = (env.layout.height, env.layout.width, len(OBS_CHANNELS))
    assert set(obs) == set(env.agents) and all(o.shape == shape and o.dtype == jnp.int32 for o in obs.values())
    assert state.pos.shape == (2, 2) and state.counter.shape == (4, 5) and state.pot_tick.shape == (1,)
    assert int(state.pot_tick[0]) == -1 and int(state.time) == 0
    # agent_0 steps north, agent_1 interacts facing a counter: nothing to pick up.
    obs, state, rewards, dones, infos = env.step(jax.random.PRNGKey(1), state, {"agent_0": 0, "agent_1": 5})
    np.testing.assert_array_equal(state.pos, [[1, 1], [3, 1]])
    assert set(rewards) == set(env.agents) and set(dones) == {*env.agents, "__all__"}
    assert not bool(dones["__all__"]) and int(state.time) == 1
    assert set(infos["events"]) == set(EVENTS) and infos["shaped_reward_by_agent"].shape == (2,)
    # The observation marks each agent's own cell with its facing + 1.
    own = OBS_CHANNELS.index("self_facing_plus_1")
    assert int(obs["agent_0"][1, 1, own]) == Action.NORTH + 1 and int(obs["agent_1"][1, 3, own]) == 1
    # The same step from an action array [A] gives the same state.
    _, state_b = env.reset(jax.random.PRNGKey(0))
    _, state_b, *_ = env.step(jax.random.PRNGKey(1), state_b, jnp.array([0, 5]))
    assert all(np.array_equal(a, b) for a, b in zip(jax.tree.leaves(state), jax.tree.leaves(state_b)))


def test_step_is_jittable_vmappable_and_batched_equals_unbatched(env):
    batch, steps = 16, 6
    keys = jax.random.split(jax.random.PRNGKey(3), batch)
    actions = random_actions(jax.random.PRNGKey(4), (steps, batch, env.num_agents))  # [T, B, A]

    @jax.jit
    def rollout(keys, actions):
        _, states = jax.vmap(env.reset)(keys)

        def body(states, joint):
            _, states, rewards, dones, _ = jax.vmap(env.step)(keys, states, joint)
            return states, (states, dones["__all__"])

        return jax.lax.scan(body, states, actions)[1]

    states, dones = rollout(keys, actions)
    assert states.pos.shape == (steps, batch, 2, 2) and dones.shape == (steps, batch)
    for b in (0, 7):
        _, state = env.reset(keys[b])
        for t in range(steps):
            _, state, _, done, _ = env.step(keys[b], state, actions[t, b])
            for ours, batched in zip(jax.tree.leaves(state), jax.tree.leaves(states)):
                np.testing.assert_array_equal(ours, batched[t, b])
            assert bool(done["__all__"]) == bool(dones[t, b])


def test_episode_ends_at_the_horizon_and_resets(env):
    _, state = env.reset(jax.random.PRNGKey(0))
    start = initial_state(env.layout)
    for t in range(env.horizon):
        _, state, _, dones, _ = env.step(jax.random.PRNGKey(t), state, jnp.array([0, 3]))
        assert bool(dones["__all__"]) == (t == env.horizon - 1)
    # The step that reached the horizon returned the auto-reset start state.
    for ours, fresh in zip(jax.tree.leaves(state), jax.tree.leaves(start)):
        np.testing.assert_array_equal(ours, fresh)
    _, state, _, dones, _ = jax.jit(env.step_env)(jax.random.PRNGKey(0), start.replace(time=jnp.int32(5)),
                                                  jnp.array([4, 4]))
    assert bool(dones["__all__"]) and int(state.time) == 6


def test_random_start_places_agents_on_distinct_floor_cells():
    env = Overcooked("asymmetric_advantages", random_start=True)
    _, states = jax.vmap(env.reset)(jax.random.split(jax.random.PRNGKey(0), 64))
    pos = np.asarray(states.pos)  # [B, A, 2]
    assert (env.layout.grid[pos[..., 1], pos[..., 0]] == Terrain.FLOOR).all()
    assert (pos[:, 0] != pos[:, 1]).any(-1).all()
    assert len({tuple(p.ravel()) for p in pos}) > 32
    assert (np.asarray(states.facing) == Action.NORTH).all()


def test_pot_phase_codes():
    layout = load_layout("cramped_room")
    state = initial_state(layout)
    cases = [(0, -1, PotPhase.EMPTY), (2, -1, PotPhase.FILLING), (3, -1, PotPhase.FULL),
             (1, 0, PotPhase.COOKING), (3, 19, PotPhase.COOKING), (3, 20, PotPhase.READY)]
    for onions, tick, phase in cases:
        s = state.replace(pot_onions=jnp.array([onions]), pot_tick=jnp.array([tick]))
        assert int(pot_phase(layout, s)[0]) == phase, (onions, tick)


def test_bad_input_gets_clear_errors(env):
    with pytest.raises(ValueError, match="unknown Overcooked layout 'no_such_kitchen'"):
        Overcooked("no_such_kitchen")
    with pytest.raises(ValueError, match="horizon"):
        Overcooked("cramped_room", horizon=0)
    _, state = env.reset(jax.random.PRNGKey(0))
    key = jax.random.PRNGKey(0)
    with pytest.raises(ValueError, match=r"actions must be in \[0, 6\)"):
        env.step(key, state, {"agent_0": 6, "agent_1": 0})
    with pytest.raises(ValueError, match=r"actions must be in \[0, 6\)"):
        env.step(key, state, jnp.array([0, -1]))
    with pytest.raises(ValueError, match="missing \\['agent_1'\\]"):
        env.step(key, state, {"agent_0": 1})
    with pytest.raises(ValueError, match="agent axis"):
        env.step(key, state, jnp.array([0, 1, 2]))
    with pytest.raises(ValueError, match="integers"):
        env.step(key, state, jnp.array([0.0, 1.0]))


def test_renderers_show_the_prompt_facts():
    layout = load_layout("cramped_room")
    state = initial_state(layout).replace(
        held=jnp.array([Item.ONION, Item.SOUP_3]), counter=jnp.zeros((4, 5), jnp.int32).at[0, 0].set(Item.DISH),
        pot_onions=jnp.array([3]), pot_tick=jnp.array([5]), facing=jnp.array([Action.EAST, Action.WEST]))
    text = render_text(layout, state)
    assert "agent_0 at (1, 2) facing east, holding onion" in text
    assert "agent_1 at (3, 1) facing west, holding soup (3 onions)" in text
    assert "pot 0 at (2, 0): 3 onions; cooking, 15 of 20 ticks left" in text
    assert "dish at (0, 0)" in text and "serving counters: (3, 3)" in text
    rows = render_ascii(layout, state).split("\n")
    assert len(rows) == layout.height
    assert rows[2][3:6] == "0>o" and rows[1][9:12] == "1<s" and rows[0][:2] == "Xd" and rows[0][6:8] == "P~"
    image = render_rgb(layout, state, cell=10)
    assert image.shape == (40, 50, 3) and image.dtype == np.uint8 and len(np.unique(image.reshape(-1, 3), axis=0)) > 5
    with pytest.raises(ValueError, match="unbatched"):
        render_text(layout, jax.tree.map(lambda x: x[None], state))


def test_rollout_cli_prints_team_returns(tmp_path, capsys):
    from omjax.envs.overcooked.cli import main

    out = tmp_path / "episodes.jsonl"
    code = main(["rollout", "--layout", "cramped_room", "--episodes", "3", "--num-envs", "2",
                 "--horizon", "30", "--seed", "1", "--out", str(out)])
    assert code == 0
    printed = capsys.readouterr().out
    assert printed.count("  team return ") == 3 and "cramped_room: 3 episodes x 30 steps" in printed
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["episode"] for r in records] == [0, 1, 2] and all(r["team_return"] >= 0 for r in records)
    assert main(["rollout", "--layout", "no_such_kitchen"]) == 2
