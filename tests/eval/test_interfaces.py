import numpy as np
import pytest

from omjax.interfaces.compound_json import (
    EmissionTally,
    extract_json_object,
    parse_emission,
    render_vocabulary,
)
from omjax.interfaces.native import native_action_set
from omjax.options.menu import Instance, instantiate
from omjax.options.schema import EFFECT_FAIL, SUCCESS, Effect, Feature, OptionSpec, Reason, Schema, Transition

HELD = Feature("held", ("nothing", "onion", "dish"), private=True)
KITCHEN = Schema(
    game="toy_kitchen",
    options=(
        OptionSpec("pick_onion", "onion_dispenser", "pick up onion @ {target}", Effect(Transition("held", ("onion",))),
                   (Reason.TargetAbsent, Reason.NoPath)),
        OptionSpec("drop_held", "counter", "drop held item on counter @ {target}",
                   Effect(Transition("held", ("nothing",))), (Reason.NothingHeld, Reason.NoPath)),
        OptionSpec("wait", None, "wait", Effect()),
    ),
    read_set=(HELD,),
    effect_features=(HELD,),
)
INSTANCES = instantiate(KITCHEN, {"onion_dispenser": [(0, 1), (4, 1)], "counter": [(2, 0)]})


def test_native_action_sets_follow_env_action_order():
    overcooked = native_action_set("overcooked")
    assert overcooked.letters == ("A", "B", "C", "D", "E", "F")
    assert overcooked.parse("state: empty\nchoice: F") == 5  # INTERACT
    assert overcooked.parse("choice: G") is None
    clean_up = native_action_set("cleanup")
    assert clean_up.letters[-1] == "I" and clean_up.names[clean_up.parse("choice: I")] == "fire clean"
    assert len(native_action_set("harvest").names) == 8  # no cleaning beam in Harvest
    assert "F) interact" in overcooked.render_menu()
    assert overcooked.action_counts([5, 5, 0]) == {
        "move north": 1, "move south": 0, "move east": 0, "move west": 0, "stay": 0, "interact": 2
    }
    with pytest.raises(ValueError, match="no native action set"):
        native_action_set("chess")


def test_extract_json_object_skips_prose_and_string_braces():
    reply = 'Sure! {"action": "wait", "args": {"note": "a } in a string"}} trailing'
    assert extract_json_object(reply) == '{"action": "wait", "args": {"note": "a } in a string"}}'
    assert extract_json_object("no object here") is None
    assert extract_json_object("{unbalanced") is None


@pytest.mark.parametrize(
    "reply, instance, error",
    [
        ('{"action": "pick_onion", "args": {"target": [4, 1]}}', 1, None),
        ('{"action": "pick_onion", "args": {"x": 0, "y": 1}}', 0, None),
        ('I will drop it. {"action": "drop_held", "args": [2, 0]}', 2, None),
        ('{"action": "wait"}', 3, None),
        ('{"action": "wait", "args": {}}', 3, None),
        ("choice: A", None, "no_json"),
        ('{"action": pick_onion}', None, "bad_json"),
        ('{"act": "wait"}', None, "not_object"),
        ('{"action": "fly", "args": {}}', None, "unknown_action"),
        ('{"action": "pick_onion"}', None, "bad_args"),
        ('{"action": "pick_onion", "args": {"target": [1.5, 2]}}', None, "bad_args"),
        ('{"action": "wait", "args": {"target": [1, 1]}}', None, "bad_args"),
        ('{"action": "pick_onion", "args": {"target": [3, 3]}}', None, "no_such_target"),
    ],
)
def test_parse_emission(reply, instance, error):
    emission = parse_emission(reply, KITCHEN, INSTANCES)
    assert (emission.instance, emission.error) == (instance, error)
    if instance is not None:
        assert KITCHEN.options[INSTANCES[instance].opt].name in reply


def test_emission_tally_counts_invalid_and_noop():
    tally = EmissionTally.zeros(2)
    valid = parse_emission('{"action": "pick_onion", "args": {"target": [0, 1]}}', KITCHEN, INSTANCES)
    invalid = parse_emission("hello", KITCHEN, INSTANCES)
    tally = tally.record(0, valid, SUCCESS)
    tally = tally.record(0, valid, EFFECT_FAIL)  # already holding an onion: a no-op
    tally = tally.record(1, invalid, None)
    np.testing.assert_array_equal(tally.emitted, [2, 1])
    np.testing.assert_array_equal(tally.invalid, [0, 1])
    np.testing.assert_array_equal(tally.noop, [1, 0])
    np.testing.assert_array_equal(tally.wasted, [1, 1])
    with pytest.raises(ValueError, match="needs the outcome"):
        tally.record(0, valid, None)


def test_vocabulary_lists_every_option_and_the_target_cells():
    text = render_vocabulary(KITCHEN)
    for name in KITCHEN.option_names:
        assert f'"{name}"' in text
    assert '"wait" args {}' in text and "Target cells" not in text
    instances = [Instance(o, t) for o, spec in enumerate(KITCHEN.options) if spec.target_class
                 for t in [(1, 2), (3, 4)]] + [Instance(o, None) for o, spec in enumerate(KITCHEN.options)
                                               if spec.target_class is None]
    cells = render_vocabulary(KITCHEN, instances).partition("Target cells (x, y):\n")[2].splitlines()
    classes = list(dict.fromkeys(s.target_class for s in KITCHEN.options if s.target_class))
    assert cells == [f"- <{c}>: (1, 2), (3, 4)" for c in classes]  # each class once, cells once
    assert render_vocabulary(KITCHEN, []).endswith(f"- <{classes[-1]}>: none")


def test_table2_cells_are_valid_configs():
    from omjax.eval.ablations import TABLE2_CELLS, cell_config
    from omjax.eval.stats import TABLE2_ROWS

    assert list(TABLE2_CELLS) == [name for name, _ in TABLE2_ROWS]
    configs = {cell: cell_config(cell, overrides=["train.rounds=1"]) for cell in TABLE2_CELLS}
    switches = {
        cell: (c.policy.action_interface, c.train.train, c.train.shared_lora, c.n_adapters)
        for cell, c in configs.items()
    }
    n = configs["ours"].env.n_agents
    assert switches == {
        "frozen_native": ("native", False, False, n),
        "frozen_menu": ("options", False, False, n),
        "native_magrpo": ("native", True, False, n),
        "compound_json": ("compound_json", True, False, n),
        "shared_lora": ("options", True, True, 1),
        "ours": ("options", True, False, n),
        "ours_hand_guards": ("options", True, False, n),
    }
    assert {c: configs[c].env.guards for c in ("ours", "ours_hand_guards")} == {"ours": "", "ours_hand_guards": "hand"}
    assert configs["compound_json"].policy.decision_mode == "sample"
    assert all(c.train.rounds == 1 for c in configs.values())
    with pytest.raises(ValueError, match="unknown Table 2 cell"):
        cell_config("ours_but_better")
