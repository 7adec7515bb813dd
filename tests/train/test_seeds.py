"""The seed axis: several training seeds in one program equal each seed trained alone, also when
they drew different option libraries; rounds after the first compile nothing new."""

import json

import numpy as np
import pytest

from omjax.config import load_config
from omjax.games import GroupGame
from omjax.options.libraries import CANDIDATES, sample_library
from omjax.options.overcooked import LIBRARIES
from omjax.train.metrics import read_jsonl
from omjax.train.trainer import Trainer, read_group
from tests.eval.tiny_model import write_tiny_llama

from bandit import MenuBandit

N_AGENTS = 3


def config(tmp_path, *extra):
    return load_config(None, [
        "env.n_agents=3", "env.horizon=2", "lora.rank=4", "lora.alpha=8", "lora.targets=q,v",
        "train.rollouts=4", "train.lr=0.03", "train.minibatch_size=4", "train.kl_coef=0.01",
        "policy.temperature=1.0", "run.progress=false", "run.plot_every=100", f"run.out_dir={tmp_path}", *extra,
    ])


def assert_close(a, b, path="row"):
    """Equal structure; floats within 1e-4 (relative) / 1e-5 (absolute), everything else exactly."""
    if isinstance(a, dict):
        assert a.keys() == b.keys(), path
        for k in a:
            assert_close(a[k], b[k], f"{path}.{k}")
    elif isinstance(a, list):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b)):
            assert_close(x, y, f"{path}[{i}]")
    elif isinstance(a, float) and not isinstance(b, bool):
        assert b == pytest.approx(a, rel=1e-4, abs=1e-5), (path, a, b)
    else:
        assert a == b, (path, a, b)


def strip(rows):
    return [{k: v for k, v in r.items() if not k.startswith("time")} for r in rows]


def test_two_seeds_together_equal_each_seed_alone(tiny_model, tmp_path):
    cfg = config(tmp_path, "train.rounds=2")
    group = Trainer(cfg, model=tiny_model, run_dir=tmp_path / "group", game=MenuBandit(N_AGENTS, 2), seeds=[0, 1])
    together = group.run_group()
    assert read_group(tmp_path / "group") == [0, 1]
    for s, rows in zip([0, 1], together):
        alone_dir = tmp_path / f"alone_{s}"
        alone = Trainer(config(alone_dir, "train.rounds=2", f"seed={s}"), model=tiny_model,
                        game=MenuBandit(N_AGENTS, 2)).run()
        assert any(r["updated"] for r in rows)
        assert_close(strip(alone), strip(rows))
        run = tmp_path / "group" / f"seed_{s}"
        assert sorted(p.name for p in alone_dir.iterdir()) == sorted(p.name for p in run.iterdir())
        assert (run / "config.yaml").read_text() == (alone_dir / "config.yaml").read_text().replace(
            str(alone_dir), str(run))
        for r in range(2):
            mine = read_jsonl(run / "decisions" / f"round_{r:04d}.jsonl")
            ref = read_jsonl(alone_dir / "decisions" / f"round_{r:04d}.jsonl")
            assert [d["letter"] for d in mine] == [d["letter"] for d in ref]
            assert_close(ref, mine, f"seed {s} round {r} decisions")
    # The two seeds are different runs (equal to their solo runs above, so one update over the
    # whole bank moved each seed's adapters only by its own cohort).
    assert together[0][0]["team_returns"] != together[1][0]["team_returns"]


def test_group_resumes_to_the_uninterrupted_metrics(tiny_model, tmp_path):
    full = Trainer(config(tmp_path / "full", "train.rounds=2"), model=tiny_model, game=MenuBandit(N_AGENTS, 2),
                   seeds=[3, 4]).run_group()
    Trainer(config(tmp_path / "cut", "train.rounds=1"), model=tiny_model, game=MenuBandit(N_AGENTS, 2),
            seeds=[3, 4]).run_group()
    resumed = Trainer(config(tmp_path / "cut", "train.rounds=2"), model=tiny_model, game=MenuBandit(N_AGENTS, 2),
                      seeds=[3, 4]).run_group(resume=True)
    assert [strip(r) for r in resumed] == [strip(r) for r in full]


