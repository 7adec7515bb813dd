"""Typed run configs: YAML + `base:` + `key=value` overrides, validated with clear errors."""

import dataclasses
import re
from pathlib import Path

import pytest
import yaml

from omjax.config import Config, ConfigError, ContinuationCredit, dump_config, load_config

CONFIGS = sorted(Path(__file__).resolve().parents[1].joinpath("configs").glob("*.yaml"))


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_every_shipped_config_loads(path):
    cfg = load_config(path)
    assert isinstance(cfg, Config)
    assert cfg.train.clip_eps == 0.2 and cfg.train.epochs == 2 and cfg.train.max_grad_norm == 1.0


def test_paper_hyperparameters_per_game():
    oc = load_config(CONFIGS[0].parent / "overcooked_aa_qwen3-4b.yaml")
    assert (oc.lora.rank, oc.train.lr, oc.train.rollouts, oc.policy.temperature, oc.train.kl_coef) == (16, 2e-5, 6, 0.9, 0.05)
    assert (oc.env.horizon, oc.env.n_agents) == (400, 2)
    for game in ("cleanup", "harvest"):
        mp = load_config(CONFIGS[0].parent / f"{game}_qwen3-4b.yaml")
        assert (mp.lora.rank, mp.train.lr, mp.train.rollouts, mp.policy.temperature) == (32, 5e-5, 4, 0.7)
        assert mp.env.n_agents == 7
    table1 = {p.name for p in CONFIGS if p.name.split("_")[0] in ("cleanup", "harvest", "overcooked")}
    assert len([n for n in table1 if not n.startswith("overcooked_fc") and "smollm2" not in n]) == 12


