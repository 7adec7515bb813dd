"""Cleanup option libraries on the real clean_up engine: executors, burn-in certificate, menus, CLI."""

from __future__ import annotations

import dataclasses
import io
import os
from contextlib import redirect_stdout

import numpy as np
import pytest

from omjax.envs.meltingpot import CleanUp
from omjax.options import cleanup
from omjax.options import meltingpot as mp
from omjax.games.cli import main as options_cli
from omjax.options.menu import Instance
from omjax.options.records import load_npz
from omjax.games.registry import guard_path
from omjax.options.schema import EXPLICIT_BASE, SUCCESS, Reason
from omjax.options.synthesis import certificate_violations, read_guards, synthesize

DATA = os.path.join(os.path.dirname(__file__), "..", "data", "meltingpot")


@pytest.fixture(scope="module")
def env():
    e = CleanUp()
    yield e
    e.close()


def run(env, lib, ctx, state, agent, inst, limit=mp.MAX_OPTION_STEPS + 1):
    """Execute one option for `agent` while the others stand still; (execution, outcome, state)."""
    ex = mp.start(lib, ctx, state, agent, inst)
    for _ in range(limit):
        actions = np.full(env.num_agents, ctx.noop)
        actions[agent] = mp.act(lib, ctx, ex, state)
        state = env.step(actions)
        ex, outcome, _ = mp.advance(lib, ctx, ex, int(actions[agent]), state)
        if outcome is not None:
            return ex, outcome, state
    raise AssertionError("option never terminated")


def pause(env, ctx, state, steps=3):
    """Let the cleaning beam cool down (Cleaner cooldownTime 2) between two cleaning options."""
    for _ in range(steps):
        state = env.step(np.full(env.num_agents, ctx.noop))
    return state


def opt(lib, name):
    return lib.schema.option_index(name)


def test_clean_dirt_walks_turns_fires_and_removes_the_dirt(env):
    lib = cleanup.LIBRARY.library("lib_a")
    state = env.reset(0)
    ctx = mp.make_ctx(env, cleanup.regions(env))
    agent = 0
    dirt = mp.targets(ctx, state, agent)["dirt"]
    # Hand-picked: the nearest dirt, one that needs a turn (not in the current beam) and a far one.
    not_aimed = [d for d in dirt if not mp.in_beam(ctx.layout, state.dirt, state.pos[agent], int(state.ori[agent]), d)]
    for target in (dirt[0], not_aimed[0], dirt[-1]):
        if not state.dirt[target[1], target[0]]:
            continue
        ex, outcome, state = run(env, lib, ctx, state, agent, Instance(opt(lib, "clean_dirt"), target))
        assert outcome == SUCCESS, (target, ex)
        assert not state.dirt[target[1], target[0]] and ex.cleaned >= 1 and ex.fired
        state = pause(env, ctx, state)


def test_goto_options_reach_their_regions(env):
    lib = cleanup.LIBRARY.library("lib_a")
    state = env.reset(1)
    ctx = mp.make_ctx(env, cleanup.regions(env))
    for agent, name, region in ((2, "go_to_river", "river"), (3, "go_to_orchard", "orchard")):
        ex, outcome, state = run(env, lib, ctx, state, agent, Instance(opt(lib, name), None))
        assert outcome == SUCCESS
        assert ctx.regions[region][state.pos[agent, 1], state.pos[agent, 0]]
        # Asked again from inside the region, it promises nothing new: a no-op is an effect_fail.
        _, again, state = run(env, lib, ctx, state, agent, Instance(opt(lib, name), None))
        assert again != SUCCESS


def test_eat_executor_reaches_a_hand_picked_apple_cell(env):
    # clean_up grows no apple until the river is mostly clean, so the apple is placed in the
    # symbolic state: the executor must still walk the real engine's avatar onto that cell.
    lib = cleanup.LIBRARY.library("lib_a")
    state = env.reset(2)
    ctx = mp.make_ctx(env, cleanup.regions(env))
    agent = 6
    target = tuple(int(v) for v in np.argwhere(ctx.layout.orchard)[5][::-1])
    apples = state.apples.copy()
    apples[target[1], target[0]] = True
    ex = mp.start(lib, ctx, dataclasses.replace(state, apples=apples), agent, Instance(opt(lib, "eat_apple"), target))
    assert ex.failure is None
    for _ in range(mp.MAX_OPTION_STEPS):
        actions = np.full(env.num_agents, ctx.noop)
        actions[agent] = mp.act(lib, ctx, ex, dataclasses.replace(state, apples=apples))
        state = env.step(actions)
        if tuple(state.pos[agent]) == target:
            break
    assert tuple(state.pos[agent]) == target


