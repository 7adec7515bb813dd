"""Commons Harvest option libraries on the real engine: executors, burn-in certificate, menus, CLI."""

from __future__ import annotations

import dataclasses
import io
import os
from contextlib import redirect_stdout

import numpy as np
import pytest

from omjax.envs.meltingpot import CommonsHarvest
from omjax.options import harvest
from omjax.options import meltingpot as mp
from omjax.games.cli import main as options_cli
from omjax.options.menu import Instance
from omjax.options.records import load_npz
from omjax.games.registry import guard_path
from omjax.options.schema import SUCCESS, Reason
from omjax.options.synthesis import certificate_violations, read_guards, synthesize

DATA = os.path.join(os.path.dirname(__file__), "..", "data", "meltingpot")


@pytest.fixture(scope="module")
def env():
    e = CommonsHarvest()
    yield e
    e.close()


def run(env, lib, ctx, state, agent, inst):
    ex = mp.start(lib, ctx, state, agent, inst)
    for _ in range(mp.MAX_OPTION_STEPS + 1):
        actions = np.full(env.num_agents, ctx.noop)
        actions[agent] = mp.act(lib, ctx, ex, state)
        state = env.step(actions)
        ex, outcome, _ = mp.advance(lib, ctx, ex, int(actions[agent]), state)
        if outcome is not None:
            return ex, outcome, state
    raise AssertionError("option never terminated")


def opt(lib, name):
    return lib.schema.option_index(name)


def test_eat_and_patch_options_reach_their_targets(env):
    lib_a, lib_b = harvest.LIBRARY.library("lib_a"), harvest.LIBRARY.library("lib_b")
    state = env.reset(0)
    ctx = mp.make_ctx(env, harvest.regions(env))
    agent = 0  # spawned inside the orchard area (insideSpawnPoints), apples in view
    apples = mp.targets(ctx, state, agent)["apple"]
    assert apples
    for target in (apples[0], apples[-1]):
        if not state.apples[target[1], target[0]]:
            continue
        ex, outcome, state = run(env, lib_a, ctx, state, agent, Instance(opt(lib_a, "eat_apple"), target))
        assert outcome == SUCCESS and tuple(state.pos[agent]) == target and ex.ate >= 1
    # Every patch is a target of its own; walk to a far one, harvest there, then back off.
    far = max(range(ctx.layout.num_patches),
              key=lambda k: np.abs(ctx.layout.patch_anchor[k] - state.pos[agent]).sum())
    anchor = tuple(int(v) for v in ctx.layout.patch_anchor[far])
    ex, outcome, state = run(env, lib_a, ctx, state, agent, Instance(opt(lib_a, "go_to_patch"), anchor))
    assert outcome == SUCCESS and ctx.layout.patch_id[state.pos[agent, 1], state.pos[agent, 0]] == far
    before = int(state.patch_apples[far])
    ex, outcome, state = run(env, lib_b, ctx, state, agent, Instance(opt(lib_b, "harvest_patch"), anchor))
    assert outcome == SUCCESS and ex.ate >= 1 and state.patch_apples[far] <= before
    ex, outcome, state = run(env, lib_b, ctx, state, agent, Instance(opt(lib_b, "step_back"), None))
    assert outcome == SUCCESS and ctx.regions["floor"][state.pos[agent, 1], state.pos[agent, 0]]


def test_a_dead_patch_has_no_path_to_an_apple(env):
    lib = harvest.LIBRARY.library("lib_b")
    state = env.reset(1)
    ctx = mp.make_ctx(env, harvest.regions(env))
    # Hand-picked state: patch 0 eaten bare.
    apples = state.apples & (ctx.layout.patch_id != 0)
    bare = dataclasses.replace(state, apples=apples, patch_apples=np.where(np.arange(6) == 0, 0, state.patch_apples))
    anchor = tuple(int(v) for v in ctx.layout.patch_anchor[0])
    live = mp.live_failures(lib, ctx, bare, 3, Instance(opt(lib, "harvest_patch"), anchor))
    assert live[Reason.NoPath] and not live[Reason.TargetAbsent]
    assert not mp.live_failures(lib, ctx, bare, 3, Instance(opt(lib, "walk_to_patch"), anchor)).any()


@pytest.mark.slow  # the shipped burn-in logs below carry the certificate test by default
@pytest.mark.parametrize("variant", harvest.LIBRARY.VARIANTS)
def test_certificate_on_a_fresh_burnin(variant):
    table = harvest.LIBRARY.burnin(variant, 1, 1, seed=5, progress=False, episode_length=50)
    assert len(table) > 20
    guards = synthesize(table, harvest.LIBRARY.SCHEMA)
    assert certificate_violations(guards, table, harvest.LIBRARY.SCHEMA) == 0
    succ = table.outcome == SUCCESS
    for g in guards:
        if g.channel == "inferred":
            match = table.opt == harvest.LIBRARY.SCHEMA.option_index(g.opt)
            for name, value in g.when.items():
                match &= table.features[:, harvest.LIBRARY.SCHEMA.read_index(name)] == harvest.LIBRARY.SCHEMA.read_feature(name).code(value)
            assert not np.any(match & succ) and match.sum() >= 5


@pytest.mark.parametrize("variant", harvest.LIBRARY.VARIANTS)
def test_shipped_guards_are_reproduced_from_the_shipped_burnin(variant):
    table = load_npz(os.path.join(DATA, f"burnin_harvest_{variant}.npz"))
    guards = synthesize(table, harvest.LIBRARY.SCHEMA)
    shipped = read_guards(guard_path("harvest", variant), harvest.LIBRARY.SCHEMA)
    assert [g.to_dict() for g in guards] == [g.to_dict() for g in shipped]
    assert certificate_violations(shipped, table, harvest.LIBRARY.SCHEMA) == 0
    assert len(shipped) >= 2


def test_menu_cli_shows_a_real_menu():
    out = io.StringIO()
    with redirect_stdout(out):
        assert options_cli(["menu", "--game", "harvest", "--layout", "lib_a", "--seed", "2", "--agent", "1"]) == 0
    text = out.getvalue()
    assert text.count("go to the patch at (") >= 4 and "\nA) " in text
