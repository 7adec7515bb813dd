"""`train.credit: {kind: continuation}`: action values under uniform-random continuation, on the real
Overcooked game and option executor (`omjax.train.continuation`), and their use by the trainer
(a tiny random Llama decides)."""

import jax
import numpy as np
import pytest

from omjax.config import ConfigError, load_config
from omjax.games.registry import make_game
from omjax.options.libraries import resolve_library
from omjax.options.overcooked import HELD_OF_ITEM
from omjax.train import continuation
from omjax.train.checkpoint import Checkpointer
from omjax.train.continuation import (UniformQ, entry_keys, entry_labels, key_order, name_stats, name_weights,
                                     uniform_menus, weights_from_stats)
from omjax.train.rollout import burnin_seed, episode_seed, update_inputs
from omjax.train.trainer import Trainer
from tests.eval.tiny_model import write_tiny_llama

CFG = ["env.game=overcooked", "env.layout=asymmetric_advantages", "env.n_agents=2", "env.horizon=24",
       "env.reward_shaping=1.0", "train.rollouts=2", "train.minibatch_size=4", "lora.rank=2", "lora.alpha=4",
       "lora.targets=q,v", "train.lr=0.03", "run.progress=false", "run.plot_every=100",
       "train.credit=continuation", "train.credit.horizon=6", "train.credit.rollouts=2", "train.credit.burnin=0"]


def game_of(horizon: int):
    cfg = resolve_library(load_config(None, ["env.game=overcooked", "env.layout=asymmetric_advantages",
                                             f"env.horizon={horizon}", "env.reward_shaping=1.0"]))
    return make_game(cfg.env, cfg.policy.action_interface)


def decision_states(game, episodes: int, steps: int, seed: int = 0):
    """(snapshot, agent, menu) of every decision of `episodes` uniform-pick episodes over `steps` steps."""
    rng = np.random.default_rng(seed)
    game.reset(list(range(episodes)))
    out = []
    for _ in range(steps):
        choices = np.zeros((episodes, game.n_agents), np.int32)
        for k, i in np.argwhere(game.needs_decision()):
            menu = game.menu(int(k), int(i), rng)
            out.append((game.snapshot(int(k)), int(i), menu))
            choices[k, i] = menu[rng.integers(len(menu))].index
        game.step(choices)
    return out


def python_returns(game, snapshot, agent: int, first: int, horizon: int, n: int, seed: int) -> np.ndarray:
    """[n] team returns of `horizon` steps from `snapshot` when `agent` starts instance `first` and
    every later pick is uniform over the Python menu: the definition, on the game's own stepping."""
    rng = np.random.default_rng(seed)
    game.restore([snapshot] * n)
    total = np.zeros(n)
    for t in range(horizon):
        live = game.states.time < game.horizon
        choices = np.zeros((n, game.n_agents), np.int32)
        for k, i in np.argwhere(game.needs_decision()):
            menu = game.menu(int(k), int(i), rng)
            choices[k, i] = first if (t == 0 and i == agent) else menu[rng.integers(len(menu))].index
        total += np.where(np.asarray(live), game.step(choices), 0.0)
    return total


def test_scored_options_are_the_menu_the_policy_sees():
    game = game_of(40)
    snaps = decision_states(game, episodes=3, steps=40)
    q_est = UniformQ(game, horizon=4, rollouts=2)
    saved = [s for s, _, _ in snaps]
    q, shown = q_est.estimate(saved, [a for _, a, _ in snaps], jax.random.PRNGKey(0))
    assert len(snaps) > 30 and q.shape == shown.shape == (len(snaps), game.lib.num_instances)
    for (_, _, menu), row, vals in zip(snaps, shown, q):
        assert set(np.flatnonzero(row)) == {it.index for it in menu}
        assert (vals[~row] == 0).all()