def test_rounds_after_the_first_compile_nothing(tiny_model, tmp_path):
    trainer = Trainer(config(tmp_path, "train.rounds=3"), model=tiny_model, game=MenuBandit(N_AGENTS, 2),
                      seeds=[0, 1])
    trainer.run_group()
    assert len(trainer.round_compilations) == 3
    assert trainer.round_compilations[0] > 0
    assert trainer.round_compilations[1:] == [0, 0], trainer.round_compilations


# ---------------------------------------------------------------------------------------------
# Seeds that drew different option libraries (`env.library: sampled`) in one program.

OVERCOOKED = ["env.game=overcooked", "env.layout=asymmetric_advantages", "env.n_agents=2", "env.horizon=6",
              "env.library=sampled", "env.reward_shaping=1.0", "policy.action_interface=options",
              "train.rollouts=4", "train.minibatch_size=4", "lora.rank=2", "lora.alpha=4", "lora.targets=q,v",
              "train.lr=0.03", "run.progress=false", "run.plot_every=100"]


@pytest.fixture(scope="module")
def overcooked_model(tmp_path_factory):
    """The tiny Llama whose vocabulary spells the Overcooked prompts' letters and digits."""
    from omjax.models import load

    return load(write_tiny_llama(tmp_path_factory.mktemp("tiny_llama_overcooked")))


LONG = "env.horizon=16"
"""Episodes long enough for a shaped reward (6 steps earn none, so no round would update)."""


def overcooked_config(run_dir, *extra):
    return load_config(None, [*OVERCOOKED, f"run.out_dir={run_dir}", *extra])


def library_seeds() -> list[int]:
    """The first training seed that draws each Overcooked candidate library."""
    return [next(s for s in range(100) if sample_library("overcooked", s) == lib) for lib in CANDIDATES["overcooked"]]


def library_bandits(seeds):
    """The bandit each seed's library stands for: under lib_b a different option pays, so a
    seed's returns show which game its episodes played on."""
    games = {"lib_a": MenuBandit(N_AGENTS, 2), "lib_b": MenuBandit(N_AGENTS, 2, paying=("pick",) * N_AGENTS)}
    return [games[sample_library("overcooked", s)] for s in seeds]


@pytest.mark.slow  # 95 s; the fast equivalence across libraries is tests/games/test_group.py
def test_bandit_seeds_of_different_libraries_together_equal_each_seed_alone(tiny_model, tmp_path):
    """The bandit version of the Overcooked test below (cheaper: the libraries are two bandits)."""
    seeds = library_seeds()
    cfg = config(tmp_path, "train.rounds=2", "env.library=sampled")
    together = Trainer(cfg, model=tiny_model, run_dir=tmp_path / "group", game=GroupGame(library_bandits(seeds)),
                       seeds=seeds).run_group()
    for s, lib, rows in zip(seeds, CANDIDATES["overcooked"], together):
        alone_dir = tmp_path / f"alone_{s}"
        alone = Trainer(config(alone_dir, "train.rounds=2", "env.library=sampled", f"seed={s}"), model=tiny_model,
                        game=library_bandits([s])[0]).run()
        assert any(r["updated"] for r in rows)
        assert_close(strip(alone), strip(rows))
        run = tmp_path / "group" / f"seed_{s}"
        for name in ("config.yaml", "library.json"):
            assert (run / name).read_text() == (alone_dir / name).read_text().replace(str(alone_dir), str(run))
        assert json.loads((run / "library.json").read_text())["library"] == lib
        for r in range(2):
            assert_close(read_jsonl(alone_dir / "decisions" / f"round_{r:04d}.jsonl"),
                         read_jsonl(run / "decisions" / f"round_{r:04d}.jsonl"), f"seed {s} round {r} decisions")
    # Resumed from the group's own config.yaml (still `sampled`), the group plays on.
    Trainer(config(tmp_path / "cut", "train.rounds=1", "env.library=sampled"), model=tiny_model,
            game=GroupGame(library_bandits(seeds)), seeds=seeds).run_group()
    resumed = Trainer(load_config(tmp_path / "cut" / "config.yaml", ["train.rounds=2"]), model=tiny_model,
                      game=GroupGame(library_bandits(seeds)), seeds=seeds)
    assert [c.env.library for c in resumed.seed_cfgs] == list(CANDIDATES["overcooked"])
    assert [strip(r) for r in resumed.run_group(resume=True)] == [strip(r) for r in together]