def test_unknown_key_is_an_error_naming_it(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("train:\n  learning_rate: 0.1\n")
    with pytest.raises(ConfigError, match=r"unknown config key 'train.learning_rate'"):
        load_config(bad)
    with pytest.raises(ConfigError, match=r"unknown config key 'polcy'"):
        load_config(None, ["polcy.temperature=1"])


@pytest.mark.parametrize("override, key", [
    ("train.lr=fast", "train.lr"), ("train.rollouts=1", "train.rollouts"), ("env.horizon=0", "env.horizon"),
    ("policy.decision_mode=beam", "policy.decision_mode"), ("train.shared_lora=maybe", "train.shared_lora"),
    ("env.game=chess", "env.game"), ("policy.temperature=0", "policy.temperature"),
    ("train.clip_eps=1.5", "train.clip_eps"), ("lora.rank=0", "lora.rank"),
    ("lora.targets=q,qkv", "lora.targets: unknown LoRA targets ['qkv']"), ("lora.targets=q,q", "lora.targets"),
    ("policy.action_interface=compound_json", "policy.decision_mode: letter mode scores menu letters"),
    ("train.credit.kind=gae", "train.credit.kind: must be one of cohort, continuation"),
    ("train.credit=continuation train.credit.horizon=0", "train.credit.horizon: must be >= 1"),
    ("train.credit=continuation train.credit.keys=guard", "train.credit.keys: must be one of"),
    ("train.credit.horizon=20", "unknown config key 'train.credit.horizon' (known keys in train.credit: kind)"),
    ("train.credit=continuation env.game=harvest", "train.credit: continuation simulates"),
    ("train.segment=-1", "train.segment"), ("lora.scope=prompt", "lora.scope: must be one of"),
    ("env.menu_format=letter_middle", "env.menu_format: must be one of letter_first, letter_last"),
    ("policy.action_interface=native env.menu_format=letter_last", "env.menu_format: writes the option menu"),
    ("policy.realign=-1", "policy.realign: must be >= 0"),
    ("policy.decision_mode=sample policy.realign=2", "policy.realign: realigns letter mode"),
])
def test_bad_values_name_the_key(override, key):
    with pytest.raises(ConfigError, match=re.escape(key)):
        load_config(None, override.split())


def test_objective_target_needs_every_entrys_advantage_and_a_kl():
    with pytest.raises(ConfigError, match=r"train.objective.kind: must be one of clip, target, got 'mpo'"):
        load_config(None, ["train.objective=mpo"])
    with pytest.raises(ConfigError, match=r"train.objective: .*needs train.credit.kind=continuation"):
        load_config(None, ["train.objective=target"])
    q = ["env.game=overcooked", "policy.action_interface=options", "train.credit=continuation"]
    with pytest.raises(ConfigError, match=r"train.objective: .*train.kl_coef > 0"):
        load_config(None, [*q, "train.objective=target", "train.kl_coef=0"])
    with pytest.raises(ConfigError, match=r"train.objective: target needs an explicit distribution"):
        load_config(None, [*q, "train.objective=target", "policy.decision_mode=sample"])
    cfg = load_config(None, [*q, "train.objective={kind: target}", "train.credit.burnin=4"])
    assert cfg.train.objective.kind == "target" and cfg.train.credit.burnin == 4
    assert cfg.train.credit.horizon == 20 and cfg.train.credit.keys == "state"


def test_plugins_default_to_the_papers_and_round_trip(tmp_path):
    cfg = load_config(None)
    assert (cfg.train.credit.kind, cfg.train.objective.kind) == ("cohort", "clip")
    assert len(dataclasses.fields(cfg.train)) <= 20
    q = load_config(None, ["train.credit=continuation", "train.credit.rollouts=4", "train.objective=target"])
    dump_config(q, tmp_path / "c.yaml")
    assert load_config(tmp_path / "c.yaml") == q


def test_configs_written_before_the_plugins_load_or_say_which_commit_runs_them(tmp_path):
    """Every run directory's config.yaml of that time lists the old extension keys: at their old
    defaults they are dropped, the kept variant is translated, a removed one names its commit."""
    old = {"advantage": "episode", "q_horizon": 20, "q_rollouts": 8, "q_label": "value", "name_critic": "round",
           "critic_burnin": 0, "critic_keys": "name", "all_options": False, "objective": "clip", "replay_rounds": 0,
           "letter_augment": 0, "letter_baseline": False, "letter_prior_coef": 0.0, "segment": 0}
    write = lambda **kw: (tmp_path / "old.yaml").write_text(yaml.safe_dump({"train": {**old, **kw}}))
    write()
    assert load_config(tmp_path / "old.yaml").train == load_config(None).train
    write(advantage="uniform_q", q_rollouts=32, q_label="name", name_critic="pooled", critic_keys="state",
          critic_burnin=16, all_options=True, objective="target", kl_coef=0.5, segment=30)
    t = load_config(tmp_path / "old.yaml", ["env.menu_format=letter_last"]).train
    assert t.credit == ContinuationCredit(horizon=20, rollouts=32, keys="state", burnin=16)
    assert (t.objective.kind, t.segment) == ("target", 30)
    for key, value in [("letter_baseline", True), ("letter_augment", 2), ("replay_rounds", 1),
                       ("letter_prior_coef", 0.5), ("advantage", "reward_to_go")]:
        write(**{key: value})
        with pytest.raises(ConfigError, match=rf"train.{key}.*removed on 2026-12-07.*commit 07b3a66"):
            load_config(tmp_path / "old.yaml")
    write(advantage="uniform_q", q_label="rank")
    with pytest.raises(ConfigError, match=r"train.q_label=rank.*removed"):
        load_config(tmp_path / "old.yaml")


def test_reply_scope_needs_letter_mode():
    with pytest.raises(ConfigError, match=r"lora.scope: .*needs policy.decision_mode=letter"):
        load_config(None, ["lora.scope=reply", "policy.decision_mode=sample"])
    assert load_config(None, ["lora.scope=reply"]).lora.scope == "reply"


def test_overrides_coerce_types_and_base_files_merge(tmp_path):
    (tmp_path / "parent.yaml").write_text("train:\n  lr: 1.0e-3\n  rounds: 7\nenv:\n  horizon: 50\n")
    (tmp_path / "child.yaml").write_text("base: parent.yaml\ntrain:\n  rounds: 9\n")
    cfg = load_config(tmp_path / "child.yaml", ["train.lr=2e-5", "lora.targets=q,v", "train.shared_lora=true", "seed=3"])
    assert cfg.train.rounds == 9 and cfg.env.horizon == 50
    assert cfg.train.lr == 2e-5 and cfg.lora.targets == ("q", "v") and cfg.train.shared_lora and cfg.seed == 3
    assert cfg.n_adapters == 1


def test_missing_file_and_malformed_override_are_clear_errors(tmp_path):
    with pytest.raises(ConfigError, match="config file not found"):
        load_config(tmp_path / "nope.yaml")
    with pytest.raises(ConfigError, match="key=value"):
        load_config(None, ["train.lr"])
    (tmp_path / "list.yaml").write_text("- 1\n- 2\n")
    with pytest.raises(ConfigError, match="mapping"):
        load_config(tmp_path / "list.yaml")


def test_dump_round_trips(tmp_path):
    cfg = load_config(None, ["train.rounds=4", "lora.targets=q,k"])
    dump_config(cfg, tmp_path / "c.yaml")
    assert load_config(tmp_path / "c.yaml") == cfg


def test_one_lora_config_type_serves_the_run_config_and_the_adapters():
    from omjax.config import LoRAConfig
    from omjax.models import lora

    cfg = load_config(None, ["lora.rank=8", "lora.alpha=4", "lora.targets=q,v"])
    assert type(cfg.lora) is LoRAConfig and lora.LoRAConfig is LoRAConfig
    assert cfg.lora.scale == 0.5 and hash(cfg.lora) == hash(LoRAConfig(rank=8, alpha=4.0, targets=["q", "v"]))
    assert load_config(None, ["policy.action_interface=compound_json", "policy.decision_mode=sample"])


def test_segment_fits_the_horizon_and_needs_a_shared_start():
    assert load_config(None, ["env.horizon=150", "train.segment=10"]).train.segment == 10
    with pytest.raises(ConfigError, match=r"train.segment: a segment of 20 steps does not fit env.horizon=10"):
        load_config(None, ["env.horizon=10", "train.segment=20"])
    with pytest.raises(ConfigError, match=r"train.segment: needs the K rollouts of a cohort to start in one state"):
        load_config(None, ["env.game=cleanup", "env.n_agents=7", "env.horizon=150", "train.segment=10"])


def test_the_config_reference_is_generated_and_current(capsys):
    """docs/configs.md is `omjax config --doc`'s output: regenerate it when a field changes."""
    from omjax.config import config_doc, main

    doc = Path(__file__).resolve().parents[1] / "docs" / "configs.md"
    assert doc.read_text() == config_doc(), "docs/configs.md is stale: run `omjax config --doc > docs/configs.md`"
    text = config_doc()
    for f in dataclasses.fields(Config):
        assert f"`{f.name}" in text
    assert "`train.credit.burnin`" in text and "`kind: target`" in text
    assert main(["config", "--doc"]) == 0 and capsys.readouterr().out == text


def test_omjax_config_prints_the_resolved_config_or_one_line(tmp_path, capsys):
    from omjax.config import main

    assert main(["config", str(CONFIGS[0]), "train.rounds=3"]) == 0
    assert yaml.safe_load(capsys.readouterr().out)["train"]["rounds"] == 3
    assert main(["config", str(CONFIGS[0]), "train.credit=gae"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "train.credit.kind: must be one of cohort, continuation" in err
