"""The Overcooked option library: planner, jitted vs plain-Python burn-in, guards, menus, CLI."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from omjax.envs.overcooked import Item, State, initial_state, pot_phase, soup_item
from omjax.envs.overcooked.layout import Terrain
from omjax.options import menu as menu_mod
from omjax.options import overcooked as oc
from omjax.options.diagnostics import diagnose
from omjax.options.overcooked_plan import UNREACHABLE
from omjax.games.registry import guard_path
from omjax.options.schema import EXPLICIT_BASE, SUCCESS, Reason
from omjax.options.synthesis import certificate_violations, covered, read_guards, synthesize

AA = "asymmetric_advantages"
N_EPISODES = 200  # per mode; one compiled batch shape (200 envs x 400 steps) serves every test


@pytest.fixture(scope="module")
def lib():
    return oc.library(AA)


@pytest.fixture(scope="module")
def aa_table():
    return oc.burnin(AA, N_EPISODES, N_EPISODES, seed=0, progress=False, batch=N_EPISODES)


def shipped(layout):
    return read_guards(guard_path("overcooked", layout), oc.SCHEMA)


def test_instances_cover_every_target(lib):
    by_opt = {}
    for inst in lib.instances:
        by_opt.setdefault(oc.SCHEMA.options[inst.opt].name, []).append(inst.target)
    assert by_opt["deliver"] == [(3, 1), (8, 1)]  # both serving stations, never nearest-only
    assert by_opt["place_in_pot"] == by_opt["start_cooking"] == by_opt["plate_soup"] == [(4, 2), (4, 3)]
    assert by_opt["pick_onion"] == [(0, 1), (5, 1)]
    assert by_opt["wait"] == [None]
    grid = lib.layout.grid
    for x, y in by_opt["drop_held"]:
        assert grid[y, x] == Terrain.COUNTER
    assert len(by_opt["drop_held"]) == 12


def test_plan_tables_are_consistent_shortest_plans(lib):
    plans, grid = lib.plans, lib.layout.grid
    # Hand value: agent 0 starts at (6, 2) facing north; the right onion dispenser (5, 1) needs
    # WEST to (5, 2), NORTH (turn, the dispenser is not floor), INTERACT.
    onion = list(map(tuple, plans.targets)).index((5, 1))
    assert plans.dist[onion, 2, 6, 0] == 3
    assert plans.next_action[onion, 2, 6, 0] == 3  # WEST
    assert not plans.reachable[onion, 2, 1]  # the left kitchen cannot reach the right dispenser
    # Bellman consistency: following next_action from any reachable pose lowers dist by one.
    from omjax.envs.overcooked.items import DIR_VEC

    for t in range(len(plans.targets)):
        for y, x in zip(*np.nonzero(grid == Terrain.FLOOR)):
            for f in range(4):
                d, a = plans.dist[t, y, x, f], plans.next_action[t, y, x, f]
                if d >= UNREACHABLE:
                    assert not plans.reachable[t, y, x]
                    continue
                if a == 5:
                    assert d == 1 and tuple(np.array([x, y]) + DIR_VEC[f]) == tuple(plans.targets[t])
                    continue
                nx, ny = np.array([x, y]) + DIR_VEC[a]
                if grid[ny, nx] != Terrain.FLOOR:
                    nx, ny = x, y
                assert plans.dist[t, ny, nx, a] == d - 1


def test_pot_state_code_matches_env(lib):
    rng = np.random.default_rng(0)
    onions = rng.integers(0, 4, (2000, 2))
    tick = np.where(rng.random((2000, 2)) < 0.4, -1, rng.integers(0, 25, (2000, 2)))
    state = initial_state(lib.layout)
    states = jax.vmap(lambda o, t: state.replace(pot_onions=o, pot_tick=t))(jnp.asarray(onions, jnp.int32),
                                                                             jnp.asarray(tick, jnp.int32))
    want = np.asarray(jax.vmap(lambda s: pot_phase(lib.layout, s))(states)) + 1
    got = oc.pot_state_code(np, lib.layout, onions, np.zeros_like(onions), tick)
    np.testing.assert_array_equal(got, want)
    assert len(np.unique(got)) == 5


def test_jitted_burnin_equals_python_loop_on_reference_simulator(lib, aa_table):
    """Same choices -> the same records, JAX env + jitted executor vs overcooked_ai_py + NumPy."""
    for solo, ep0 in ((True, 0), (False, N_EPISODES)):
        choices = oc.burnin_choices(0, ep0, N_EPISODES, oc.HORIZON, lib)[:2]
        py = oc.burnin_python(AA, [(ep0 + e, solo) for e in range(2)], choices)
        jx = aa_table.select((aa_table.ep >= ep0) & (aa_table.ep < ep0 + 2))
        assert len(py) == len(jx) > 100
        order_p = np.lexsort((py.aid, py.step, py.ep))
        order_j = np.lexsort((jx.aid, jx.step, jx.ep))
        for col in ("ep", "step", "aid", "opt", "target", "features", "transient", "outcome", "solo",
                    "changed", "contested"):
            np.testing.assert_array_equal(getattr(py, col)[order_p], getattr(jx, col)[order_j], err_msg=col)


def test_burnin_records_and_certificate(aa_table):
    t = aa_table
    assert len(t) > 50_000
    assert set(np.unique(t.ep)) == set(range(2 * N_EPISODES))
    assert t.solo[t.ep < N_EPISODES].all() and not t.solo[t.ep >= N_EPISODES].any()
    # Solo episodes: only agent (ep mod 2) acts.
    solo = t.solo
    assert (t.aid[solo] == t.ep[solo] % 2).all()
    guards = synthesize(t, oc.SCHEMA)
    assert certificate_violations(guards, t, oc.SCHEMA) == 0
    d = diagnose(t, oc.SCHEMA, options=oc.LIBRARIES["lib_a"])
    assert d.clean, d.render()
    # Delta form: a pick_onion while already holding an onion is never a success (defect 1).
    pick = (t.opt == oc.SCHEMA.option_index("pick_onion")) & (t.features[:, 0] == oc.HELD.code("onion"))
    assert pick.sum() > 20 and not (t.outcome[pick] == SUCCESS).any()


def test_known_guards_on_asymmetric_advantages(aa_table):
    for guards in (shipped(AA), synthesize(aa_table, oc.SCHEMA)):
        found = {(g.opt, g.channel, tuple(sorted(g.when.items()))) for g in guards}
        assert ("start_cooking", "inferred", (("tgt_pot_state", "empty"),)) in found
        assert ("start_cooking", "inferred", (("held", "dish"),)) in found
        assert ("deliver", "explicit", (("__reason__", "NoPath"),)) in found
        assert ("drop_held", "explicit", (("__reason__", "NothingHeld"),)) in found
        # Certified-valid behaviours stay: no guard hides deliver while holding soup, or a drop.
        assert ("deliver", "inferred", (("held", "soup"),)) not in found
        assert not any(g.opt == "drop_held" and g.when.get("held") in ("onion", "dish") for g in guards)


def test_shipped_guards_certified_on_this_burnin(aa_table):
    for layout in ("asymmetric_advantages", "forced_coordination"):
        assert len(shipped(layout)) > 20
    assert certificate_violations(shipped(AA), aa_table, oc.SCHEMA) == 0
    # The hand-selected set (held-item preconditions only) is certified too, and hides less.
    hand = read_guards(guard_path("overcooked", AA, hand=True), oc.SCHEMA)
    assert certificate_violations(hand, aa_table, oc.SCHEMA) == 0
    assert sum(covered(g, aa_table, oc.SCHEMA).sum() for g in hand) < sum(
        covered(g, aa_table, oc.SCHEMA).sum() for g in shipped(AA) if g.channel == "inferred")


def test_diagnostics_expose_nearest_only_instantiation(lib, aa_table):
    """Keep only deliver executions of agent 0 at the station nearest its start (3, 1), the defect-3
    contract of the paper: the diagnostics flag deliver as failing explicitly 100 % of the time."""
    t = aa_table
    deliver = t.opt == oc.SCHEMA.option_index("deliver")
    nearest = deliver & (t.aid == 0) & (t.target[:, 0] == 3) & (t.target[:, 1] == 1)
    defective = t.select(~deliver | nearest)
    d = diagnose(defective, oc.SCHEMA)
    assert d.always_explicit == ["deliver"]
    assert "deliver" in d.never_succeed
    assert diagnose(t, oc.SCHEMA, options=oc.LIBRARIES["lib_a"]).always_explicit == []


def _with(state: State, **kw) -> State:
    return state.replace(**{k: jnp.asarray(v, jnp.int32) for k, v in kw.items()})


def test_deliver_stays_for_the_agent_that_can_reach_a_station(lib):
    guards = shipped(AA)
    soup = int(soup_item(3))
    state = _with(initial_state(lib.layout), held=[soup, soup])
    for agent, reachable, unreachable in ((0, (8, 1), (3, 1)), (1, (3, 1), (8, 1))):
        items = lib.menu(state, agent, guards, np.random.default_rng(0))
        delivers = [it.target for it in items if it.opt == "deliver"]
        assert delivers == [reachable], (agent, [it.label for it in items])
        assert unreachable not in delivers
        labels = {it.label for it in items}
        assert f"deliver soup to serving station @ ({reachable[0]}, {reachable[1]})" in labels
    # With empty hands deliver is hidden by the inferred held=none guard.
    items = lib.menu(initial_state(lib.layout), 0, guards, np.random.default_rng(0))
    assert not any(it.opt == "deliver" for it in items)
    assert {it.opt for it in items} == {"pick_onion", "pick_dish", "wait"}


def test_forced_coordination_keeps_start_cooking_for_the_pot_side():
    """No single agent can fill a pot on forced_coordination, so start_cooking never succeeds in a
    solo episode; synthesis falls back to uncontested team records and the option stays usable."""
    lib = oc.library("forced_coordination")
    guards = shipped("forced_coordination")
    assert not any(g.opt == "start_cooking" and g.when == {"held": "none"} for g in guards)
    state = _with(initial_state(lib.layout), pot_onions=[3, 0])
    pot_side = next(a for a in range(lib.num_agents) if tuple(np.asarray(state.pos[a])) == (3, 1))
    items = lib.menu(state, pot_side, guards, np.random.default_rng(0))
    assert [it.target for it in items if it.opt == "start_cooking"] == [tuple(int(v) for v in lib.layout.pot_pos[0])]
    other = 1 - pot_side
    assert not any(it.opt == "start_cooking" for it in lib.menu(state, other, guards, np.random.default_rng(0)))


def test_start_menu_letters_are_seeded():
    guards = shipped(AA)
    menus = {seed: [(it.letter, it.label) for it in oc.start_menu(AA, seed, 1, guards)] for seed in range(12)}
    assert menus[3] == [(it.letter, it.label) for it in oc.start_menu(AA, 3, 1, guards)]
    assert len({tuple(m) for m in menus.values()}) > 1
    assert all(sorted(label for _, label in m) == sorted(label for _, label in menus[0]) for m in menus.values())


def random_states(lib, rng, n):
    """n random, valid-looking states: distinct floor cells, any facing, items, counters, pots."""
    lay = lib.layout
    floor = lay.floor_pos
    num_a, num_p = lay.num_agents, lay.num_pots
    items = np.array([Item.NONE, Item.ONION, Item.DISH, int(soup_item(3))])
    counters = np.array(lib.targets_by_class["counter"])
    pos = np.stack([floor[rng.choice(len(floor), num_a, replace=False)] for _ in range(n)])
    counter = np.zeros((n, lay.height, lay.width), np.int32)
    counter[:, counters[:, 1], counters[:, 0]] = items[rng.integers(0, 4, (n, len(counters)))]
    counter *= rng.random((n, lay.height, lay.width)) < 0.3
    onions = rng.integers(0, 4, (n, num_p))
    tick = np.where((onions > 0) & (rng.random((n, num_p)) < 0.5), rng.integers(0, 25, (n, num_p)), -1)
    return State(pos=jnp.asarray(pos, jnp.int32), facing=jnp.asarray(rng.integers(0, 4, (n, num_a)), jnp.int32),
                 held=jnp.asarray(items[rng.integers(0, 4, (n, num_a))], jnp.int32), counter=jnp.asarray(counter),
                 pot_onions=jnp.asarray(onions, jnp.int32), pot_tomatoes=jnp.zeros((n, num_p), jnp.int32),
                 pot_tick=jnp.asarray(tick, jnp.int32), time=jnp.zeros(n, jnp.int32))


@pytest.mark.parametrize("layout,n", [("asymmetric_advantages", 2000), ("forced_coordination", 1000)])
def test_jax_menu_mask_equals_python_on_random_states(layout, n):
    lib = oc.library(layout)
    guards = shipped(layout)
    table = menu_mod.GuardTable.from_guards(oc.SCHEMA, guards)
    states = random_states(lib, np.random.default_rng(1), n)
    hidden = np.asarray(jax.jit(lib.hidden_mask_batch)(table, states))  # [E, A, I]
    assert hidden.shape == (n, lib.num_agents, lib.num_instances)
    host = jax.tree.map(np.asarray, states)
    inst = np.arange(lib.num_instances)
    for e in range(n):
        s = jax.tree.map(lambda x: x[e], host)
        v = lib.view(np, s)
        for a in range(lib.num_agents):
            agents = np.full(lib.num_instances, a)
            want = menu_mod.hidden_mask(oc.SCHEMA, guards, lib.instances, lib.read_features(np, v, agents, inst),
                                        lib.live_failures(np, v, agents, inst))
            np.testing.assert_array_equal(hidden[e, a], want)
    assert 0.2 < hidden.mean() < 0.95
    # Letters on the JAX path, read back as MenuItems, show exactly the visible instances.
    ranks = np.asarray(menu_mod.letter_ranks_jax(jax.random.PRNGKey(0), jnp.asarray(~hidden[:50])))
    for e in range(50):
        for a in range(lib.num_agents):
            items = menu_mod.items_from_ranks(oc.SCHEMA, lib.instances, ranks[e, a])
            assert sorted(it.index for it in items) == list(np.nonzero(~hidden[e, a])[0])
            assert [it.letter for it in items] == [menu_mod.letter(k) for k in range(len(items))]


def test_explicit_failures_in_burnin(aa_table):
    """drop_held with empty hands always fails NothingHeld; unreachable targets fail NoPath."""
    t = aa_table
    drop = t.opt == oc.SCHEMA.option_index("drop_held")
    empty = t.features[:, 0] == oc.HELD.code("none")
    assert (drop & empty).sum() > 100
    assert (t.outcome[drop & empty] == EXPLICIT_BASE + Reason.NothingHeld).all()
    # Agent 0 works the right kitchen (x >= 5), agent 1 the left (x <= 3); the left onion
    # dispenser (0, 1) is unreachable for agent 0 and the right one (5, 1) for agent 1.
    onion = t.opt == oc.SCHEMA.option_index("pick_onion")
    for aid, x in ((0, 0), (1, 5)):
        far = onion & (t.aid == aid) & (t.target[:, 0] == x)
        assert far.sum() > 50 and (t.outcome[far] == EXPLICIT_BASE + Reason.NoPath).all()
        near = onion & (t.aid == aid) & (t.target[:, 0] != x)
        assert not (t.outcome[near] == EXPLICIT_BASE + Reason.NoPath).any()
        assert (t.outcome[near] == SUCCESS).any()


def test_option_step_rollout_delivers_a_soup(lib):
    """The training-side API: decide only when `ex.inst < 0`, step every agent's executor."""
    index = {(oc.SCHEMA.options[i.opt].name, i.target): k for k, i in enumerate(lib.instances)}
    pot = (4, 2)
    plan = ([("pick_onion", (0, 1)), ("place_in_pot", pot)] * 3
            + [("start_cooking", pot), ("pick_dish", (3, 4)), ("plate_soup", pot), ("deliver", (3, 1))])
    step = jax.jit(lib.option_step)
    state, ex = initial_state(lib.layout), lib.init_exec()
    active = jnp.array([False, True])  # agent 1 cooks alone in the left kitchen
    outcomes, reward, queue = [], 0.0, list(plan)
    for _ in range(200):
        choice = 0
        if int(ex.inst[1]) < 0:
            if not queue:
                break
            if queue[0][0] == "plate_soup" and int(state.pot_tick[0]) < lib.layout.cook_time:
                choice = index[("wait", None)]
            else:
                choice = index[queue.pop(0)]
        state, ex, rec, sparse, _ = step(state, ex, jnp.array([0, choice]), active)
        reward += float(sparse.sum())
        if bool(rec.valid[1]):
            outcomes.append((oc.SCHEMA.options[lib.inst_opt[int(rec.inst[1])]].name, int(rec.outcome[1])))
    assert [o for o in outcomes if o[0] != "wait"] == [(name, SUCCESS) for name, _ in plan]
    assert reward == lib.layout.delivery_reward == 20.0
    assert int(state.held[1]) == Item.NONE and int(state.pot_tick[0]) == -1