@pytest.mark.slow  # a research extension's end-to-end check (README: Test)
def test_values_match_the_games_own_stepping():
    """Q_u of the best and worst option of a decision, from the jitted estimator and from the
    Python menu and `Game.step` (independent draws), agree within sampling error, and differ."""
    game, horizon, n = game_of(60), 8, 256
    snaps = decision_states(game, episodes=4, steps=40, seed=1)
    q_est = UniformQ(game, horizon=horizon, rollouts=n)
    checked = 0
    for snap, agent, menu in snaps[::-1]:  # later states first: more is in reach
        q, shown = q_est.estimate([snap], [agent], jax.random.PRNGKey(checked))
        vals = {it.index: q[0, it.index] for it in menu}
        best, worst = max(vals, key=vals.get), min(vals, key=vals.get)
        if vals[best] - vals[worst] < 3.0:
            continue
        ref = game_of(60)
        for inst in (best, worst):
            mc = python_returns(ref, snap, agent, inst, horizon, n, seed=inst)
            tol = 4 * np.sqrt(2) * max(mc.std(), 0.5) / np.sqrt(n)
            assert abs(mc.mean() - vals[inst]) < tol, (inst, mc.mean(), vals[inst], tol)
        checked += 1
        break
    assert checked == 1, "no decision state with options worth telling apart"


def test_values_stop_at_the_episode_end():
    game = game_of(12)
    snaps = decision_states(game, episodes=2, steps=12)
    late = [(s, a) for s, a, _ in snaps if int(s[0].time) == 11]
    assert late
    q_est = UniformQ(game, horizon=10, rollouts=4)
    short = UniformQ(game, horizon=1, rollouts=4)
    args = ([s for s, _ in late], [a for _, a in late])
    np.testing.assert_allclose(q_est.estimate(*args, jax.random.PRNGKey(0))[0],
                               short.estimate(*args, jax.random.PRNGKey(0))[0])


def test_keyed_values_do_not_depend_on_the_batch():
    """`estimate_keyed` with `row_keys` is `estimate` (across chunks too), and a decision's value
    is the same whichever decisions share its call: the property the burn-in relies on."""
    game = game_of(30)
    snaps = decision_states(game, episodes=2, steps=30, seed=3)
    q_est = UniformQ(game, horizon=4, rollouts=3)
    saved, agents = [s for s, _, _ in snaps], [a for _, a, _ in snaps]
    key, n = jax.random.PRNGKey(7), len(snaps)
    assert n > 20
    q, shown = q_est.estimate(saved, agents, key, chunk=8)
    keys = continuation.row_keys(key, n, chunk=8)
    # The keys `estimate` has drawn since departure 13: chunk lo's rows take the first of
    # split(fold_in(key, lo), width), width the chunk's rows to a power of two, at least 8.
    width = lambda m: max(8, 1 << (m - 1).bit_length())
    spec = [jax.random.split(jax.random.fold_in(key, lo), width(min(8, n - lo)))[:min(8, n - lo)]
            for lo in range(0, n, 8)]
    np.testing.assert_array_equal(np.asarray(keys), np.concatenate([np.asarray(k) for k in spec]))
    q2, shown2 = q_est.estimate_keyed(saved, agents, keys, chunk=8)
    np.testing.assert_array_equal(q, q2)
    np.testing.assert_array_equal(shown, shown2)
    assert np.abs(q).sum() > 0
    alone, _ = q_est.estimate_keyed(saved[5:8], agents[5:8], keys[5:8])  # 3 rows padded to 8, not 8 of a chunk
    together, _ = q_est.estimate_keyed(saved, agents, keys, chunk=n)  # all in one call
    np.testing.assert_array_equal(alone, q[5:8])
    np.testing.assert_array_equal(together, q)


def test_burnin_labels_are_the_per_step_estimates():
    """`uniform_menus` scores all its decisions in one batch after the episodes; each label equals
    what `estimate` gives at the decision's own step (all that step's decisions, key
    `fold_in(PRNGKey(seeds[0]), t)`), which is how the burn-in was defined."""
    game = game_of(20)
    q_est = UniformQ(game, horizon=3, rollouts=2)
    seeds = [11, 12]
    got = uniform_menus(game, q_est, seeds, "state")
    ref_game = game_of(20)
    ref_game.reset(seeds)
    n = ref_game.n_agents
    letters = [[np.random.default_rng([s, i]) for i in range(n)] for s in seeds]
    picks = [np.random.default_rng([s, 1 << 20]) for s in seeds]
    choices, want = np.zeros((len(seeds), n), np.int32), []
    for t in range(ref_game.horizon):
        pending = [(int(k), int(i)) for k, i in np.argwhere(ref_game.needs_decision())]
        if pending:
            q, _ = q_est.estimate([ref_game.snapshot(k) for k, _ in pending], [i for _, i in pending],
                                  jax.random.fold_in(jax.random.PRNGKey(seeds[0]), t))
        for j, (k, i) in enumerate(pending):
            menu = ref_game.menu(k, i, letters[k][i])
            if len(menu) > 1:
                want.append((entry_keys(ref_game.lib, ref_game.snapshot(k)[0], i, menu, "state"),
                             q[j][[it.index for it in menu]]))
            choices[k, i] = menu[int(picks[k].integers(len(menu)))].index
        ref_game.step(choices)
    assert len(got) == len(want) > 10
    for (ks, q), (ks_ref, q_ref) in zip(got, want):
        assert ks == ks_ref
        np.testing.assert_array_equal(q, q_ref)