def test_lib_b_approach_then_fire(env):
    lib = cleanup.LIBRARY.library("lib_b")
    state = env.reset(0)
    ctx = mp.make_ctx(env, cleanup.regions(env))
    agent = 1
    target = mp.targets(ctx, state, agent)["dirt"][2]
    ex, outcome, state = run(env, lib, ctx, state, agent, Instance(opt(lib, "approach_dirt"), target))
    assert outcome == SUCCESS and mp.in_beam(ctx.layout, state.dirt, state.pos[agent], int(state.ori[agent]), target)
    ex, outcome, state = run(env, lib, ctx, state, agent, Instance(opt(lib, "fire_beam"), None))
    assert outcome == SUCCESS and not state.dirt[target[1], target[0]]
    # Fired again at once, the beam is cooling down: nothing is cleaned.
    _, outcome, state = run(env, lib, ctx, state, agent, Instance(opt(lib, "fire_beam"), None))
    assert outcome != SUCCESS
    _, outcome, _ = run(env, lib, ctx, state, agent, Instance(opt(lib, "stay_put"), None))
    assert outcome == SUCCESS


def test_explicit_target_absent(env):
    lib = cleanup.LIBRARY.library("lib_a")
    state = env.reset(0)
    ctx = mp.make_ctx(env, cleanup.regions(env))
    sand = tuple(int(v) for v in np.argwhere(~ctx.layout.river & ctx.layout.walkable)[0][::-1])
    ex, outcome, _ = run(env, lib, ctx, state, 0, Instance(opt(lib, "clean_dirt"), sand))
    assert ex.failure == Reason.TargetAbsent and outcome == EXPLICIT_BASE + Reason.TargetAbsent and ex.steps == 1


@pytest.mark.parametrize("variant", [pytest.param("lib_a", marks=pytest.mark.slow), "lib_b"])
def test_certificate_on_a_fresh_burnin(variant):
    table = cleanup.LIBRARY.burnin(variant, 1, 1, seed=3, progress=False, episode_length=40)
    assert len(table) > 30
    own = set(cleanup.LIBRARY.library(variant).schema.option_names)
    assert {cleanup.LIBRARY.SCHEMA.option_names[o] for o in table.opt} <= own
    guards = synthesize(table, cleanup.LIBRARY.SCHEMA)
    assert any(g.channel == "inferred" for g in guards)
    assert certificate_violations(guards, table, cleanup.LIBRARY.SCHEMA) == 0
    succ = table.outcome == SUCCESS
    for g in guards:  # the certificate, restated: no logged success matches an adopted conjunction
        if g.channel == "inferred":
            match = table.opt == cleanup.LIBRARY.SCHEMA.option_index(g.opt)
            for name, value in g.when.items():
                match &= table.features[:, cleanup.LIBRARY.SCHEMA.read_index(name)] == cleanup.LIBRARY.SCHEMA.read_feature(name).code(value)
            assert not np.any(match & succ) and match.sum() >= 5


@pytest.mark.parametrize("variant", cleanup.LIBRARY.VARIANTS)
def test_shipped_guards_are_reproduced_from_the_shipped_burnin(variant):
    table = load_npz(os.path.join(DATA, f"burnin_cleanup_{variant}.npz"))
    guards = synthesize(table, cleanup.LIBRARY.SCHEMA)
    shipped = read_guards(guard_path("cleanup", variant), cleanup.LIBRARY.SCHEMA)
    assert [g.to_dict() for g in guards] == [g.to_dict() for g in shipped]
    assert certificate_violations(shipped, table, cleanup.LIBRARY.SCHEMA) == 0
    assert len(shipped) >= 2


def test_menu_cli_shows_a_real_menu():
    out = io.StringIO()
    with redirect_stdout(out):
        assert options_cli(["menu", "--game", "cleanup", "--layout", "lib_a", "--seed", "0", "--agent", "0"]) == 0
    text = out.getvalue()
    assert "clean dirt @ (" in text and "go to the orchard" in text and "\nA) " in text


def test_vectorised_beam_equals_the_lane_walk(env):
    """BeamMap (every pose at once) against the lane-by-lane definition, on random dirt grids."""
    lay = env.layout
    rng = np.random.default_rng(0)
    h, w = lay.shape
    for density in (0.05, 0.3):
        dirt = (rng.random((h, w)) < density) & lay.walkable
        beam = mp.BeamMap(lay, dirt)
        targets = [tuple(int(v) for v in c[::-1]) for c in np.argwhere(dirt)][:25]
        for y, x in np.argwhere(lay.walkable)[::3]:
            for ori in range(4):
                reached = {c for c in targets if mp.in_beam_reference(lay, dirt, (x, y), ori, c)}
                assert {c for c in targets if beam.in_beam((x, y), ori, c)} == reached
                hit = any(mp.in_beam_reference(lay, dirt, (x, y), ori, (int(cx), int(cy)))
                          for cy, cx in np.argwhere(dirt))
                assert bool(beam.hits_dirt[ori, y, x]) == hit
        for t in targets:
            poses = np.zeros((4, h, w), bool)
            for ori in range(4):
                for y, x in np.argwhere(lay.walkable):
                    poses[ori, y, x] = mp.in_beam_reference(lay, dirt, (x, y), ori, t)
            assert np.array_equal(beam.poses(t), poses)
