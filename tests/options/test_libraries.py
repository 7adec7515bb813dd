"""Candidate option libraries and their per-seed sampling; Overcooked's second library (lib_b)."""

import dataclasses

import numpy as np
import pytest

from omjax.config import ConfigError, EnvConfig, load_config
from omjax.envs.overcooked import initial_state
from omjax.options import overcooked as oc
from omjax.options.libraries import CANDIDATES, guard_variant, library_of, resolve_library, sample_library
from omjax.games.registry import guard_path
from omjax.options.schema import SUCCESS
from omjax.options.synthesis import certificate_violations, read_guards, synthesize

AA = "asymmetric_advantages"


def test_sampling_is_deterministic_in_the_seed_and_reaches_every_candidate():
    for game, names in CANDIDATES.items():
        draws = [sample_library(game, seed) for seed in range(20)]
        assert draws == [sample_library(game, seed) for seed in range(20)]
        assert set(draws) == set(names)
    with pytest.raises(ValueError, match="no candidate libraries for game 'chess'"):
        sample_library("chess", 0)


def test_candidates_match_the_game_modules():
    from omjax.options import cleanup, harvest

    assert CANDIDATES["overcooked"] == tuple(oc.LIBRARIES)
    assert CANDIDATES["cleanup"] == cleanup.LIBRARY.VARIANTS and CANDIDATES["harvest"] == harvest.LIBRARY.VARIANTS


def test_paper_configs_sample_and_resolution_is_concrete():
    seed = next(s for s in range(20) if sample_library("overcooked", s) == "lib_b")
    cfg = load_config("configs/overcooked_aa_qwen3-4b.yaml", [f"seed={seed}"])
    assert cfg.env.library == "sampled"
    with pytest.raises(ValueError, match="not been resolved"):
        library_of(cfg.env)
    resolved = resolve_library(cfg)
    assert resolved.env.library == "lib_b" and guard_variant(resolved.env) == f"{AA}@lib_b"
    assert resolve_library(resolved) == resolved
    for name in ("cleanup_qwen3-4b", "harvest_qwen3-4b"):
        assert load_config(f"configs/{name}.yaml").env.library == "sampled"


def test_library_names_and_conflicts():
    assert library_of(EnvConfig()) == "lib_a" and guard_variant(EnvConfig()) == AA
    cleanup = EnvConfig(game="cleanup", layout="clean_up", n_agents=7)
    assert library_of(cleanup) == "lib_a"
    assert library_of(dataclasses.replace(cleanup, library="lib_b")) == "lib_b"
    assert library_of(dataclasses.replace(cleanup, layout="lib_b")) == "lib_b"
    with pytest.raises(ValueError, match="name different libraries"):
        library_of(dataclasses.replace(cleanup, layout="lib_b", library="lib_a"))
    with pytest.raises(ValueError, match="not been resolved"):
        library_of(dataclasses.replace(cleanup, library="sampled"))
    with pytest.raises(ConfigError, match="env.library"):
        load_config(None, ["env.library=lib_c"])


def test_lib_b_instantiates_only_its_own_item_typed_counter_options():
    a, b = oc.library(AA), oc.library(AA, "lib_b")
    assert b is oc.library(f"{AA}@lib_b")
    names_a = {oc.SCHEMA.options[i.opt].name for i in a.instances}
    names_b = {oc.SCHEMA.options[i.opt].name for i in b.instances}
    assert names_a == set(oc.LIBRARIES["lib_a"]) and names_b == set(oc.LIBRARIES["lib_b"])
    assert {"drop_held", "pick_from_counter"} <= names_a - names_b
    assert {"drop_onion", "take_soup"} <= names_b - names_a
    counters = len(a.targets_by_class["counter"])
    assert b.num_instances - a.num_instances == 4 * counters  # 6 typed counter options replace 2
    # Option indices are the union schema's, so lib_a's instance table is what it always was.
    assert [oc.SCHEMA.options[o].name for o in sorted(set(a.inst_opt))] == list(oc.LIBRARIES["lib_a"][:6]) + [
        "drop_held", "pick_from_counter", "wait"]


@pytest.fixture(scope="module")
def lib_b_table():
    return oc.burnin(f"{AA}@lib_b", 100, 100, seed=7, progress=False, batch=100)


def test_lib_b_guards_are_synthesised_and_certified(lib_b_table):
    t = lib_b_table
    assert set(oc.SCHEMA.options[o].name for o in np.unique(t.opt)) == set(oc.LIBRARIES["lib_b"])
    shipped = read_guards(guard_path("overcooked", f"{AA}@lib_b"), oc.SCHEMA)
    assert len(shipped) > 40
    assert certificate_violations(shipped, t, oc.SCHEMA) == 0  # hides no success of a fresh burn-in
    for guards in (shipped, synthesize(t, oc.SCHEMA)):
        found = {(g.opt, g.channel, tuple(sorted(g.when.items()))) for g in guards}
        assert ("drop_onion", "explicit", (("__reason__", "NothingHeld"),)) in found
        assert ("drop_onion", "inferred", (("held", "dish"),)) in found  # a dish is no onion
        assert ("take_dish", "inferred", (("tgt_item", "onion"),)) in found
        assert not any(g.opt == "drop_dish" and g.when.get("held") == "dish" for g in guards)
    took = (t.opt == oc.SCHEMA.option_index("take_onion")) & (t.outcome == SUCCESS)
    assert took.sum() > 10


def test_lib_a_and_lib_b_menus_differ_when_holding_an_onion():
    import jax.numpy as jnp

    from omjax.envs.overcooked import Item

    start = initial_state(oc.library(AA).layout)
    state = start.replace(held=jnp.asarray([Item.ONION, Item.NONE], jnp.int32))
    menus = {}
    for lib, variant in (("lib_a", AA), ("lib_b", f"{AA}@lib_b")):
        guards = read_guards(guard_path("overcooked", variant), oc.SCHEMA)
        menus[lib] = {it.opt for it in oc.library(AA, lib).menu(state, 0, guards, np.random.default_rng(0))}
    assert "drop_held" in menus["lib_a"] and "drop_onion" in menus["lib_b"]
    assert not {"drop_dish", "drop_soup", "drop_held"} & menus["lib_b"]  # the guards hide the wrong item
