"""`train.advantage=uniform_q`: action values under uniform-random continuation, on the real
Overcooked game and option executor (`omjax.train.continuation`), and their use by the trainer
(a tiny random Llama decides)."""

import jax
import numpy as np
import pytest

from omjax.config import Q_LABELS, ConfigError, load_config
from omjax.games.registry import make_game
from omjax.options.libraries import resolve_library
from omjax.options.overcooked import HELD_OF_ITEM
from omjax.train import continuation
from omjax.train.checkpoint import Checkpointer
from omjax.train.continuation import (ENTRY_LABELS, UniformQ, baseline, entry_keys, entry_labels, key_order, name_stats,
                                     name_weights, uniform_menus, weights_from_stats)
from omjax.train.rollout import burnin_seed, episode_seed, update_inputs
from omjax.train.trainer import Trainer
from tests.eval.tiny_model import write_tiny_llama

CFG = ["env.game=overcooked", "env.layout=asymmetric_advantages", "env.n_agents=2", "env.horizon=24",
       "env.reward_shaping=1.0", "train.rollouts=2", "train.minibatch_size=4", "lora.rank=2", "lora.alpha=4",
       "lora.targets=q,v", "train.lr=0.03", "run.progress=false", "run.plot_every=100",
       "train.advantage=uniform_q", "train.q_horizon=6", "train.q_rollouts=2"]


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


def test_entry_labels_value_rank_and_greedy():
    q = np.array([5.0, 1.0, 3.0, 3.0])
    np.testing.assert_allclose(entry_labels(q, "value"), [2.0, -2.0, 0.0, 0.0])
    np.testing.assert_allclose(entry_labels(q), entry_labels(q, "value"))
    # ranks 3, 0, 1.5, 1.5 (the tie shares its mean rank), centred and over n - 1 = 3
    np.testing.assert_allclose(entry_labels(q, "rank"), [0.5, -0.5, 0.0, 0.0])
    np.testing.assert_allclose(entry_labels(q, "greedy"), [0.75, -0.25, -0.25, -0.25])
    np.testing.assert_allclose(entry_labels(np.array([2.0, 2.0, 0.0]), "greedy"), [0.5 - 1 / 3, 0.5 - 1 / 3, -1 / 3])
    # rank ignores the scale: a delivery that multiplies one value moves no label
    np.testing.assert_allclose(entry_labels(np.array([100.0, 1.0, 0.0]), "rank"), [0.5, 0.0, -0.5])
    for label in ("value", "rank", "greedy"):
        assert abs(entry_labels(np.array([0.3, -1.0, 2.0, 7.0, 7.0]), label).sum()) < 1e-12
        np.testing.assert_allclose(entry_labels(np.array([4.0]), label), [0.0])
    with pytest.raises(ValueError, match="unknown Q_u label 'best'"):
        entry_labels(q, "best")
    with pytest.raises(ValueError, match="pools decisions"):
        entry_labels(q, "name")
    assert set(Q_LABELS) == {*ENTRY_LABELS, "name"}


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
    with pytest.raises(ConfigError, match="train.advantage"):
        load_config(None, ["train.advantage=value"])
    with pytest.raises(ConfigError, match="train.q_horizon"):
        load_config(None, ["train.q_horizon=0"])
    with pytest.raises(ConfigError, match="train.q_rollouts"):
        load_config(None, ["train.q_rollouts=0"])
    with pytest.raises(ConfigError, match="train.q_label"):
        load_config(None, ["train.q_label=argmax"])
    with pytest.raises(ConfigError, match="uniform_q simulates continuations"):
        load_config(None, ["env.game=cleanup", "env.n_agents=7", "train.advantage=uniform_q"])
    with pytest.raises(ConfigError, match="train.name_critic"):
        load_config(None, ["train.name_critic=running"])
    with pytest.raises(ConfigError, match="pooled pools the critic over option names: it needs"):
        load_config(None, ["train.advantage=uniform_q", "train.name_critic=pooled"])  # q_label value
    with pytest.raises(ConfigError, match="train.critic_keys"):
        load_config(None, ["train.critic_keys=pot"])
    with pytest.raises(ConfigError, match="keys the critic over names: it needs train.q_label=name"):
        load_config(None, ["train.advantage=uniform_q", "train.critic_keys=state"])


@pytest.fixture(scope="module")
def overcooked_model(tmp_path_factory):
    from omjax.models import load

    return load(write_tiny_llama(tmp_path_factory.mktemp("tiny_llama_q")))


