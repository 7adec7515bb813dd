"""Game-agnostic core: schema validation, synthesis (hand-computed), certificate, IO, evaluators."""

import numpy as np
import pytest

from omjax.options import menu as menu_mod
from omjax.options.diagnostics import diagnose
from omjax.options.records import RecordTable, read_records_jsonl, write_records_jsonl
from omjax.options.schema import (EFFECT_FAIL, EXPLICIT_BASE, SUCCESS, Effect, Feature, Increased,
                                  OptionSpec, Reason, Schema, Transition, compile_effects, effect_holds,
                                  effect_holds_jax, outcome_code, outcome_name)
from omjax.options.synthesis import (Guard, SynthesisConfig, certificate_violations, read_guards, synthesize,
                                     write_guards)

HELD = Feature("held", ("none", "onion", "dish"), private=True)
POT = Feature("pot", ("na", "empty", "full", "cooking"))
COUNT = Feature("count", ("0", "1", "2", "3"))
ADJ = Feature("adjacent", ("no", "yes"))


def toy_schema() -> Schema:
    return Schema(
        game="toy",
        options=(
            OptionSpec("pick", "disp", "pick @ {target}", Effect(private=Transition("held", to=("onion",)))),
            OptionSpec("place", "pot", "place @ {target}",
                       Effect(private=Transition("held", from_=("onion",), to=("none",)),
                              shared=(Increased("count"),)), reasons=(Reason.NoPath,)),
            OptionSpec("cook", "pot", "cook @ {target}", Effect(shared=(Transition("pot", to=("cooking",)),))),
            OptionSpec("wait", None, "wait", Effect()),
        ),
        read_set=(HELD, POT),
        effect_features=(HELD, POT, COUNT),
        transient=(ADJ,),
    )


def make_table(rows):
    """rows: (opt, held, pot, outcome, solo[, contested])."""
    rows = np.array([tuple(r) + (0,) * (6 - len(r)) for r in rows], dtype=np.int64).reshape(-1, 6)
    n = len(rows)
    return RecordTable.build(ep=np.arange(n), step=np.zeros(n), aid=np.zeros(n), opt=rows[:, 0],
                             target=np.zeros((n, 2)), features=rows[:, 1:3], transient=np.zeros((n, 1)),
                             outcome=rows[:, 3], solo=rows[:, 4], changed=rows[:, 3] == SUCCESS,
                             contested=rows[:, 5])


def test_schema_rejects_absolute_effect_and_shared_private():
    # A value on both sides of a transition would let a no-op satisfy the predicate (defect 1).
    with pytest.raises(ValueError, match="not a delta"):
        Schema("t", (OptionSpec("pick", "d", "x", Effect(private=Transition("held", from_=("onion", "none"),
                                                                              to=("onion",)))),),
               (HELD,), (HELD,))
    # A private transition on a shared feature is an attribution error (defect 2).
    with pytest.raises(ValueError, match="private transition on shared feature"):
        Schema("t", (OptionSpec("cook", "p", "x", Effect(private=Transition("pot", to=("cooking",)))),),
               (HELD,), (HELD, POT))
    with pytest.raises(ValueError, match="unknown feature"):
        Schema("t", (OptionSpec("a", "p", "x", Effect(shared=(Increased("nope"),))),), (HELD,), (HELD,))
    schema = toy_schema()
    assert [o.solo_only for o in schema.options] == [False, False, True, False]


def test_instantiate_every_target():
    schema = toy_schema()
    inst = menu_mod.instantiate(schema, {"disp": [(0, 1), (5, 1)], "pot": [(4, 2), (4, 3)]})
    assert [(i.opt, i.target) for i in inst] == [(0, (0, 1)), (0, (5, 1)), (1, (4, 2)), (1, (4, 3)),
                                                 (2, (4, 2)), (2, (4, 3)), (3, None)]
    with pytest.raises(ValueError, match="no targets given for class 'pot'"):
        menu_mod.instantiate(schema, {"disp": [(0, 1)]})


