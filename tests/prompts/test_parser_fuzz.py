"""The reply parsers are total and linear-time: 10,000 adversarial strings, zero exceptions."""

import random
import time

import pytest

from omjax.interfaces.compound_json import INVALID_REASONS, extract_json_object, parse_emission
from omjax.options import overcooked as oc
from omjax.prompts.reply import parse_reply

LETTERS = ["A", "B", "C", "D", "AA"]


def _adversarial(rng: random.Random) -> str:
    """One string of a randomly drawn attack shape (each shape known to break a naive parser)."""
    n = rng.choice([10, 100, 1000, 5000, 20000])
    pad = rng.choice([" ", "\t", "\n", " \n", "_", "*", "\u00a0", "\u2003"])
    shapes = [
        lambda: "state: " + pad * n + "!\nchoice: A",
        lambda: "choice:" + pad * n + "!",
        lambda: "A" + pad * n + "!",
        lambda: "state:" * n,
        lambda: "{" * n,
        lambda: "{" * n + "}" * n,
        lambda: '{"action": ' * n + '"wait"' + "}" * n,
        lambda: "[" * n + "]" * n,
        lambda: '{"action": "wait", "args": {"x": ' + "9" * n + ', "y": 1}}',
        lambda: '{"action": "pick_onion", "args": {"target": [' + "1" * n + ", 2]}}",
        lambda: '{"action": "' + "\\" * n + '"}',
        lambda: '"' * n + "{}",
        lambda: "".join(chr(rng.randrange(0x20, 0x10FFFF)) for _ in range(min(n, 300))
                        ).encode("utf-8", "replace").decode("utf-8", "replace"),
        lambda: "".join(rng.choice('{}[]":,\\ \n0123456789eE.-+actionargsAB') for _ in range(min(n, 2000))),
        lambda: '{"action": "wait", "args": ' + rng.choice(["NaN", "Infinity", "-0", "1e999", "null", "[]"]) + "}",
        lambda: "choice: " + rng.choice(["A", "AA", "Z", "é", "\u0410", ""]) + pad * (n // 10),
    ]
    return rng.choice(shapes)()


def test_parsers_are_total_and_fast_on_adversarial_strings():
    lib = oc.library("cramped_room")
    rng = random.Random(0)
    texts = [_adversarial(rng) for _ in range(10_000)]
    t0 = time.perf_counter()
    reasons: dict[str, int] = {}
    for text in texts:
        reply = parse_reply(text, LETTERS)
        assert reply is None or reply.choice in LETTERS
        emission = parse_emission(text, oc.SCHEMA, lib.instances)
        assert (emission.instance is None) == (emission.error in INVALID_REASONS)
        if emission.error:
            reasons[emission.error] = reasons.get(emission.error, 0) + 1
    elapsed = time.perf_counter() - t0
    assert elapsed < 15, f"10,000 adversarial replies took {elapsed:.1f} s"
    assert {"no_json", "bad_json", "not_object"} <= set(reasons)


@pytest.mark.parametrize("n", [80, 500, 4000])
def test_state_line_with_a_long_whitespace_run_parses_in_linear_time(n):
    t0 = time.perf_counter()
    reply = parse_reply("state: " + " " * n + "!\nchoice: A", LETTERS)
    assert reply is not None and reply.choice == "A" and reply.state is None
    assert time.perf_counter() - t0 < 0.5


def test_deep_json_and_huge_numbers_are_counted_failures():
    lib = oc.library("cramped_room")
    deep = parse_emission('{"a":' * 5000 + "1" + "}" * 5000, oc.SCHEMA, lib.instances)
    assert deep.instance is None and deep.error == "bad_json" and "nested" in deep.detail
    for digits in (4000, 5000):
        huge = parse_emission('{"action": "pick_onion", "args": {"x": ' + "9" * digits + ', "y": 1}}',
                              oc.SCHEMA, lib.instances)
        assert huge.instance is None and huge.error in INVALID_REASONS
    t0 = time.perf_counter()
    assert extract_json_object("{" * 20000) is None
    assert time.perf_counter() - t0 < 0.5