def test_the_trainer_credits_each_decision_with_its_own_value(overcooked_model, tmp_path):
    trainer = Trainer(load_config(None, [*CFG, f"run.out_dir={tmp_path}"]), model=overcooked_model)
    state, row, batch = trainer.round(trainer.init_state())
    ds = batch.decisions
    assert ds and row["updated"] and row["kl"] > 0
    for d in ds:
        snap_state, snap_exec = d.snapshot
        assert int(snap_state.time) == d.step  # the state the decision was asked in
        assert int(snap_exec.inst[d.agent]) < 0  # ...with the agent free to choose
    adv = np.array([d.advantage for d in ds])
    assert np.isfinite(adv).all() and abs(adv.std() - 1.0) < 1e-6  # over the round's scale
    assert row["q_adv_sd"] > 0 and np.isfinite(row["q_adv_mean"])
    # The raw advantages are the estimator's: recomputed with other continuation streams, they
    # correlate with the ones the trainer used.
    q, shown = trainer.q_values.estimate([d.snapshot for d in ds], [d.agent for d in ds], jax.random.PRNGKey(123))
    for j, d in enumerate(ds):  # the estimator scores exactly the menu's entries
        assert sorted(np.flatnonzero(shown[j])) == sorted(it.index for it in d.menu)
    again = np.array([q[j, d.menu[d.action].index] for j, d in enumerate(ds)]) - baseline(q, shown)
    assert np.corrcoef(again, adv)[0, 1] > 0.5
    # The update batch carries each decision's own advantage.
    dbatch = update_inputs(ds, trainer.policy, trainer.decider, None, 2, lambda d: d.agent, 4)
    for agent in (0, 1):
        mine = [d.advantage for d in ds if d.agent == agent]
        np.testing.assert_allclose(dbatch.advantage[agent, :len(mine)], mine, rtol=1e-6)
    with pytest.raises(ValueError, match="some have none"):
        update_inputs([ds[0], ds[1].__class__(**{**ds[1].__dict__, "advantage": None})], trainer.policy,
                      trainer.decider, None, 2, lambda d: d.agent, 4)


@pytest.mark.parametrize("label,objective", [("value", "clip"), ("rank", "clip"), ("greedy", "clip"),
                                             ("name", "clip"), ("name", "target")])
def test_all_options_credits_every_menu_entry(overcooked_model, tmp_path, label, objective):
    cfg = load_config(None, [*CFG, "train.all_options=true", f"train.q_label={label}", f"train.objective={objective}",
                             f"run.out_dir={tmp_path}"])
    trainer = Trainer(cfg, model=overcooked_model)
    _, row, batch = trainer.round(trainer.init_state())
    ds = batch.decisions
    assert ds and row["updated"] and row["kl"] > 0
    assert (row["clip_frac"] == 0) == (objective == "target")  # the target has no ratio to clip
    for d in ds:
        assert d.option_advantages.shape == (len(d.menu),)
        np.testing.assert_allclose(d.option_advantages[d.action], d.advantage, rtol=1e-5, atol=1e-6)
        assert abs(float(d.option_advantages.mean())) < 1e-5  # relative to the menu's mean value
    if label == "name":
        assert 0 < row["q_name_r2"] <= 1 and row["q_label_sd"] > 0 and "wait" in row["q_name_weights"]
    for d in ds:
        raw, n = d.option_advantages * row["q_adv_sd"], len(d.menu)  # the labels before the round's scale
        if label == "rank" and n > 1:  # ranks 0 .. n-1, ties at half ranks
            ranks = raw * (n - 1) + (n - 1) / 2
            np.testing.assert_allclose(2 * ranks, np.round(2 * ranks), atol=1e-4)
            assert ranks.min() > -1e-4 and ranks.max() < n - 1 + 1e-4
        if label == "name" and n > 1:  # the round's weight of each entry's name, less the menu's mean
            w = np.array([row["q_name_weights"][it.opt] for it in d.menu])
            np.testing.assert_allclose(d.option_advantages, w - w.mean(), rtol=1e-5, atol=1e-6)
        if label == "greedy" and n > 1:  # 1 / m at the m best entries, 0 elsewhere
            share = raw + 1 / n
            best = share > 1e-4
            np.testing.assert_allclose(share[best], 1 / best.sum(), atol=1e-4)
            np.testing.assert_allclose(share[~best], 0, atol=1e-4)
    dbatch = update_inputs(ds, trainer.policy, trainer.decider, None, 2, lambda d: d.agent, 4)
    first = [d for d in ds if d.agent == 0][0]
    np.testing.assert_allclose(dbatch.option_advantage[0, 0, :len(first.menu)], first.option_advantages, rtol=1e-6)
    assert (dbatch.option_advantage[0, 0, len(first.menu):] == 0).all()
    with pytest.raises(ConfigError, match="train.all_options"):
        load_config(None, [*CFG, "train.all_options=true", "train.letter_baseline=true"])