def test_outcome_codes_roundtrip():
    for code in range(EXPLICIT_BASE + len(Reason)):
        assert outcome_code(outcome_name(code)) == code
    assert outcome_name(EXPLICIT_BASE + Reason.NoPath) == "explicit:NoPath"
    with pytest.raises(ValueError, match="unknown explicit failure"):
        outcome_code("explicit:Timeout")


def test_effects_python_and_jax_agree_exhaustively():
    schema = toy_schema()
    table = compile_effects(schema)
    grid = np.array(np.meshgrid(range(3), range(4), range(4), indexing="ij")).reshape(3, -1).T  # [48, 3]
    pre = np.repeat(grid, len(grid), axis=0)
    post = np.tile(grid, (len(grid), 1))
    for o in range(len(schema.options)):
        want = np.array([effect_holds(schema, o, a, b) for a, b in zip(pre, post)])
        got = np.asarray(effect_holds_jax(table, np.full(len(pre), o), pre, post))
        np.testing.assert_array_equal(got, want)
        # Delta form: no option other than the null `wait` succeeds on a no-op.
        same = (pre == post).all(axis=1)
        assert want[same].all() == (o == 3)
    # Hand check: place succeeds iff held onion->none and count rose.
    assert effect_holds(schema, 1, [1, 1, 0], [0, 2, 1])
    assert not effect_holds(schema, 1, [1, 1, 1], [0, 2, 1])


def test_synthesis_hand_computed():
    schema = toy_schema()
    S, F, NP = SUCCESS, EFFECT_FAIL, EXPLICIT_BASE + Reason.NoPath
    rows = []
    rows += [(0, 1, 0, F, 0)] * 6  # pick while holding onion: 6 failures
    rows += [(0, 0, 0, S, 0)] * 3  # pick with empty hands: successes
    rows += [(0, 2, 0, F, 0)] * 4  # pick holding dish: only 4 failures (< 5)
    rows += [(1, 1, 2, F, 0)] * 5  # place onion into full pot: 5 failures
    rows += [(1, 1, 1, S, 0)] * 2  # place onion into empty pot: success
    rows += [(1, 0, 1, F, 0)] * 7  # place with empty hands, empty pot
    rows += [(1, 0, 2, F, 0)] * 1
    rows += [(1, 1, 1, NP, 0)] * 5  # unreachable pot: explicit NoPath (covers held=onion&pot=empty!)
    rows += [(2, 0, 2, S, 0, 1)] * 9  # cook: contested team successes are ignored (solo-only option) ...
    rows += [(2, 0, 2, F, 1)] * 6  # ... so these solo failures make pot=full a guard
    rows += [(2, 0, 3, F, 1)] * 5
    rows += [(2, 0, 1, S, 1)] * 1
    table = make_table(rows)
    guards = synthesize(table, schema, SynthesisConfig(min_support=5, min_explicit=5))
    got = {(g.opt, g.channel, tuple(sorted(g.when.items())), g.support) for g in guards}
    want = {
        ("pick", "inferred", (("held", "onion"),), 6),
        ("place", "explicit", (("__reason__", "NoPath"),), 5),
        ("place", "inferred", (("held", "none"),), 8),
        ("place", "inferred", (("pot", "full"),), 6),
        ("cook", "inferred", (("pot", "full"),), 6),
        ("cook", "inferred", (("pot", "cooking"),), 5),
    }
    assert got == want
    assert certificate_violations(guards, table, schema) == 0
    # One uncontested team success of cook with pot=full vetoes that guard under the
    # "uncontested" rule, not under the paper's solo rule, nor under "auto" (cook has a solo success).
    table2 = make_table(rows + [(2, 0, 2, S, 0, 0)])

    def cook_guards(mode, tab=table2):
        return {tuple(g.when.items()) for g in synthesize(tab, schema, SynthesisConfig(solo_only_records=mode))
                if g.opt == "cook"}

    assert (("pot", "full"),) not in cook_guards("uncontested")
    assert (("pot", "full"),) in cook_guards("solo")
    assert cook_guards("auto") == cook_guards("solo")
    # Without any solo success, "solo" hides cook everywhere it was tried; "auto" falls back.
    table3 = make_table([r for r in rows if r[0] != 2] + [(2, 0, 2, F, 1)] * 6 + [(2, 0, 1, F, 1)] * 5
                        + [(2, 0, 2, S, 0, 0)] * 3)
    assert (("held", "none"),) in cook_guards("solo", table3)
    assert cook_guards("auto", table3) == cook_guards("uncontested", table3) == {(("pot", "empty"),)}
    # With min_support 4 the dish literal also qualifies; 2-literal conjunctions containing an
    # adopted literal are dropped, so nothing 2-literal appears here.
    guards4 = synthesize(table, schema, SynthesisConfig(min_support=4))
    assert ("pick", (("held", "dish"),)) in {(g.opt, tuple(g.when.items())) for g in guards4}
    assert all(len(g.when) == 1 for g in guards4)


