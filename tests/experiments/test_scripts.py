"""Tiny-budget smoke runs of the experiment scripts (a random 2-layer model, 2-3 step episodes)."""

import collections
import dataclasses
import json

import jax
import numpy as np
import pytest

def tiny(model_dir):
    return [f"model.name={model_dir}", "env.horizon=2", "train.rounds=1", "train.rollouts=2",
            "train.minibatch_size=4", "lora.rank=2", "lora.targets=q,v", "lora.top_layers=0", "policy.max_new_tokens=6",
            "run.progress=false", "run.save_decisions=false"]


def test_table2_frozen_native_cell_and_render(tiny_model_dir, tmp_path):
    from experiments.paper import table2

    args = ["--cpu", "--root", str(tmp_path), "--cells", "frozen_native", "--episodes", "2", *tiny(tiny_model_dir)]
    assert table2.main(args) == 0
    table = (tmp_path / "table2.md").read_text()
    assert "| Frozen + native (Abl. C) | **0.00 ± 0.00** |" in table
    assert "| Full method (ours) | – |" in table  # not run: a dash, not a made-up number
    report = (tmp_path / "table2_overcooked_aa_report.md").read_text()
    assert "| frozen_native | overcooked / asymmetric_advantages | native | 2 |" in report
    # Resume: a second call finds the finished cell and launches nothing new.
    stamp = (tmp_path / "table2" / "overcooked_aa" / "frozen_native" / "eval" / "eval.jsonl").stat().st_mtime
    assert table2.main(args) == 0
    assert (tmp_path / "table2" / "overcooked_aa" / "frozen_native" / "eval" / "eval.jsonl").stat().st_mtime == stamp


@pytest.mark.slow
def test_table2_all_cells(tiny_model_dir, tmp_path):
    from experiments.paper import table2

    assert table2.main(["--cpu", "--root", str(tmp_path), "--episodes", "1", *tiny(tiny_model_dir)]) == 0
    lines = (tmp_path / "table2.md").read_text().splitlines()
    assert len([line for line in lines if line.startswith("| ") and "–" not in line]) == 1 + 7
    hand = tmp_path / "table2" / "overcooked_aa" / "ours_hand_guards"
    assert json.loads((hand / "library.json").read_text())["guards"].endswith("guards/hand/overcooked_asymmetric_advantages.jsonl")


@pytest.mark.slow
def test_table1_fig1_fig3(tiny_model_dir, tmp_path):
    from experiments.paper import fig1
    from experiments.paper import fig3
    from experiments.paper import table1

    common = ["--cpu", "--root", str(tmp_path), "--episodes", "1", *tiny(tiny_model_dir)]
    assert table1.main(common) == 0
    table = (tmp_path / "table1.md").read_text()
    assert "| smollm2 (frozen, native actions) |" in table and "| smollm2 (ours) |" in table
    frozen = tmp_path / "table1" / "overcooked_aa" / "smollm2" / "frozen" / "eval" / "eval.jsonl"
    assert json.loads(frozen.read_text().splitlines()[0])["interface"] == "native"
    assert fig1.main(common) == 0
    summary = json.loads((tmp_path / "figures" / "fig1.json").read_text())
    assert len(summary["shares"]) == 2
    assert fig3.main(common) == 0
    assert (tmp_path / "figures" / "fig3_overcooked_aa.png").is_file()
    seed0 = tmp_path / "table1" / "overcooked_aa" / "smollm2" / "ours" / "seed_0"
    assert json.loads((seed0.parent / "group.json").read_text())["seeds"] == [0, 1]  # one multi-seed program
    (tmp_path / "figures" / "fig3_overcooked_aa.png").unlink()
    assert fig3.main([*common, "--run", str(seed0)]) == 0  # a finished run, nothing launched
    assert (tmp_path / "figures" / "fig3_overcooked_aa.png").is_file()


@pytest.mark.slow
def test_burnin_control_smoke(tiny_model_dir, tmp_path):
    from experiments.paper import burnin_control

    assert burnin_control.main(["--cpu", "--root", str(tmp_path), "--solo", "2", "--team", "1", "--horizon", "6",
                                *tiny(tiny_model_dir)]) == 0
    result = json.loads((tmp_path / "burnin_control.json").read_text())
    assert result["uniform"]["records"] > 0 and result["llm"]["records"] > 0
    assert result["llm"]["guards"] >= 0 and (tmp_path / "burnin_control.png").is_file()
    assert "| llm |" in (tmp_path / "burnin_control.md").read_text()


@pytest.mark.slow
def test_solo_flip_smoke(tiny_model_dir, tmp_path):
    from experiments.paper import solo_flip

    assert solo_flip.main(["--cpu", "--root", str(tmp_path), "--episodes", "1", *tiny(tiny_model_dir)]) == 0
    summary = json.loads((tmp_path / "solo_flip" / "solo_flip.json").read_text())
    assert set(summary) == {"forced_coordination", "asymmetric_advantages"}
    assert all(set(by) == {"trained", "frozen"} for by in summary.values())
    assert all(s["partner"] == "absent" and len(s["solo_mean"]) == 2 for by in summary.values() for s in by.values())
    table = (tmp_path / "solo_flip" / "solo_flip.md").read_text()
    assert "| forced_coordination | frozen | " in table and "| forced_coordination | trained | " in table
    assert (tmp_path / "solo_flip" / "solo_flip.png").is_file()