@pytest.mark.parametrize("by", ["name", "state"])
def test_pooled_name_critic_averages_every_round_so_far(overcooked_model, tmp_path, by):
    """`train.name_critic=pooled`: round r's weights are the critic over names (or over names and
    read-set features, `train.critic_keys=state`) fitted to the value labels of rounds 0..r
    together, the statistics ride in the checkpointed state, and round 0's weights are the
    per-round critic's."""
    cfg = load_config(None, [*CFG, "train.all_options=true", "train.q_label=name", "train.name_critic=pooled",
                             f"train.critic_keys={by}", f"run.out_dir={tmp_path}"])
    trainer = Trainer(cfg, model=overcooked_model)
    order = key_order(trainer.q_values.lib.schema.option_names, by)
    state0 = trainer.init_state()
    assert state0.critic.shape == (len(order), 3) and not np.asarray(state0.critic).any()

    def round_stats(state, batch):  # the round's value labels, recomputed from its snapshots and key
        ds = batch.decisions
        key = jax.random.fold_in(jax.random.split(state.key, 3)[1], 1)
        q, _ = trainer.q_values.estimate([d.snapshot for d in ds], [d.agent for d in ds], key)
        labels = [entry_labels(q[j, [it.index for it in d.menu]], "value") for j, d in enumerate(ds)]
        names = [entry_keys(trainer.q_values.lib, d.snapshot[0], d.agent, d.menu, by) for d in ds]
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