def test_entry_labels_are_each_entrys_value_less_the_menus_mean():
    q = np.array([3.0, -1.0, 1.0, 1.0])
    np.testing.assert_allclose(entry_labels(q), [2.0, -2.0, 0.0, 0.0])
    np.testing.assert_array_equal(entry_labels(np.array([5.0])), [0.0])  # one entry: nothing to choose


def test_name_weights_average_each_name_over_decisions():
    names = [["wait", "deliver"], ["wait", "pick_onion", "deliver"], ["wait"]]
    labels = [np.array([-1.0, 1.0]), np.array([0.0, -3.0, 3.0]), np.array([0.0])]  # the last is left out
    weights, r2, sd = name_weights(names, labels)
    every = np.array([-1.0, 1.0, 0.0, -3.0, 3.0])
    assert sd == pytest.approx(every.std())
    assert weights == pytest.approx({"wait": -0.5 / sd, "deliver": 2.0 / sd, "pick_onion": -3.0 / sd})
    within = np.array([-0.5, 0.5, 1.0, -1.0, 0.0])  # each label less its name's mean
    assert r2 == pytest.approx(1 - within.var() / every.var())
    with pytest.raises(ValueError, match="offered two options"):
        name_weights([["wait"]], [np.zeros(1)])


def test_state_keys_add_the_entrys_read_set_features_to_its_name():
    """`train.critic_keys=state`: each entry's key is its option name with the guards' read-set
    features at the decision (held item, target pot's state, target counter's item), one of
    `key_order`'s; "name" keys are the names."""
    game = game_of(150)
    held_names = ("none", "onion", "dish", "soup")  # HELD's values
    order = set(key_order(game.lib.schema.option_names, "state"))
    seen = set()
    for snap, agent, menu in decision_states(game, 4, 60):
        assert entry_keys(game.lib, snap[0], agent, menu, "name") == [it.opt for it in menu]
        keys = entry_keys(game.lib, snap[0], agent, menu, "state")
        held = held_names[HELD_OF_ITEM[int(np.asarray(snap[0].held)[agent])]]
        for it, key in zip(menu, keys):
            name, k_held, pot, item = key.split("|")
            assert key in order and name == it.opt and k_held == held
            assert (pot != "na") == (it.opt in ("place_in_pot", "start_cooking", "plate_soup"))
            assert (item != "na") == (it.opt in ("drop_held", "pick_from_counter"))
            seen.add((name, pot))
    assert {("start_cooking", "filling"), ("place_in_pot", "empty")} <= seen
    with pytest.raises(ValueError, match="unknown critic key"):
        entry_keys(game.lib, snap[0], agent, menu, "pot")
    game.close()


def test_config_checks():
    with pytest.raises(ConfigError, match="continuation simulates continuations"):
        load_config(None, ["env.game=cleanup", "env.n_agents=7", "train.credit=continuation"])
    with pytest.raises(ConfigError, match="train.credit.burnin: must be >= 0"):
        load_config(None, ["train.credit=continuation", "train.credit.burnin=-1"])


@pytest.fixture(scope="module")
def overcooked_model(tmp_path_factory):
    from omjax.models import load

    return load(write_tiny_llama(tmp_path_factory.mktemp("tiny_llama_q")))