def test_learning_trains_evaluates_frozen_and_trained_and_reports(tiny_model_dir, tmp_path, monkeypatch):
    """The overcooked_h20 setting, shortened: trains on 3-step episodes, holds out 5-step ones
    (its `eval_overrides`), reports, and a second call plays nothing new."""
    from experiments.paper import learning

    setting = learning.SETTINGS["overcooked_h20"]
    assert "env.horizon=20" in setting.overrides  # configs/lab/overcooked_h20.yaml
    assert setting.eval_overrides == ("env.horizon=150",)
    short = dataclasses.replace(setting, overrides=(*setting.overrides, "env.horizon=3"),
                                eval_overrides=("env.horizon=5",), eval_batch=2)
    monkeypatch.setitem(learning.SETTINGS, "overcooked_h20", short)
    tiny_args = [a for a in tiny(tiny_model_dir) if not a.startswith("env.horizon=")]
    args = ["--cpu", "--game", "overcooked_h20", "--root", str(tmp_path), "--episodes", "2", *tiny_args,
            "run.save_decisions=true"]
    assert learning.main(args) == 0
    out = tmp_path / "overcooked_h20"
    assert "horizon: 3" in (out / "per_agent" / "config.yaml").read_text()  # trained on 3-step episodes
    summary = json.loads((out / "summary.json").read_text())
    assert set(summary["policies"]) == {"frozen", "per_agent"}
    for name, row in summary["policies"].items():
        episodes = [json.loads(line) for line in (out / name / "eval.jsonl").read_text().splitlines()]
        assert [(e["seed"], e["horizon"]) for e in episodes] == [(10000, 5), (10001, 5)]  # held out at 5
        assert row["deliveries_per_episode"] == [e["units"] for e in episodes]
        assert (out / f"macro_{name}.png").stat().st_size > 0
    assert 0.0 <= summary["tests"]["per_agent"]["p"] <= 1.0 and 0.0 <= summary["tests"]["per_agent"]["shaped_p"] <= 1.0
    for name, row in summary["policies"].items():  # the shaped return: a secondary, with its own CI
        shaped = [json.loads(line)["shaped_return"] for line in (out / name / "eval.jsonl").read_text().splitlines()]
        assert row["shaped_return_mean"] == pytest.approx(np.mean(shaped))
        assert row["shaped_return_ci95"][0] <= row["shaped_return_mean"] <= row["shaped_return_ci95"][1]
    assert summary["eval_overrides"] == ["env.horizon=5"] and summary["seeds"] == [10000, 10001]
    assert summary["overrides"] == [*tiny_args, "run.save_decisions=true"]  # a continued run's rounds show
    with pytest.raises(SystemExit, match="--eval-seed0 must be >= 10000"):  # training-style seeds are not held out
        learning.main([*args, "--eval-seed0", "3"])
    rows = [json.loads(line) for line in (out / "per_agent" / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 1 and len(rows[0]["units"]) == 2
    records = (out / "per_agent" / "decisions" / "round_0000.jsonl").read_text().splitlines()
    decisions = [json.loads(line) for line in records]
    assert len(decisions) == sum(rows[0]["decisions_per_agent"]) and {d["round"] for d in decisions} == {0}
    assert (out / "per_agent" / "learning_curve.png").stat().st_size > 0
    report = (out / "report.md").read_text()
    assert "| per_agent vs frozen |" in report and "Held-out episodes also: env.horizon=5" in report
    assert "Command-line overrides (applied last): " + " ".join(summary["overrides"]) in report
    # A second call plays nothing new: the finished evaluations are read back.
    stamp = (out / "frozen" / "eval.jsonl").stat().st_mtime
    assert learning.main(args) == 0
    assert (out / "frozen" / "eval.jsonl").stat().st_mtime == stamp
    # More episodes play only the batches they add; the ones there are kept as they were.
    first = {name: (out / name / "eval.jsonl").read_text().splitlines() for name in ("frozen", "per_agent")}
    more = [*args, "--episodes", "4"]  # the last --episodes counts
    played_chunks, evaluate = [], learning.evaluate

    players = []

    def evaluate_and_record(trainer, bank, seeds, batch):  # the real evaluation, its seeds noted
        played_chunks.append(list(seeds))
        players.append(trainer)
        return evaluate(trainer, bank, seeds, batch)

    monkeypatch.setattr(learning, "evaluate", evaluate_and_record)
    assert learning.main(more) == 0
    assert played_chunks == [[10002, 10003], [10002, 10003]]  # frozen, then the trained team
    assert players[0] is players[1]  # one held-out config: one trainer, one set of compiled programs
    for name, lines in first.items():
        now = (out / name / "eval.jsonl").read_text().splitlines()
        assert now[:2] == lines and [json.loads(line)["seed"] for line in now] == [10000, 10001, 10002, 10003]
    assert json.loads((out / "summary.json").read_text())["seeds"] == [10000, 10001, 10002, 10003]
    # A batch cut short (an evaluation stopped mid-way) is replayed whole, to the same episodes.
    path = out / "frozen" / "eval.jsonl"
    played = path.read_text().splitlines()
    path.write_text("\n".join(played[:3]) + "\n")
    played_chunks.clear()
    assert learning.main(more) == 0
    assert path.read_text().splitlines() == played and played_chunks == [[10002, 10003]]


def test_held_out_trainers_are_shared_by_configs_that_differ_only_in_out_dir(tiny_model_dir, tmp_path):
    """The frozen base and a variant held out under the same config (`policy.realign` included)
    play through one trainer, so its compiled programs serve both; another config gets its own,
    on the same model."""
    from experiments.paper import learning
    from omjax.config import load_config

    setting = learning.SETTINGS["overcooked_h20"]
    base = [*setting.overrides, *tiny(tiny_model_dir), "policy.realign=3"]
    cfg = lambda *extra: load_config(learning.common.CONFIGS / setting.config, [*base, *extra])
    held = learning.HeldOut()
    try:
        frozen = held.trainer(cfg(f"run.out_dir={tmp_path / 'frozen'}"))
        assert held.trainer(cfg(f"run.out_dir={tmp_path / 'per_agent'}")) is frozen
        assert frozen.decider.policy.realign == 3.0
        other = held.trainer(cfg(f"run.out_dir={tmp_path / 'per_agent'}", "policy.realign=2"))
        assert other is not frozen and other.model is frozen.model and other.decider.policy.realign == 2.0
    finally:
        held.close()


@pytest.mark.slow  # a lab probe (experiments/lab), not the library
def test_eval_temperature_plays_frozen_and_trained_at_t_on_training_style_seeds(tiny_model_dir, tmp_path, capsys,
                                                                                monkeypatch):
    """A 1-round tiny run's adapters and the frozen base, both at T = 0.5 on seeds 3-4 under the
    setting's held-out config: the config played says so, the trained bank is the newest checkpoint's,
    the summary's figures are those of the saved episodes, and held-out seeds are refused."""
    from experiments.lab import eval_temperature
    from experiments.paper import learning

    short = dataclasses.replace(learning.SETTINGS["overcooked_h20"], eval_overrides=("env.horizon=3",), eval_batch=2)
    monkeypatch.setitem(learning.SETTINGS, "overcooked_h20", short)
    monkeypatch.setitem(eval_temperature.SETTINGS, "overcooked_h20", short)
    tiny_args = [a for a in tiny(tiny_model_dir) if not a.startswith("env.horizon=")] + ["env.horizon=2"]
    assert learning.main(["--cpu", "--game", "overcooked_h20", "--root", str(tmp_path / "learn"), "--episodes", "2",
                          *tiny_args]) == 0
    run = tmp_path / "learn" / "overcooked_h20" / "per_agent"
    # A newer checkpoint (round 2) whose adapters differ from the base (a 1-round tiny run's
    # advantages are all 0, so it left B at 0): the probe must play this one.
    from omjax.config import load_config
    from omjax.train.checkpoint import Checkpointer
    from omjax.train.trainer import Trainer

    cfg = load_config(run / "config.yaml")
    ckpt = Checkpointer(run, cfg.run.keep_checkpoints)
    state = ckpt.restore(Trainer(cfg).init_state()).state
    bank = jax.tree_util.tree_map_with_path(lambda p, x: x + 0.01 if p[-1].key == "b" else x, state.bank)
    ckpt.save(state.replace(round=2, bank=bank), {"round": 2})
    ckpt.close()
    played = []
    evaluate = eval_temperature.evaluate

    def evaluate_and_record(trainer, bank, seeds, batch):  # the real evaluation, its bank and config noted
        played.append((list(seeds), bank, trainer.cfg.policy.temperature, trainer.cfg.env.horizon,
                       trainer.cfg.policy.realign))
        return evaluate(trainer, bank, seeds, batch)

    monkeypatch.setattr(eval_temperature, "evaluate", evaluate_and_record)
    out = tmp_path / "t05"
    args = [str(run), "--game", "overcooked_h20", "--seed0", "3", "--episodes", "2", "--temperature", "0.5",
            "--out", str(out), *tiny_args[:-1]]  # trained on 2 steps, played at the setting's held-out 3
    assert eval_temperature.main(args) == 0
    assert [(s, t, h, r) for s, _, t, h, r in played] == [([3, 4], 0.5, 3, 1.0), ([3, 4], 0.5, 3, 1.0)]  # frozen, trained
    frozen_bank, trained_bank = played[0][1], played[1][1]

    def b_factors(bank):  # every adapter's B [n_agents, layers, r, d_out] (`omjax.models.lora`)
        return [np.asarray(x) for p, x in jax.tree_util.tree_leaves_with_path(bank) if p[-1].key == "b"]

    assert not any(np.any(b) for b in b_factors(frozen_bank))  # B = 0: the base itself
    assert all(np.allclose(b, 0.01) for b in b_factors(trained_bank))  # the newest checkpoint's, round 2
    assert "temperature: 0.5" in (out / "config.yaml").read_text()
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["round"] == 2 and summary["seeds"] == [3, 4] and summary["temperature"] == 0.5
    for name in ("frozen", "trained"):
        episodes = [json.loads(line) for line in (out / f"{name}.jsonl").read_text().splitlines()]
        assert [e["seed"] for e in episodes] == [3, 4]
        units = [e["units"] for e in episodes]
        assert summary[name]["units_mean"] == pytest.approx(np.mean(units))
        assert summary[name]["delivering"] == sum(u > 0 for u in units)
        assert all(0.0 <= x <= 1.0 for x in summary[name]["idle_share"])
    assert 0.0 <= summary["p"] <= 1.0
    played.clear()  # a second call reads the saved episodes back
    assert eval_temperature.main(args) == 0 and played == []
    # --realign realigns the trained team's draws only (the base is its own reference).
    realigned = [*args[:10], str(tmp_path / "r2"), "--realign", "2", *args[11:]]
    assert eval_temperature.main(realigned) == 0
    assert [(t, r) for _, _, t, _, r in played] == [(0.5, 1.0), (0.5, 2.0)]
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["realign"] == 2.0
    with pytest.raises(SystemExit, match="reach the held-out range"):
        eval_temperature.main([*args[:4], "9999", *args[5:]])
    with pytest.raises(SystemExit, match="has no checkpoints/"):
        eval_temperature.main([str(tmp_path), *args[1:]])


def test_menu_policies_plays_the_real_menus_and_no_idle_skips_idle_options(capsys):
    from experiments.lab import menu_policies
    from omjax.options.menu import MenuItem

    menu = [MenuItem(chr(65 + j), j, opt, None, opt) for j, opt in enumerate(["wait", "pick_onion", "drop_held"])]
    rng = np.random.default_rng(0)
    assert {menu_policies.pick("no_idle", menu, rng) for _ in range(50)} == {1}
    assert {menu_policies.pick("uniform", menu, rng) for _ in range(50)} == {0, 1, 2}
    assert menu_policies.pick("no_idle", menu[:1], rng) == 0  # nothing else offered: idle it is
    # Partial idle avoidance: only in menus of one kind, or idle at half weight.
    assert {menu_policies.pick("no_idle_when_empty", menu, rng) for _ in range(50)} == {1}  # pick_onion offered
    assert {menu_policies.pick("no_idle_when_onion", menu, rng) for _ in range(50)} == {0, 1, 2}
    half = np.bincount([menu_policies.pick("half_idle", menu, rng) for _ in range(4000)], minlength=3) / 4000
    np.testing.assert_allclose(half, [0.25, 0.5, 0.25], atol=0.03)
    with pytest.raises(ValueError, match="unknown policy"):
        menu_policies.pick("sometimes_idle", menu, rng)
    assert menu_policies.main(["--layouts", "asymmetric_advantages", "--horizon", "12", "--episodes", "2"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert [(r["policy"], r["episodes"]) for r in result["rows"]] == [("uniform", 2), ("no_idle", 2)]
    assert all(r["deliveries_mean"] >= 0 and 0 <= r["delivering"] <= 1 for r in result["rows"])
    # Power of the held-out test: separated samples always reach p < 0.05, equal ones rarely.
    assert menu_policies.power(np.ones(20), np.zeros(20), 16, 50, rng) == (1.0, pytest.approx(0.0, abs=1e-6))
    same, median = menu_policies.power(np.arange(40.0), np.arange(40.0), 16, 400, rng)
    assert same < 0.12 and median > 0.3, (same, median)
    assert menu_policies.main(["--layouts", "asymmetric_advantages", "--horizon", "12", "--episodes", "4",
                               "--power", "3", "--draws", "5"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert "power" not in result["rows"][0] and set(result["rows"][1]["power"]) == {"3"}
    with pytest.raises(SystemExit, match="add it to --policies"):
        menu_policies.main(["--policies", "no_idle", "--power", "16"])


@pytest.mark.slow  # a lab probe (experiments/lab), not the library
def test_menu_policies_q_policies_follow_the_action_values(capsys):
    from experiments.lab import menu_policies
    from omjax.options.menu import MenuItem

    menu = [MenuItem(chr(65 + j), j, opt, None, opt) for j, opt in enumerate(["wait", "pick_onion", "drop_held"])]
    rng = np.random.default_rng(0)
    q = np.array([1.0, 3.0, 3.0, 9.0])  # instance 3 is not on the menu
    assert {menu_policies.pick("q_greedy", menu, rng, q) for _ in range(50)} == {1, 2}  # ties split
    soft = np.bincount([menu_policies.pick("q_soft", menu, rng, q) for _ in range(4000)], minlength=3) / 4000
    want = np.exp(np.array([1.0, 3.0, 3.0]) / 2)
    np.testing.assert_allclose(soft, want / want.sum(), atol=0.03)
    assert menu_policies.main(["--layouts", "asymmetric_advantages", "--horizon", "12", "--episodes", "2",
                               "--policies", "uniform", "q_greedy", "--q-horizon", "4", "--q-rollouts", "2"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert [r["policy"] for r in result["rows"]] == ["uniform", "q_greedy"]
    with pytest.raises(ValueError, match="needs q_values"):
        menu_policies.play(None, "q_greedy", [0])


@pytest.mark.slow  # a lab probe (experiments/lab), not the library
def test_menu_policies_name_soft_prefers_names_fitted_from_the_action_values(capsys):
    from experiments.lab import menu_policies
    from omjax.options.menu import MenuItem

    menu = [MenuItem(chr(65 + j), j, opt, None, opt) for j, opt in enumerate(["wait", "pick_onion", "drop_held"])]
    rng = np.random.default_rng(0)
    soft = np.bincount([menu_policies.pick("name_soft", menu, rng, names={"pick_onion": np.log(2.0)})
                        for _ in range(4000)], minlength=3) / 4000
    np.testing.assert_allclose(soft, [0.25, 0.5, 0.25], atol=0.03)  # unnamed options weigh exp(0)
    with pytest.raises(ValueError, match="needs names"):
        menu_policies.pick("name_soft", menu, rng)
    assert menu_policies.main(["--layouts", "asymmetric_advantages", "--horizon", "12", "--episodes", "2",
                               "--policies", "uniform", "name_soft", "--name-beta", "0", "3",
                               "--fit-episodes", "2", "--q-horizon", "4", "--q-rollouts", "2"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert [r["policy"] for r in result["rows"]] == ["uniform", "name_soft@0", "name_soft@3"]
    weights = result["rows"][1]["name_weights"]
    # Fitted on the real menus: every offered name gets a weight in units of the advantages' sd;
    # waiting averages below its menu's mean, picking up an onion (every soup's first step) above.
    assert {"wait", "pick_onion"} <= set(weights) and all(abs(w) < 10 for w in weights.values())
    assert weights["wait"] < 0 < weights["pick_onion"], weights
    assert 0 < result["rows"][1]["name_r2"] < 1
    # Fitted to each Q_u label train.q_label can credit: one row per label and beta.
    assert menu_policies.main(["--layouts", "asymmetric_advantages", "--horizon", "12", "--episodes", "2",
                               "--policies", "name_soft", "--name-beta", "2", "--labels", "rank", "greedy",
                               "--fit-episodes", "2", "--q-horizon", "4", "--q-rollouts", "2"]) == 0
    rows = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["rows"]
    assert [(r["policy"], r["q_label"]) for r in rows] == [("name_soft[rank]@2", "rank"),
                                                             ("name_soft[greedy]@2", "greedy")]
    assert all(0 < r["name_r2"] < 1 and "wait" in r["name_weights"] for r in rows)
    assert rows[0]["name_weights"] != rows[1]["name_weights"]
    with pytest.raises(SystemExit, match="fit-episodes"):
        menu_policies.main(["--policies", "name_soft", "--fit-episodes", "0"])


def test_menu_policies_critic_keyed_by_state_refines_the_names(capsys):
    from experiments.lab import menu_policies

    # The same uniform fit episodes keyed both ways: one row per critic key and beta.
    assert menu_policies.main(["--layouts", "asymmetric_advantages", "--horizon", "12", "--episodes", "2",
                               "--policies", "name_soft", "--name-beta", "1", "--critic-keys", "name", "state",
                               "--fit-episodes", "2", "--q-horizon", "4", "--q-rollouts", "2"]) == 0
    out = capsys.readouterr().out
    rows = json.loads(out.strip().splitlines()[-1])["rows"]
    assert [(r["policy"], r["critic_keys"]) for r in rows] == [("name_soft[name]@1", "name"),
                                                               ("name_soft[state]@1", "state")]
    by_name, by_state = rows[0]["name_weights"], rows[1]["name_weights"]
    # State keys are `option|held|pot state|counter item`: each names an option the name critic saw.
    parts = [k.split("|") for k in by_state]
    assert all(len(p) == 4 for p in parts), sorted(by_state)
    assert {p[0] for p in parts} == set(by_name)
    assert len(by_state) > len(by_name)  # the held item alone splits `wait` and `drop_held`
    # Finer keys over the same labels: the within-key variance can only fall.
    assert rows[1]["name_r2"] >= rows[0]["name_r2"] - 1e-9 and rows[1]["name_r2"] > 0
    assert "name_soft weights by state" in out


def test_menu_policies_play_segments_from_shared_roots():
    from experiments.lab import menu_policies
    from omjax.config import load_config
    from omjax.games.registry import make_game
    from omjax.options.libraries import resolve_library

    cfg = resolve_library(load_config(None, ["env.layout=asymmetric_advantages", "env.horizon=12"]))
    game = make_game(cfg.env, cfg.policy.action_interface)
    whole = menu_policies.play(game, "uniform", [0, 1])
    same = menu_policies.play(game, "uniform", [0, 1], starts=[0, 0], steps=12)
    np.testing.assert_array_equal(whole[1], same[1])
    seen = []  # (episode, step in its segment, every agent's position then)
    units, rewards = menu_policies.play(game, "uniform", list(range(4)),
                                        lambda k, i, m, j, t: seen.append((k, t, game.positions()[k].tolist())),
                                        starts=[7, 2], steps=3)
    assert rewards.shape == (4, 3) and units.shape == (4,)
    assert {t for _, t, _ in seen} <= {0, 1, 2} and {k for k, _, _ in seen} == {0, 1, 2, 3}
    # Each cohort (episodes 0, 1 from step 7; 2, 3 from step 2) walked together: one state at its root.
    at_root = {k: pos for k, t, pos in seen if t == 0}
    assert set(at_root) == {0, 1, 2, 3} and at_root[0] == at_root[1] and at_root[2] == at_root[3]
    assert at_root[0] != at_root[2]
    with pytest.raises(ValueError, match="do not fit"):
        menu_policies.play(game, "uniform", [0, 1], starts=[10], steps=3)


@pytest.mark.slow  # a lab probe (experiments/lab), not the library
def test_credit_snr_scores_idle_picks_and_reports_per_horizon(capsys):
    from experiments.lab import credit_snr

    flat = np.ones((3, 1))  # [n, T = 1]: no spread in any cohort, no signal
    assert credit_snr.cohort_snr(flat, np.array([[1.0], [-1.0], [0.0]]), 2, 20, np.random.default_rng(0)) == 0.0
    ret, score = np.array([[0.0], [1.0], [2.0], [3.0]]), np.array([[3.0], [2.0], [1.0], [0.0]])
    assert credit_snr.cohort_snr(ret, score, 2, 200, np.random.default_rng(0)) < 0  # idle picks pay less
    # Reward-to-go: an idle pick at step 1 is scored against what came after it only. Here the
    # step-0 reward is noise (independent of the pick), so it dilutes the whole-return credit.
    rng = np.random.default_rng(1)
    idle = rng.integers(0, 2, 64).astype(float)  # [n] picked idle at step 1 or not
    rewards = np.stack([5 * rng.integers(0, 2, 64), 1.0 - idle], axis=1)  # [n, T = 2]
    score = np.stack([np.zeros(64), idle - 0.5], axis=1)
    episode = credit_snr.cohort_snr(rewards, score, 8, 400, np.random.default_rng(0), "episode")
    to_go = credit_snr.cohort_snr(rewards, score, 8, 400, np.random.default_rng(0), "reward_to_go")
    assert to_go < episode < 0 and to_go < -3, (episode, to_go)
    assert credit_snr.main(["--horizons", "4", "6", "--episodes", "8", "--rollouts", "2", "4", "--draws", "50"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert [(r["horizon"], r["K"]) for r in result["rows"]] == [(4, 2), (4, 4), (6, 2), (6, 4)]
    assert all(r["decisions_per_episode"] > 0 and r["snr2_per_1000_decisions"] >= 0 for r in result["rows"])
    # Segments: one cohort of K continuations per root state.
    assert credit_snr.main(["--horizons", "12", "--segment", "4", "--episodes", "3", "--rollouts", "2", "3",
                            "--credit", "reward_to_go"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert [(r["horizon"], r["segment"], r["K"]) for r in result["rows"]] == [(12, 4, 2), (12, 4, 3)]
    assert all(r["decisions_per_episode"] > 0 for r in result["rows"])
    with pytest.raises(SystemExit, match="--segment 20 needs every horizon"):
        credit_snr.main(["--horizons", "12", "--segment", "20"])
    assert all(len(r["snr_per_agent"]) == 2 and min(r["snr2_per_1000_decisions_per_agent"]) >= 0
               for r in result["rows"])  # one private adapter's view per agent
    assert credit_snr.main(["--horizons", "6", "--episodes", "8", "--rollouts", "2", "--draws", "50",
                            "--options", "pick_dish", "--credit", "episode", "reward_to_go"]) == 0  # another direction
    rows = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["rows"]
    assert [(r["options"], r["credit"]) for r in rows] == [(["pick_dish"], "episode"), (["pick_dish"], "reward_to_go")]
    # The same episodes and cohorts scored along the idle options: another signal, same returns.
    assert credit_snr.main(["--horizons", "6", "--episodes", "8", "--rollouts", "2", "--draws", "50",
                            "--credit", "episode", "reward_to_go"]) == 0
    idle = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["rows"]
    assert [r["return_mean"] for r in idle] == [r["return_mean"] for r in rows]
    assert all((r["snr"], r["snr_per_agent"]) != (q["snr"], q["snr_per_agent"]) for r, q in zip(idle, rows))
    with pytest.raises(SystemExit, match="unknown Overcooked option"):
        credit_snr.main(["--horizons", "6", "--options", "pick_dishes"])


def test_idle_picks_compares_each_rounds_idle_share_with_uniform_picks(tmp_path, capsys):
    from experiments.lab import idle_picks

    menu = [{"letter": "A", "option": "wait"}, {"letter": "B", "option": "pick_onion"}]
    records = [{"round": 0, "agent": 0, "option": "wait", "letter": "A", "menu": menu},
               {"round": 0, "agent": 0, "option": "wait", "letter": "B", "menu": menu},
               {"round": 0, "agent": 1, "option": "pick_onion", "letter": "B", "menu": menu[::-1]}]
    (tmp_path / "decisions").mkdir()
    (tmp_path / "decisions" / "round_0000.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    assert idle_picks.main([str(tmp_path)]) == 0
    rows = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["rows"]
    got = [(r["agent"], r["decisions"], r["idle"], r["idle_if_uniform"]) for r in rows]
    assert got == [(0, 2, 1.0, 0.5), (1, 1, 0.0, 0.5)]
    assert rows[0]["top_letter_share"] == 0.5
    with pytest.raises(SystemExit, match="no decision records"):
        idle_picks.main([str(tmp_path / "missing")])
    with pytest.raises(SystemExit, match="has no q_name_weights"):
        idle_picks.main([str(tmp_path), "--parts", "2"])
    # --parts: the picks' centred key weight under the last critic, by parts of the run.
    keyed = [dict(r, keys=[m["option"] for m in r["menu"]]) for r in records]
    later = [dict(r, round=1, letter="B", option="pick_onion") for r in keyed[:2]]  # round 1: both pick_onion
    for r, rows_ in ((0, keyed), (1, later)):
        (tmp_path / "decisions" / f"round_{r:04d}.jsonl").write_text("".join(json.dumps(x) + "\n" for x in rows_))
    metrics = [{"round": r, "kl": 0.1 * (r + 1), "loss": 1.0, "team_return_mean": 2.0 * r, "deliveries_mean": 0.0,
                "q_name_weights": {"wait": -1.0, "pick_onion": 1.0}} for r in (0, 1)]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(m) + "\n" for m in metrics))
    assert idle_picks.main([str(tmp_path), "--parts", "2"]) == 0
    parts = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["parts"]
    assert [p["rounds"] for p in parts] == [[0, 0], [1, 1]]
    # Round 0, by the letters picked: agent 0 wait (-1 centred) then pick_onion (+1); agent 1 pick_onion (+1).
    assert parts[0]["key_weight"] == [0.0, 1.0] and parts[1]["key_weight"] == [1.0]
    assert parts[0]["beta1"][1] == pytest.approx(np.tanh(1.0))  # e^{+1} vs e^{-1}: mean weight tanh(beta)
    assert parts[1]["kl"] == pytest.approx(0.2) and parts[1]["shaped"] == 2.0


@pytest.mark.slow  # a lab probe (experiments/lab), not the library
def test_segment_baseline_replays_each_rounds_root_and_pairs_the_returns(tiny_model_dir, tmp_path, capsys):
    """The uniform baseline starts where the run's cohorts started: the trainer's walk and
    `menu_policies.play`'s, given the run's start and `walk_rng(seed, round)`, reach one state."""
    from experiments.lab import segment_baseline
    from experiments.lab.menu_policies import play
    from omjax.config import load_config
    from omjax.train.rollout import collect_group, segment_start, walk_rng
    from omjax.train.trainer import Trainer

    run = tmp_path / "run"
    cfg = load_config(None, [f"model.name={tiny_model_dir}", "env.layout=asymmetric_advantages", "env.horizon=30",
                             "env.reward_shaping=1.0", "train.segment=5", "train.rounds=2", "train.rollouts=2",
                             "train.minibatch_size=4", "lora.rank=2", "lora.targets=q,v", "run.progress=false",
                             f"run.out_dir={run}"])
    trainer = Trainer(cfg)
    start = segment_start(0, 1, 30, 5)
    roots = []
    collect_group(trainer.game, trainer.decider, trainer.model.params, trainer.init_state().bank, 2,
                  jax.random.PRNGKey(0)[None], [0], 1, 2, starts=[start], steps=1,
                  on_step=lambda g: roots.append(g.positions().tolist()))
    game, replay = trainer.game, []  # positions before each env step of the replay
    step = game.step
    game.step = lambda choices: (replay.append(game.positions().tolist()), step(choices))[1]
    play(game, "uniform", [5, 6], starts=[start], steps=1, walks=[walk_rng(0, 1)])
    del game.step
    assert start > 0 and replay[start] == roots[start - 1]
    assert replay[0] != replay[start]  # the walk moved
    trainer.run()
    assert segment_baseline.main([str(run), "--rollouts", "3"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert [r["round"] for r in result["rows"]] == [0, 1] and result["rows"][1]["start"] == start
    assert result["paired"]["rounds"] == 2
    assert segment_baseline.paired([{"trained": 2.0, "uniform": 1.0}, {"trained": 3.0, "uniform": 1.0}])["rounds_above"] == 2
    with pytest.raises(SystemExit, match="no metrics.jsonl"):
        segment_baseline.main([str(tmp_path)])


def test_value_probe_fits_what_the_features_carry():
    """On decisions whose advantages are a linear function of the entries' features, the trunk
    probe recovers them (validation R^2 ~ 1, greedy = oracle); the names probe recovers only the
    names' share; uniform picks would score 0."""
    from experiments.lab import value_probe

    rng = np.random.default_rng(0)
    w = rng.normal(size=6)
    names = ["a", "b", "c"]
    bonus = {"a": 1.0, "b": 0.0, "c": -1.0}

    def decision(episode):
        m = int(rng.integers(2, 5))
        feats = rng.normal(size=(m, 6))
        opts = [names[int(j)] for j in rng.integers(0, 3, m)]
        adv = feats @ w + np.array([bonus[o] for o in opts])
        return dict(episode=episode, agent=0, feats=feats, names=opts, inst=[names.index(o) for o in opts],
                    adv=adv - adv.mean())

    train = [decision(0) for _ in range(400)]
    val = [decision(1) for _ in range(100)]
    sd = float(np.std(np.concatenate([r["adv"] for r in train])))
    full = value_probe.evaluate(train, val, "trunk+names", names, 3, sd)
    assert full["r2_val"] > 0.99 and full["greedy"] == pytest.approx(full["oracle"])
    assert full["soft_b1"] < full["soft_b4"] < full["greedy"]  # sharper picks of the right ranking score more
    by_name = value_probe.evaluate(train, val, "names", names, 3, sd)
    assert 0.0 < by_name["r2_val"] < 0.5 and 0.0 < by_name["greedy"] < full["greedy"]
    x, y, gid = value_probe.design(val, "names", names, 3)
    assert np.allclose([y[gid == g].sum() for g in range(len(val))], 0.0)  # centred within each decision


@pytest.mark.slow  # a lab probe (experiments/lab), not the library
def test_value_probe_collects_real_decisions_and_refits_from_its_cache(tiny_model_dir, tmp_path):
    """The shipped decision path on 6-step AA episodes with a tiny model: every decision's menu
    lines are found in its prompt, Q_u labels them, every probe is fitted and reported, and a
    second call refits from the kept decisions."""
    from experiments.lab import value_probe

    args = ["--train-episodes", "2", "--val-episodes", "2", "--batch", "4", "--q-rollouts", "2",
            "--out", str(tmp_path), f"model.name={tiny_model_dir}", "env.horizon=6", "lora.rank=2",
            "lora.targets=q,v", "lora.top_layers=1", "train.q_horizon=3", "train.segment=0"]
    assert value_probe.main(args) == 0
    summary = json.loads((tmp_path / "probe.json").read_text())
    assert [r["kind"] for r in summary["results"]] == list(value_probe.KINDS)
    assert summary["decisions_train"] > 0 and summary["decisions_val"] > 0 and summary["trunk_layer"] == 1
    for r in summary["results"]:
        assert np.isfinite(r["r2_val"]) and r["greedy"] <= r["oracle"] + 1e-9
    cache = next(tmp_path.glob("decisions_*.pkl"))
    stamp = cache.stat().st_mtime
    assert value_probe.main(args) == 0 and cache.stat().st_mtime == stamp
    assert "| trunk+names |" in (tmp_path / "probe.md").read_text()


def test_value_probe_state_readout_finds_state_dependent_values():
    """Advantages that flip sign with a symbolic state bit: option names alone explain nothing,
    a per-name readout of the state explains all of it."""
    from experiments.lab import value_probe

    rng = np.random.default_rng(1)
    names = ["a", "b", "c"]
    sign = {"a": 1.0, "b": 0.0, "c": -1.0}

    def decision(episode):
        opts = [names[int(j)] for j in rng.permutation(3)]
        state = rng.integers(0, 2, size=3)
        adv = np.array([sign[o] * (1.0 if state[0] else -1.0) for o in opts])
        return dict(episode=episode, agent=0, feats=rng.normal(size=(3, 4)), names=opts,
                    inst=[names.index(o) for o in opts], adv=adv, state=state)

    train, val = [decision(0) for _ in range(300)], [decision(1) for _ in range(100)]
    sd = float(np.std(np.concatenate([r["adv"] for r in train])))
    by_state = value_probe.evaluate(train, val, "state*names", names, 3, sd)
    assert by_state["r2_val"] > 0.99 and by_state["greedy"] == pytest.approx(by_state["oracle"])
    assert value_probe.evaluate(train, val, "names", names, 3, sd)["r2_val"] < 0.05


@pytest.mark.slow  # a lab probe (experiments/lab), not the library
def test_name_fit_scores_the_adapters_expected_name_weight(tiny_model_dir, tmp_path, capsys):
    """`name_fit.py`, shortened: fixed name weights from a run's metrics,
    decisions collected by the base, one update fitted on them, both sets scored."""
    from experiments.lab import name_fit

    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text("".join(json.dumps({"round": r, "q_name_weights": w}) + "\n" for r, w in enumerate(
        [{"wait": -1.0, "pick_onion": 1.0}, {"wait": -0.5, "pick_onion": 2.0, "drop_held": 0.0}])))
    assert name_fit.mean_weights(run) == {"drop_held": 0.0, "pick_onion": 1.5, "wait": -0.75}
    args = ["--weights-from", str(run), "--train-rounds", "1", "--heldout-rounds", "1", "--fits", "1",
            "--out", str(tmp_path / "fit.jsonl"), *tiny(tiny_model_dir), "env.horizon=12", "train.segment=4",
            "lora.top_layers=1", "train.q_rollouts=1", "train.q_horizon=1", "train.update_rows=0",
            "train.update_tokens=0", "--cache", str(tmp_path / "decisions.pkl")]
    assert name_fit.main(args) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert (tmp_path / "decisions.pkl").exists()
    assert result["fitted_decisions"] > 0 and result["heldout_decisions"] > 0
    soft1, soft2 = result["reference"]["name_soft@1"], result["reference"]["name_soft@2"]
    assert all(0 <= a <= b for a, b in zip(soft1, soft2))  # a stronger preference for the weights scores higher
    # The target's optimum over the base's own menu distribution: sharper at beta 4, and at the
    # base's score (row 0, the fresh adapters) when beta -> 0.
    target2, target4 = result["reference"]["target@2"], result["reference"]["target@4"]
    assert all(a <= b + 1e-9 for a, b in zip(target2, target4))
    w = [np.array([1.0, -1.0]), np.array([0.5, 0.0, -0.5])]  # centred weights of two menus
    base = np.array([[0.5, 0.5, 0.0], [0.8, 0.1, 0.1]])  # [n, M] the base's menu distribution
    assert name_fit.target_weight([base], [w], 0.0) == pytest.approx([(0.0 + 0.8 * 0.5 - 0.1 * 0.5) / 2])
    uniform = np.array([[0.5, 0.5, 0.0], [1 / 3, 1 / 3, 1 / 3]])  # a uniform base: name_soft's optimum
    soft = [np.exp(2 * x) / np.exp(2 * x).sum() @ x for x in w]
    assert name_fit.target_weight([uniform], [w], 2.0) == pytest.approx([np.mean(soft)])
    # A base stuck on the worst entry keeps most of its habit: the optimum sits below name_soft's.
    stuck = np.array([[0.05, 0.95, 0.0], [0.05, 0.05, 0.9]])
    assert name_fit.target_weight([stuck], [w], 2.0)[0] < np.mean(soft)
    rows = result["rows"]
    assert [r["fit"] for r in rows] == [0, 1] and rows[1]["kl"] > 0
    assert all(np.isfinite(r["heldout"]).all() and np.isfinite(r["fitted"]).all() for r in rows)
    assert rows[1]["fitted"] != rows[0]["fitted"]  # the update moved the adapters it fitted
    assert [json.loads(x)["fit"] for x in (tmp_path / "fit.jsonl").read_text().splitlines()] == [0, 1]
    # A second run reads the same decisions from the cache: the base scores them alike.
    assert name_fit.main(args) == 0
    again = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert again["fitted_decisions"] == result["fitted_decisions"]
    np.testing.assert_allclose(again["rows"][0]["fitted"], rows[0]["fitted"], rtol=1e-5)
    with pytest.raises(SystemExit, match="was collected for"):  # other rounds than the cache's
        name_fit.main([*args[:3], "2", *args[4:]])
    # --adapters-from: a run's latest checkpoint is scored (here one whose adapters are not the base).
    from experiments.paper import common
    from omjax.config import load_config
    from omjax.train.checkpoint import Checkpointer
    from omjax.train.trainer import Trainer

    setting = name_fit.SETTINGS["overcooked_q_last_burn"]
    cfg = load_config(common.CONFIGS / setting.config, [*setting.overrides, "run.progress=false", *args[10:-2]])
    state = Trainer(cfg, model=None).init_state()
    state = state.replace(bank=jax.tree.map(lambda x: x + 0.5 * jax.random.normal(jax.random.key(3), x.shape),
                                            state.bank))
    Checkpointer(tmp_path / "trained").save(state, {"round": 1})
    assert name_fit.main([*args, "--adapters-from", str(tmp_path / "trained"), "--fits", "0"]) == 0
    scored = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert [r["fit"] for r in scored["rows"]] == [0] and scored["rows"][0]["fitted"] != rows[0]["fitted"]
    with pytest.raises(SystemExit, match="holds no checkpoint"):
        name_fit.main([*args, "--adapters-from", str(tmp_path / "empty"), "--fits", "0"])
    with pytest.raises(SystemExit, match="--fits 0 only with"):
        name_fit.main([*args, "--fits", "0"])
    (run / "metrics.jsonl").write_text(json.dumps({"round": 0}) + "\n")  # not a train.q_label=name run
    with pytest.raises(SystemExit, match="no q_name_weights"):
        name_fit.main(args)


def test_option_outcomes_pairs_every_decision_with_its_executions_end(tiny_model_dir, tmp_path, monkeypatch):
    """Each picked option is counted once, with the outcome of the execution it started (at most
    one per agent and episode still running at the horizon); held-out seeds are refused."""
    from experiments.lab import option_outcomes
    from omjax.config import load_config
    from omjax.train.trainer import Trainer

    cfg = load_config(None, [f"model.name={tiny_model_dir}", "env.layout=asymmetric_advantages", "env.horizon=30",
                             "env.reward_shaping=1.0", "lora.rank=2", "lora.targets=q,v", "run.progress=false",
                             f"run.out_dir={tmp_path}"])
    trainer = Trainer(cfg)
    batches = []
    collect = option_outcomes.collect
    monkeypatch.setattr(option_outcomes, "collect", lambda *a, **k: batches.append(collect(*a, **k)) or batches[-1])
    counts, scored = option_outcomes.outcomes(trainer, trainer.init_state().bank, [0, 1])
    assert scored <= counts.get("deliver", collections.Counter())["success"]  # a scoring soup was handed in
    picked = collections.Counter(d.menu[d.action].opt for d in batches[0].decisions)
    assert {o: sum(c.values()) for o, c in counts.items()} == dict(picked)
    assert sum(c["running"] for c in counts.values()) <= 2 * cfg.env.n_agents
    assert set().union(*counts.values()) <= {"success", "effect_fail", "executor_fail", "running"}
    assert "| option | picked | success |" in option_outcomes.table("frozen", counts)
    with pytest.raises(SystemExit, match="held-out"):
        option_outcomes.main(["--adapters-from", str(tmp_path), "--seeds", "9999", "2"])


def test_pooled_test_reads_the_filed_ranges_and_tests_them_exactly(capsys):
    """The post-hoc stratified test over the six held-out ranges of one set of adapters, from the
    summaries filed under experiments/results/overcooked_learning/, and the test on hand cases."""
    from experiments.lab import pooled_test

    # One stratum of 2 a side, both trained episodes delivering: P(k = 0, 1, 2) = 1/6, 4/6, 1/6.
    assert pooled_test.stratified_exact([(2, 0, 2)]) == pytest.approx(1 / 3)
    assert pooled_test.stratified_exact([(1, 0, 1)]) == pytest.approx(1.0)
    assert pooled_test.main([]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert [(r["seeds"][0], r["trained"], r["frozen"], r["episodes"]) for r in result["ranges"]] == [
        (10000, 5, 1, 20), (10020, 4, 3, 20), (10040, 7, 3, 20), (10060, 3, 3, 16), (10076, 4, 1, 14), (10090, 5, 0, 12)]
    assert (result["trained"], result["frozen"], result["episodes"]) == (28, 11, 102)
    assert result["p"] == pytest.approx(0.0043, abs=5e-5)


def test_table2_native_cleanup_cell_is_followed_by_its_fire_clean_audit(tiny_model_dir, tmp_path):
    from experiments.paper import table2

    args = ["--cpu", "--root", str(tmp_path), "--games", "clean_up", "--cells", "frozen_native", "--episodes", "1",
            *tiny(tiny_model_dir)]
    assert table2.main(args) == 0
    cell = tmp_path / "table2" / "clean_up" / "frozen_native"
    audit = json.loads((cell / "audit_fireclean.json").read_text())
    decisions = (cell / "eval" / "decisions" / "seed10000.jsonl").read_text().splitlines()
    assert audit["decisions"] == len(decisions) == 7 * 2  # 7 agents x 2 steps, one motor action each
    assert 0 <= sum(audit["fire_clean"]) <= audit["decisions"] and (cell / "audit_fireclean.png").stat().st_size > 0


@pytest.mark.slow
def test_fig3_draws_cleanup_and_harvest(tiny_model_dir, tmp_path):
    from experiments.paper import fig3

    assert fig3.PAPER_GAMES == ("clean_up", "commons_harvest")  # the paper scale's default maps
    args = ["--cpu", "--root", str(tmp_path), "--games", *fig3.PAPER_GAMES, "--episodes", "1", *tiny(tiny_model_dir)]
    assert fig3.main(args) == 0
    for game in fig3.PAPER_GAMES:
        summary = json.loads((tmp_path / "figures" / f"fig3_{game}.json").read_text())
        assert len(summary["visits"]) == 7 and all(v == 2 for v in summary["visits"])  # 7 agents, 2 steps each
        assert (tmp_path / "figures" / f"fig3_{game}.png").stat().st_size > 0
