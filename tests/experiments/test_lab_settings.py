"""The run settings under configs/lab: every file says why it was tried and either loads as the
config it trains or is marked removed, naming the commit where it last runs."""

from pathlib import Path

import pytest
import yaml

from omjax.config import ConfigError, load_config

LAB = Path(__file__).resolve().parents[2] / "configs" / "lab"
FILES = sorted(LAB.glob("*.yaml"))


def test_there_are_settings():
    assert len(FILES) >= 20


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_every_setting_says_why_and_loads_or_is_marked_removed(path):
    from experiments.paper import learning

    data = learning.read_setting(path)
    assert isinstance(data["why"], str) and "\n" not in data["why"].strip() and len(data["why"]) > 20
    assert data.get("outcome") is None or isinstance(data["outcome"], str)
    base = learning.common.CONFIGS / data["config"]
    overrides = [*learning.flatten(data["overrides"]), *learning.flatten(data["eval"].get("overrides") or {})]
    if data.get("removed"):
        assert path.stem in learning.REMOVED and path.stem not in learning.SETTINGS
        with pytest.raises(ConfigError, match=str(data["removed"])):  # its keys name the commit
            load_config(base, overrides)
        with pytest.raises(SystemExit, match=f"last runs at commit {data['removed']}"):
            learning.main(["--cpu", "--game", path.stem])
        return
    setting = learning.SETTINGS[path.stem]
    cfg = load_config(base, overrides)
    assert setting.why == data["why"]
    assert setting.eval_episodes == data["eval"]["episodes"] >= 2
    assert setting.unit in ("deliveries", "apples")
    assert (setting.unit == "deliveries") == (cfg.env.game == "overcooked")


def test_flatten_writes_overrides_that_parse_back():
    from experiments.paper import learning

    tree = {"train": {"lr": 0.002, "credit": {"kind": "continuation", "keys": "state"}},
            "lora": {"targets": ["q", "v"]}, "run": {"progress": False}}
    assert learning.flatten(tree) == ("train.lr=0.002", "train.credit.kind=continuation", "train.credit.keys=state",
                                      "lora.targets=[q, v]", "run.progress=false")
    cfg = load_config(None, list(learning.flatten(tree)))
    assert (cfg.train.lr, cfg.train.credit.kind, cfg.lora.targets, cfg.run.progress) == (0.002, "continuation",
                                                                                         ("q", "v"), False)


def test_the_setting_that_held_up_is_the_continuation_target_variant():
    from experiments.paper import learning

    s = learning.SETTINGS["overcooked_q_last_burn_realign3_12"]
    cfg = load_config(learning.common.CONFIGS / s.config, [*s.overrides, *s.eval_overrides])
    assert (cfg.train.credit.kind, cfg.train.credit.keys, cfg.train.credit.burnin) == ("continuation", "state", 16)
    assert cfg.train.objective.kind == "target" and cfg.policy.realign == 3.0 and cfg.env.menu_format == "letter_last"
    assert (s.eval_episodes, s.eval_batch) == (12, 12)


def test_a_file_without_why_or_with_an_unknown_key_is_refused(tmp_path):
    from experiments.paper import learning

    good = yaml.safe_load((LAB / "overcooked_h20.yaml").read_text())
    (tmp_path / "a.yaml").write_text(yaml.safe_dump({k: v for k, v in good.items() if k != "why"}))
    with pytest.raises(ValueError, match="needs `why:`"):
        learning.read_setting(tmp_path / "a.yaml")
    (tmp_path / "b.yaml").write_text(yaml.safe_dump({**good, "notes": "x"}))
    with pytest.raises(ValueError, match="unknown key 'notes'"):
        learning.read_setting(tmp_path / "b.yaml")