@pytest.mark.slow
def test_seeds_of_different_libraries_together_equal_each_seed_alone(overcooked_model, tmp_path):
    seeds = library_seeds()
    group = Trainer(overcooked_config(tmp_path / "group", "train.rounds=2", LONG), model=overcooked_model, seeds=seeds)
    assert isinstance(group.game, GroupGame)
    assert [g.lib.library for g in group.game.parts] == list(CANDIDATES["overcooked"])
    together = group.run_group()
    assert load_config(tmp_path / "group" / "config.yaml").env.library == "sampled"
    for s, lib, rows in zip(seeds, CANDIDATES["overcooked"], together):
        alone_dir = tmp_path / f"alone_{s}"
        alone = Trainer(overcooked_config(alone_dir, "train.rounds=2", f"seed={s}", LONG), model=overcooked_model)
        assert alone.game.lib.library == lib
        alone_rows = alone.run()
        assert any(r["updated"] for r in rows)
        assert_close(strip(alone_rows), strip(rows))
        run = tmp_path / "group" / f"seed_{s}"
        assert sorted(p.name for p in alone_dir.iterdir()) == sorted(p.name for p in run.iterdir())
        for name in ("config.yaml", "library.json"):
            assert (run / name).read_text() == (alone_dir / name).read_text().replace(str(alone_dir), str(run))
        record = json.loads((run / "library.json").read_text())
        assert (record["library"], record["sampled_from_seed"]) == (lib, s)
        assert load_config(run / "config.yaml").env.library == lib
        for r in range(2):
            mine = read_jsonl(run / "decisions" / f"round_{r:04d}.jsonl")
            ref = read_jsonl(alone_dir / "decisions" / f"round_{r:04d}.jsonl")
            assert [d["letter"] for d in mine] == [d["letter"] for d in ref]
            assert_close(ref, mine, f"seed {s} round {r} decisions")
            assert {it["option"] for d in mine for it in d["menu"]} <= set(LIBRARIES[lib])
    # Each seed saw its own library's menus: lib_b has no drop_held, lib_a no take_onion.
    shown = [{it["option"] for r in range(2) for d in read_jsonl(tmp_path / "group" / f"seed_{s}" / "decisions"
                                                                  / f"round_{r:04d}.jsonl") for it in d["menu"]}
             for s in seeds]
    assert shown[0] - set(LIBRARIES["lib_b"]) and shown[1] - set(LIBRARIES["lib_a"])


@pytest.mark.slow
def test_group_of_different_libraries_resumes_to_the_uninterrupted_metrics(overcooked_model, tmp_path):
    seeds = library_seeds()
    full = Trainer(overcooked_config(tmp_path / "full", "train.rounds=2"), model=overcooked_model,
                   seeds=seeds).run_group()
    Trainer(overcooked_config(tmp_path / "cut", "train.rounds=1"), model=overcooked_model, seeds=seeds).run_group()
    # As `omjax train --resume`: the group's own config.yaml, which still samples the library per seed.
    resumed_cfg = load_config(tmp_path / "cut" / "config.yaml", ["train.rounds=2"])
    resumed = Trainer(resumed_cfg, model=overcooked_model, seeds=seeds)
    assert isinstance(resumed.game, GroupGame)
    assert [strip(r) for r in resumed.run_group(resume=True)] == [strip(r) for r in full]
    for s, lib in zip(seeds, CANDIDATES["overcooked"]):
        record = json.loads((tmp_path / "cut" / f"seed_{s}" / "library.json").read_text())
        assert (record["library"], record["sampled_from_seed"]) == (lib, s)
