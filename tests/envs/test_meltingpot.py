"""Melting Pot adapters against the real engine: symbolic state, actions, text, probes, workers."""

from __future__ import annotations

import os
import signal

import numpy as np
import pytest

from omjax.envs.meltingpot import make
from omjax.envs.meltingpot.adapter import HEADING, SymbolicState
from omjax.envs.meltingpot.engine import LAYER_FORWARD, LAYER_LEFT
from omjax.envs.meltingpot.probes import probes_decisions, probes_init, probes_step
from omjax.envs.meltingpot.text import observation_text, view_mask
from omjax.interfaces.native import primitive_actions
from omjax.envs.meltingpot.workers import EnvPool, WorkerCrash

DATA = os.path.join(os.path.dirname(__file__), "..", "data", "meltingpot")


@pytest.fixture(scope="module")
def cleanup():
    env = make("cleanup")
    yield env
    env.close()


@pytest.fixture(scope="module")
def harvest():
    env = make("harvest")
    yield env
    env.close()


def _engine_truth(env, state: SymbolicState):
    """Compare the symbolic state with what the engine itself reports this step."""
    lab = env._lab
    layers = []
    for a, lua in enumerate(env._lua):
        pos = np.asarray(lab.observation(f"{lua + 1}.POSITION"))
        assert tuple(pos) == tuple(state.pos[a])
        assert int(np.asarray(lab.observation(f"{lua + 1}.ORIENTATION"))) == state.ori[a]
        assert float(np.asarray(lab.observation(f"{lua + 1}.REWARD"))) == state.reward[a]
        if env.substrate.dirt_layer is not None:
            assert int(np.asarray(lab.observation(f"{lua + 1}.PLAYER_ATE_APPLE"))) == state.ate[a]
            assert int(np.asarray(lab.observation(f"{lua + 1}.PLAYER_CLEANED"))) == state.cleaned[a]
        layers.append(np.asarray(lab.observation(f"{lua + 1}.LAYER")))
    text = [r for r in lab.observation("GLOBAL.TEXT").decode().split("\n") if r]
    checked = 0
    h, w = env.layout.shape
    for a in np.nonzero(state.alive)[0]:
        x, y = state.pos[a]
        assert text[y][x] in "AB"  # an alive avatar is drawn (or a beam over it)
        # Every cell of this avatar's LAYER window: apples and dirt are the engine's own.
        for r in range(layers[a].shape[0]):
            for c in range(layers[a].shape[1]):
                xx, yy = x - LAYER_LEFT + c, y - LAYER_FORWARD + r
                if not (0 <= xx < w and 0 <= yy < h):
                    continue
                cell = layers[a][r, c]
                assert (cell[env._apple_ch] == env._apple_id) == state.apples[yy, xx], (a, xx, yy)
                if env._dirt_ch is not None:
                    assert (cell[env._dirt_ch] == env._dirt_id) == state.dirt[yy, xx], (a, xx, yy)
                checked += 1
    # Cells no avatar sees still come from the text map.
    apples_text = np.array([[ch == "A" for ch in row] for row in text])
    avatar = np.zeros_like(apples_text)
    avatar[state.pos[state.alive, 1], state.pos[state.alive, 0]] = True
    beams = np.array([[ch == "B" for ch in row] for row in text])
    clear = ~avatar & ~beams
    assert np.array_equal(state.apples[clear], apples_text[clear])
    if env.layout.num_patches:
        assert np.array_equal(state.patch_apples,
                              [state.apples[env.layout.patch_id == k].sum() for k in range(env.layout.num_patches)])
    return checked


@pytest.mark.parametrize("game,steps", [("cleanup", 100), ("harvest", 100)])
def test_symbolic_state_equals_engine_truth_on_random_play(game, steps, request):
    env = request.getfixturevalue(game)
    state = env.reset(7)
    rng = np.random.default_rng(0)
    n_act = len(env.substrate.action_names)
    checked, eaten, beams_seen = _engine_truth(env, state), 0, 0
    for _ in range(steps):
        state = env.step(rng.integers(0, n_act, env.num_agents))
        checked += _engine_truth(env, state)
        eaten += int(state.ate.sum())
        beams_seen += int(np.any(np.array(list(env._lab.observation("GLOBAL.TEXT").decode())) == "B"))
    assert checked > 10_000
    assert beams_seen > 10  # occluded cells were exercised
    if game == "harvest":
        assert eaten > 0 and state.patch_apples.sum() < env.layout.orchard.sum()


def test_layouts(cleanup, harvest):
    lay = cleanup.layout
    assert lay.river.any() and lay.orchard.any() and lay.shore.any()
    assert not (lay.shore & lay.river).any()
    hl = harvest.layout
    assert hl.num_patches == 6  # the paper's six patches, found from the regrowth radius
    assert (hl.patch_id >= 0).sum() == hl.orchard.sum()
    s = harvest.reset(1)
    assert s.patch_apples.sum() == hl.orchard.sum()  # every apple is present at the start


def test_actions_move_the_avatar_as_named(cleanup):
    state = cleanup.reset(3)
    names = cleanup.substrate.action_names
    turn = names.index("TURN_RIGHT")
    fwd = names.index("FORWARD")
    noop = names.index("NOOP")
    a = 0
    before_ori = int(state.ori[a])
    actions = np.full(cleanup.num_agents, noop)
    actions[a] = turn
    state = cleanup.step(actions)
    assert state.ori[a] == (before_ori + 1) % 4
    before = state.pos[a].copy()
    actions[a] = fwd
    state = cleanup.step(actions)
    target = before + HEADING[state.ori[a]]
    if cleanup.layout.walkable[target[1], target[0]]:
        assert tuple(state.pos[a]) == tuple(target)