def test_two_literal_conjunction_adopted_only_when_no_single_literal():
    schema = toy_schema()
    S, F = SUCCESS, EFFECT_FAIL
    rows = [(0, 1, 2, F, 0)] * 5 + [(0, 1, 1, S, 0)] + [(0, 0, 2, S, 0)]
    guards = synthesize(make_table(rows), schema)
    assert [(g.opt, g.when, g.support) for g in guards] == [("pick", {"held": "onion", "pot": "full"}, 5)]


def random_log(rng, schema, n):
    """A synthetic log where outcomes depend on features plus noise, so guards are non-trivial."""
    opt = rng.integers(0, len(schema.options), n)
    feats = np.stack([rng.integers(0, len(f.values), n) for f in schema.read_set], axis=1)
    p_succ = 0.05 + 0.9 * ((feats[:, 0] + feats[:, 1] + opt) % 3 == 0)
    outcome = np.where(rng.random(n) < p_succ, SUCCESS,
                       np.where(rng.random(n) < 0.7, EFFECT_FAIL, EXPLICIT_BASE + rng.integers(0, 3, n)))
    return RecordTable.build(ep=np.arange(n), step=np.zeros(n), aid=rng.integers(0, 2, n), opt=opt,
                             target=rng.integers(0, 5, (n, 2)), features=feats,
                             transient=rng.integers(0, 2, (n, 1)), outcome=outcome,
                             solo=rng.random(n) < 0.3, changed=outcome == SUCCESS,
                             contested=rng.random(n) < 0.1)


@pytest.mark.parametrize("seed", range(5))
def test_certificate_on_synthetic_logs(seed, monkeypatch):
    from omjax.options import synthesis

    schema = toy_schema()
    rng = np.random.default_rng(seed)
    table = random_log(rng, schema, 3000)
    guards = synthesize(table, schema)
    # The joint-table and per-shape counting paths agree.
    monkeypatch.setattr(synthesis, "_JOINT_LIMIT", 0)
    assert synthesize(table, schema) == guards
    assert guards, "the synthetic log is built so that some guards exist"
    assert certificate_violations(guards, table, schema) == 0
    # Every inferred guard covers >= 5 eligible failures and is not subsumed by an adopted literal.
    singles = {(g.opt, next(iter(g.when.items()))) for g in guards if g.channel == "inferred" and len(g.when) == 1}
    for g in guards:
        if g.channel == "inferred":
            assert g.support >= 5
            if len(g.when) == 2:
                assert not any((g.opt, lit) in singles for lit in g.when.items())


def test_records_and_guards_jsonl_roundtrip(tmp_path):
    schema = toy_schema()
    table = random_log(np.random.default_rng(0), schema, 200)
    path = tmp_path / "rec.jsonl"
    write_records_jsonl(path, table, schema)
    back = read_records_jsonl(path, schema)
    for name in ("ep", "opt", "target", "features", "outcome", "solo", "changed", "contested", "transient"):
        np.testing.assert_array_equal(getattr(back, name), getattr(table, name))
    guards = synthesize(table, schema)
    write_guards(tmp_path / "g.jsonl", guards)
    assert read_guards(tmp_path / "g.jsonl", schema) == guards
    (tmp_path / "bad.jsonl").write_text('{"opt": "pick", "channel": "inferred", "when": {"held": "soup"}, "support": 5}\n')
    with pytest.raises(ValueError, match="bad.jsonl:1.*no value 'soup'"):
        read_guards(tmp_path / "bad.jsonl", schema)