@pytest.mark.slow  # a research extension's end-to-end check (README: Test)
def test_the_trainer_credits_each_decision_and_every_menu_entry(overcooked_model, tmp_path):
    """Each decision carries its picked entry's credit and every entry's (the critic's weight of its
    key less the menu's mean, on the menu the policy saw); the update batch carries both."""
    trainer = Trainer(load_config(None, [*CFG, f"run.out_dir={tmp_path}"]), model=overcooked_model)
    state, row, batch = trainer.round(trainer.init_state())
    ds = batch.decisions
    assert ds and row["updated"] and row["kl"] > 0
    for d in ds:
        snap_state, snap_exec = d.snapshot
        assert int(snap_state.time) == d.step  # the state the decision was asked in
        assert int(snap_exec.inst[d.agent]) < 0  # ...with the agent free to choose
    adv = np.array([d.advantage for d in ds])
    assert np.isfinite(adv).all() and adv.std() > 0
    assert row["q_adv_sd"] > 0 and np.isfinite(row["q_adv_mean"])
    assert 0 < row["q_name_r2"] <= 1 and row["q_label_sd"] > 0
    q_values = trainer.credit.q_values
    _, shown = q_values.estimate([d.snapshot for d in ds], [d.agent for d in ds], jax.random.PRNGKey(123))
    for j, d in enumerate(ds):  # the estimator scores exactly the menu's entries
        assert sorted(np.flatnonzero(shown[j])) == sorted(it.index for it in d.menu)
        assert d.option_advantages.shape == (len(d.menu),)
        np.testing.assert_allclose(d.option_advantages[d.action], d.advantage, rtol=1e-5, atol=1e-6)
        if len(d.menu) > 1:
            w = np.array([row["q_name_weights"][key] for key in d.keys])
            np.testing.assert_allclose(d.option_advantages, w - w.mean(), rtol=1e-5, atol=1e-6)
    dbatch = update_inputs(ds, trainer.policy, trainer.decider, None, 2, lambda d: d.agent, 4)
    for agent in (0, 1):
        mine = [d for d in ds if d.agent == agent]
        np.testing.assert_allclose(dbatch.advantage[agent, :len(mine)], [d.advantage for d in mine], rtol=1e-6)
        np.testing.assert_allclose(dbatch.option_advantage[agent, 0, :len(mine[0].menu)], mine[0].option_advantages,
                                   rtol=1e-6)
        assert (dbatch.option_advantage[agent, 0, len(mine[0].menu):] == 0).all()
    with pytest.raises(ValueError, match="some have none"):
        update_inputs([ds[0], ds[1].__class__(**{**ds[1].__dict__, "advantage": None})], trainer.policy,
                      trainer.decider, None, 2, lambda d: d.agent, 4)


@pytest.mark.slow  # a research extension's end-to-end check (README: Test)
def test_the_target_objective_trains_on_every_entry(overcooked_model, tmp_path):
    cfg = load_config(None, [*CFG, "train.objective=target", "train.kl_coef=0.5", f"run.out_dir={tmp_path}"])
    trainer = Trainer(cfg, model=overcooked_model)
    state0 = trainer.init_state()
    state1, row, _ = trainer.round(state0)
    assert row["updated"] and row["kl"] > 0 and row["clip_frac"] == 0  # the target has no ratio to clip
    assert any(not np.array_equal(a, b) for a, b in zip(jax.tree.leaves(state1.bank), jax.tree.leaves(state0.bank)))


@pytest.mark.slow  # a research extension's end-to-end check (README: Test)
@pytest.mark.parametrize("by", ["name", "state"])
def test_pooled_name_critic_averages_every_round_so_far(overcooked_model, tmp_path, by):
    """The continuation credit's critic: round r's weights are the critic over names (or over names
    and read-set features, `train.credit.keys=state`) fitted to the value labels of rounds 0..r
    together, the statistics ride in the checkpointed state, and round 0's weights are the
    per-round critic's."""
    cfg = load_config(None, [*CFG, f"train.credit.keys={by}", f"run.out_dir={tmp_path}"])
    trainer = Trainer(cfg, model=overcooked_model)
    q_values = trainer.credit.q_values
    order = key_order(q_values.lib.schema.option_names, by)
    state0 = trainer.init_state()
    assert state0.critic.shape == (len(order), 3) and not np.asarray(state0.critic).any()

    def round_stats(state, batch):  # the round's value labels, recomputed from its snapshots and key
        ds = batch.decisions
        key = jax.random.fold_in(jax.random.split(state.key, 3)[1], 1)
        q, _ = q_values.estimate([d.snapshot for d in ds], [d.agent for d in ds], key)
        labels = [entry_labels(q[j, [it.index for it in d.menu]]) for j, d in enumerate(ds)]
        names = [entry_keys(q_values.lib, d.snapshot[0], d.agent, d.menu, by) for d in ds]
        assert [d.keys for d in ds] == names
        return names, labels, name_stats(names, labels, order)

    state1, row1, batch1 = trainer.round(state0)
    names1, labels1, stats1 = round_stats(state0, batch1)
    assert row1["q_name_weights"] == pytest.approx(name_weights(names1, labels1)[0], rel=1e-5)
    np.testing.assert_allclose(np.asarray(state1.critic), stats1, rtol=1e-6)
    assert stats1[:, 0].sum() == sum(len(ns) for ns in names1 if len(ns) > 1)
    state2, row2, batch2 = trainer.round(state1)
    _, _, stats2 = round_stats(state1, batch2)
    pooled, r2, sd = weights_from_stats(stats1 + stats2, order)
    assert row2["q_name_weights"] == pytest.approx(pooled, rel=1e-5)
    assert row2["q_name_r2"] == pytest.approx(r2, rel=1e-4) and row2["q_label_sd"] == pytest.approx(sd, rel=1e-5)
    for d in batch2.decisions:  # each entry credited with its name's pooled weight, less the menu's mean
        if len(d.menu) > 1:
            w = np.array([pooled[key] for key in d.keys])
            np.testing.assert_allclose(d.option_advantages, w - w.mean(), rtol=1e-4, atol=1e-6)
    ckpt = Checkpointer(tmp_path / "ckpt")
    ckpt.save(state2, {"round": 2})
    restored = ckpt.restore(trainer.init_state()).state
    ckpt.close()
    np.testing.assert_array_equal(np.asarray(restored.critic), np.asarray(state2.critic))