def test_bad_input_is_rejected(cleanup):
    fresh = make("cleanup")
    with pytest.raises(RuntimeError, match="reset"):
        fresh.step(np.zeros(7, int))
    cleanup.reset(0)
    with pytest.raises(ValueError, match=r"int \[7\]"):
        cleanup.step(np.zeros(6, int))
    with pytest.raises(ValueError, match="0..8"):
        cleanup.step(np.full(7, 9))
    with pytest.raises(ValueError, match="unknown Melting Pot game"):
        make("clean-up")


@pytest.mark.slow
def test_cleanup_is_reproducible_without_zaps(cleanup):
    runs = []
    for _ in range(2):
        s = cleanup.reset(21)
        rng = np.random.default_rng(5)
        trace = [s.pos.copy()]
        for _ in range(60):
            s = cleanup.step(rng.integers(0, 7, cleanup.num_agents))  # moves and turns only
            trace.append(np.concatenate([s.pos.ravel(), s.ori, s.dirt.ravel()]))
        runs.append(np.concatenate([t.ravel() for t in trace]))
    assert np.array_equal(runs[0], runs[1])


def test_view_window_is_the_avatar_view():
    mask = view_mask((15, 10), 0, (21, 30))
    assert mask.sum() == 121
    assert mask[1, 15] and not mask[0, 15] and mask[11, 15] and not mask[12, 15]  # 9 ahead, 1 behind
    east = view_mask((10, 10), 1, (21, 30))
    assert east[10, 19] and not east[10, 20] and east[10, 9] and not east[10, 8]
    assert east[5, 10] and not east[4, 10]


def test_primitive_letters_follow_the_engine_action_set(cleanup, harvest):
    ca = primitive_actions(cleanup.substrate)
    assert ca.letters[-1] == "I" and ca.names[8] == "fire clean"
    assert cleanup.substrate.action_names[8] == "FIRE_CLEAN"
    for names, engine in ((ca.names, cleanup.substrate.action_names),
                          (primitive_actions(harvest.substrate).names, harvest.substrate.action_names)):
        assert [n.replace(" ", "_").upper() for n in names] == list(engine)
    assert ca.parse("state: river_dirty\nchoice: I") == 8


def _render_all(env, state):
    return "\n\n".join(observation_text(env.substrate, env.layout, state, a, env.episode_length)
                       for a in range(env.num_agents))


def test_text_observation_golden_cleanup(cleanup):
    state = cleanup.reset(0)
    noop = np.zeros(cleanup.num_agents, int)
    for _ in range(3):
        state = cleanup.step(noop)
    got = _render_all(cleanup, state)
    with open(os.path.join(DATA, "cleanup_seed0_text.txt")) as f:
        assert got == f.read()


def test_text_observation_golden_harvest(harvest):
    # Harvest spawn cells vary between engine builds of one seed (see omjax.envs.meltingpot), so the
    # golden state is a stored engine state rather than a fresh reset.
    with np.load(os.path.join(DATA, "harvest_state.npz")) as d:
        state = SymbolicState(step=int(d["step"]), pos=d["pos"], ori=d["ori"], alive=d["alive"],
                              apples=d["apples"], dirt=d["dirt"], reward=d["reward"], ate=d["ate"],
                              cleaned=d["cleaned"], patch_apples=d["patch_apples"], done=False)
    with open(os.path.join(DATA, "harvest_state_text.txt")) as f:
        assert _render_all(harvest, state) == f.read()


def test_probes_account_for_every_step(harvest):
    state = harvest.reset(2)
    probes = probes_init(state, harvest.layout.shape)
    rng = np.random.default_rng(1)
    eaten = 0
    for t in range(40):
        actions = rng.integers(0, 7, harvest.num_agents)
        state = harvest.step(actions)
        eaten += state.ate
        probes = probes_step(probes, actions, state, fire_clean_action=None)
        probes = probes_decisions(probes, np.arange(harvest.num_agents) % 2 == t % 2)
    assert np.array_equal(probes.apples, eaten)
    assert probes.visits.sum(axis=(1, 2)).tolist() == [41] * harvest.num_agents
    assert len(probes.patches_alive) == 41 and probes.patches_alive[0] == 6
    assert probes.call_ratio == pytest.approx((20 * 4 + 20 * 3) / (40 * 7))


def test_worker_pool_survives_a_crash():
    with EnvPool("cleanup", num_envs=2, episode_length=20) as pool:
        states = pool.reset([4, 5])
        assert all(isinstance(s, SymbolicState) and s.step == 0 for s in states)
        actions = np.zeros((2, 7), int)
        for _ in range(3):
            states = pool.step(actions)
        os.kill(pool.pid(1), signal.SIGKILL)  # the engine process dies mid-episode
        states = pool.step(actions)
        assert isinstance(states[0], SymbolicState) and states[0].step == 4
        crash = states[1]
        assert isinstance(crash, WorkerCrash) and crash.seed == 5 and crash.step == 3
        states = pool.step(actions)  # the survivor keeps going
        assert states[0].step == 5 and states[1] is crash
        with pytest.raises(ValueError, match="K=2"):
            pool.step(np.zeros((3, 7), int))
        states = pool.reset([6, 7])  # the dead slot gets a fresh worker
        assert all(isinstance(s, SymbolicState) for s in states)