def test_jax_guard_evaluator_matches_python_on_random_states():
    import jax

    schema = toy_schema()
    rng = np.random.default_rng(1)
    instances = menu_mod.instantiate(schema, {"disp": [(0, 1), (5, 1)], "pot": [(4, 2), (4, 3)]})
    guards = synthesize(random_log(rng, schema, 3000), schema) + [
        Guard("place", "explicit", {"__reason__": "NoPath"}, 9),
        Guard("cook", "inferred", {"held": "dish", "pot": "empty"}, 5)]
    table = menu_mod.GuardTable.from_guards(schema, guards)
    n, num_i = 2000, len(instances)
    feats = np.stack([rng.integers(0, len(f.values), (n, num_i)) for f in schema.read_set], -1)  # [n, I, F]
    live = rng.random((n, num_i, len(Reason))) < 0.3  # [n, I, R]
    inst_opt = np.array([i.opt for i in instances])
    got = np.asarray(jax.jit(menu_mod.hidden_mask_jax)(table, inst_opt, feats, live))
    want = np.stack([menu_mod.hidden_mask(schema, guards, instances, feats[k], live[k]) for k in range(n)])
    np.testing.assert_array_equal(got, want)
    assert 0 < want.mean() < 1


def test_letters_and_menu_assembly():
    assert [menu_mod.letter(i) for i in (0, 25, 26, 27)] == ["A", "Z", "AA", "AB"]
    schema = toy_schema()
    instances = menu_mod.instantiate(schema, {"disp": [(0, 1)], "pot": [(4, 2), (4, 3)]})
    feats = np.zeros((len(instances), 2), int)
    live = np.zeros((len(instances), len(Reason)), bool)
    live[1, Reason.NoPath] = True  # place @ (4, 2) unreachable
    guards = [Guard("place", "explicit", {"__reason__": "NoPath"}, 5)]
    items = menu_mod.assemble_menu(schema, guards, instances, feats, live, menu_mod.episode_rng(0, 0))
    assert sorted(it.index for it in items) == [0, 2, 3, 4, 5]
    assert [it.letter for it in items] == ["A", "B", "C", "D", "E"]
    assert {it.label for it in items} >= {"pick @ (0, 1)", "place @ (4, 3)", "wait"}
    orders = {tuple(it.index for it in menu_mod.assemble_menu(schema, guards, instances, feats, live,
                                                               np.random.default_rng(s))) for s in range(20)}
    assert len(orders) > 5  # letters really are shuffled


def test_letter_ranks_jax_is_a_permutation_of_visible():
    import jax

    visible = np.random.default_rng(0).random((64, 9)) < 0.6
    ranks = np.asarray(menu_mod.letter_ranks_jax(jax.random.PRNGKey(0), visible))
    for v, r in zip(visible, ranks):
        assert sorted(r[v]) == list(range(v.sum()))
        assert (r[~v] == -1).all()


def test_diagnostics_flags_defects():
    schema = toy_schema()
    S, F, NP = SUCCESS, EFFECT_FAIL, EXPLICIT_BASE + Reason.NoPath
    table = make_table([(0, 0, 0, S, 0)] * 3 + [(1, 1, 1, NP, 0)] * 4 + [(2, 0, 2, F, 1)] * 2)
    table = RecordTable.build(**{**{k: getattr(table, k) for k in ("ep", "step", "aid", "opt", "target",
                                                                   "features", "transient", "outcome", "solo",
                                                                   "contested")},
                                 "changed": np.array([True, False, True] + [False] * 6)})
    d = diagnose(table, schema)
    assert d.always_explicit == ["place"]
    assert d.never_succeed == ["place", "cook"]
    assert d.never_succeed_eligible == ["place", "cook"]
    assert d.never_run == ["wait"]
    assert d.empty_delta == ["pick"]
    assert not d.clean