@pytest.mark.slow  # a research extension's end-to-end check (README: Test)
def test_critic_burnin_seeds_the_pooled_critic_before_round_0(overcooked_model, tmp_path, monkeypatch):
    """`train.credit.burnin=2`: round 0 starts the pooled critic from the value labels of 2
    uniform-pick episodes on seeds of their own (`uniform_menus`, `burnin_seed`), so round 0's
    weights pool them with its own labels; later rounds add theirs, and a second round 0 from the
    same state reuses the burn-in."""
    cfg = load_config(None, [*CFG, "train.credit.keys=state", "train.credit.burnin=2", f"run.out_dir={tmp_path}"])
    trainer = Trainer(cfg, model=overcooked_model)
    q_values = trainer.credit.q_values
    order = key_order(q_values.lib.schema.option_names, "state")
    state0 = trainer.init_state()
    state1, row1, batch1 = trainer.round(state0)
    seeds = [burnin_seed(cfg.seed, j) for j in range(2)]
    training = {episode_seed(cfg.seed, 0, k) for k in range(2)}
    assert len(set(seeds)) == 2 and not set(seeds) & {*range(10000, 10020), *training}
    menus = uniform_menus(trainer.game, q_values, seeds, "state")
    assert menus and all(len(ks) == len(q) > 1 for ks, q in menus)
    burn = name_stats([ks for ks, _ in menus], [entry_labels(q) for _, q in menus], order)
    ds = batch1.decisions
    q, _ = q_values.estimate([d.snapshot for d in ds], [d.agent for d in ds],
                                     jax.random.fold_in(jax.random.split(state0.key, 3)[1], 1))
    own = name_stats([d.keys for d in ds], [entry_labels(q[j, [it.index for it in d.menu]]) for j, d in enumerate(ds)],
                     order)
    np.testing.assert_allclose(np.asarray(state1.critic), burn + own, rtol=1e-5)
    weights, r2, _ = weights_from_stats(burn, order)
    assert row1["critic_burnin"] == {"episodes": 2, "decisions": len(menus), "keys": len(weights),
                                     "r2": pytest.approx(r2)}
    assert row1["q_name_weights"] == pytest.approx(weights_from_stats(burn + own, order)[0], rel=1e-4)
    # Every key the burn-in saw has a weight in round 0 (a pooled critic of the round alone has fewer).
    assert set(weights) <= set(row1["q_name_weights"]) and len(weights) > 0
    played = []  # a spy on the real burn-in: a second round 0 must not play it again
    monkeypatch.setattr(continuation, "uniform_menus", lambda *a, **k: played.append(1) or uniform_menus(*a, **k))
    again, row_again, _ = trainer.round(state0)
    assert not played
    np.testing.assert_array_equal(np.asarray(again.critic), np.asarray(state1.critic))
    _, row2, _ = trainer.round(state1)
    assert "critic_burnin" not in row2 and row_again["critic_burnin"] == row1["critic_burnin"]