def test_cli_menu_and_guards(tmp_path, monkeypatch, capsys, request, aa_table):
    from omjax.games import cli

    monkeypatch.setenv("OMJAX_CACHE", str(tmp_path / "cache"))
    # The CLI turns on JAX's persistent compilation cache; put the process-wide setting back after.
    saved = {n: getattr(jax.config, n)
             for n in ("jax_compilation_cache_dir", "jax_persistent_cache_min_compile_time_secs")}
    request.addfinalizer(lambda: [jax.config.update(n, v) for n, v in saved.items()])
    assert cli.main(["menu", "--game", "overcooked", "--layout", AA, "--seed", "3", "--agent", "1"]) == 0
    out = capsys.readouterr().out
    assert "pick up onion from dispenser @ (0, 1)" in out and "(5, 1)" not in out
    out_file = tmp_path / "g.jsonl"
    args = ["guards", "--game", "overcooked", "--layout", AA, "--solo", str(N_EPISODES), "--team",
            str(N_EPISODES), "--quiet", "--out", str(out_file)]
    assert cli.main(args) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["records"] == len(aa_table)
    # Same seed, same episodes -> the guard file equals synthesis on the fixture's burn-in.
    got = [json.loads(line) for line in out_file.read_text().splitlines()]
    assert got == [g.to_dict() for g in synthesize(aa_table, oc.SCHEMA)]
    assert cli.main(["menu", "--game", "overcooked", "--layout", "nope"]) == 2
    assert "no layout/variant 'nope'" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.parametrize("layout", ["asymmetric_advantages", "forced_coordination"])
def test_shipped_guard_files_are_reproduced(layout):
    solo, team = oc.DEFAULT_EPISODES
    table = oc.burnin(layout, solo, team, seed=0, progress=False)
    guards = synthesize(table, oc.SCHEMA)
    assert [g.to_dict() for g in guards] == [g.to_dict() for g in shipped(layout)]
    assert certificate_violations(guards, table, oc.SCHEMA) == 0