def test_critic_burnin_seeds_the_pooled_critic_before_round_0(overcooked_model, tmp_path, monkeypatch):
    """`train.critic_burnin=2`: round 0 starts the pooled critic from the value labels of 2
    uniform-pick episodes on seeds of their own (`uniform_menus`, `burnin_seed`), so round 0's
    weights pool them with its own labels; later rounds add theirs, and a second round 0 from the
    same state reuses the burn-in."""
    cfg = load_config(None, [*CFG, "train.all_options=true", "train.q_label=name", "train.name_critic=pooled",
                             "train.critic_keys=state", "train.critic_burnin=2", f"run.out_dir={tmp_path}"])
    trainer = Trainer(cfg, model=overcooked_model)
    order = key_order(trainer.q_values.lib.schema.option_names, "state")
    state0 = trainer.init_state()
    state1, row1, batch1 = trainer.round(state0)
    seeds = [burnin_seed(cfg.seed, j) for j in range(2)]
    training = {episode_seed(cfg.seed, 0, k) for k in range(2)}
    assert len(set(seeds)) == 2 and not set(seeds) & {*range(10000, 10020), *training}
    menus = uniform_menus(trainer.game, trainer.q_values, seeds, "state")
    assert menus and all(len(ks) == len(q) > 1 for ks, q in menus)
    burn = name_stats([ks for ks, _ in menus], [entry_labels(q) for _, q in menus], order)
    ds = batch1.decisions
    q, _ = trainer.q_values.estimate([d.snapshot for d in ds], [d.agent for d in ds],
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
    with pytest.raises(ConfigError, match="train.critic_burnin"):
        load_config(None, [*CFG, "train.q_label=name", "train.critic_burnin=2"])  # name_critic round
    with pytest.raises(ConfigError, match="train.critic_burnin"):
        load_config(None, ["train.critic_burnin=-1"])


def test_all_options_with_relettered_copies_under_reply_scope(overcooked_model, tmp_path):
    """`train.all_options` + `train.letter_augment` + `lora.scope=reply`: every copy's row carries
    the advantages of its own listing of the entries, and the round updates."""
    cfg = load_config(None, [*CFG, "train.all_options=true", "train.letter_augment=1", "lora.scope=reply",
                             "lora.top_layers=1", f"run.out_dir={tmp_path}"])
    trainer = Trainer(cfg, model=overcooked_model)
    _, row, batch = trainer.round(trainer.init_state())
    ds = batch.decisions
    assert ds and row["updated"] and row["kl"] > 0 and all(len(d.variants) == 1 for d in ds)
    dbatch = update_inputs(ds, trainer.policy, trainer.decider, None, 2, lambda d: d.agent, 4)
    first = [d for d in ds if d.agent == 0][0]
    copy = first.variants[0]
    by_label = dict(zip((it.label for it in first.menu), first.option_advantages))
    np.testing.assert_allclose(dbatch.option_advantage[0, 1, :len(copy.menu)], [by_label[it.label] for it in copy.menu],
                               rtol=1e-6)
    with pytest.raises(ConfigError, match="train.all_options"):
        load_config(None, [*CFG, "train.all_options=true", "train.advantage=episode"])


def test_replay_refits_past_rounds_under_the_current_critic_and_resumes(overcooked_model, tmp_path):
    """`train.replay_rounds=1`: round r's update also fits round r-1's decisions, each entry
    re-credited with the pooled critic's weights of round r; their files let a resumed run refit
    the same decisions (the same adapters as the run that never stopped), and a missing one is
    named."""
    keys = [*CFG, "train.all_options=true", "train.q_label=name", "train.name_critic=pooled",
            "train.objective=target", "train.replay_rounds=1", "train.rounds=3", "lora.scope=reply",
            "lora.top_layers=1", "train.reuse_trunk=true"]  # the Overcooked setting's: kept trunks replayed
    whole = Trainer(load_config(None, [*keys, f"run.out_dir={tmp_path / 'whole'}"]), model=overcooked_model)
    rows = whole.run()
    cfg = whole.cfg
    counts = [sum(row["decisions_per_agent"]) for row in rows]
    assert [row["replayed_decisions"] for row in rows] == [0, counts[0], counts[1]]
    for r in (1, 2):  # each agent's own decisions and its replayed ones, every epoch
        if rows[r]["updated"]:
            mine = np.add(rows[r]["decisions_per_agent"], rows[r - 1]["decisions_per_agent"])
            assert rows[r]["grad_steps"] == (cfg.train.epochs * -(-mine // cfg.train.minibatch_size)).tolist()
    # Only the newest round stays in memory; on disk, the rounds a resume may restart from need.
    assert sorted(whole.replay[0]) == [2]
    assert sorted(p.name for p in (tmp_path / "whole" / "replay").iterdir()) == ["round_0001.pkl", "round_0002.pkl"]
    # Round 1's decisions as round 2 refits them: credited with round 2's pooled weights.
    kept = whole.replay[0][2]
    refit = whole._replayed(0, 3, rows[2]["q_name_weights"])
    assert len(refit) == len(kept) and all(d.snapshot is None and d.trunk is not None for d in refit)
    for d in refit:
        names = [it.opt for it in d.menu]
        if len(names) > 1:
            w = np.array([rows[2]["q_name_weights"][n] for n in names])
            np.testing.assert_allclose(d.option_advantages, w - w.mean(), rtol=1e-5, atol=1e-6)
            assert d.advantage == pytest.approx(float(d.option_advantages[d.action]))

    def bank(run_dir):
        ckpt = Checkpointer(run_dir)
        try:
            return ckpt.restore(whole.init_state()).state.bank
        finally:
            ckpt.close()

    part = tmp_path / "part"
    Trainer(load_config(None, [*keys, "train.rounds=2", f"run.out_dir={part}"]), model=overcooked_model).run()
    resumed = Trainer(load_config(None, [*keys, f"run.out_dir={part}"]), model=overcooked_model).run(resume=True)
    assert resumed[-1]["replayed_decisions"] == counts[1]
    assert resumed[-1]["team_returns"] == rows[2]["team_returns"]
    for x, y in zip(jax.tree.leaves(bank(part)), jax.tree.leaves(bank(tmp_path / "whole"))):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=1e-5, atol=1e-7)
    (part / "replay" / "round_0002.pkl").unlink()
    more = Trainer(load_config(None, [*keys, "train.rounds=4", f"run.out_dir={part}"]), model=overcooked_model)
    with pytest.raises(FileNotFoundError, match="round_0002.pkl"):
        more.run(resume=True)
    with pytest.raises(ConfigError, match="train.replay_rounds"):
        load_config(None, [*CFG, "train.all_options=true", "train.q_label=name", "train.replay_rounds=1"])
