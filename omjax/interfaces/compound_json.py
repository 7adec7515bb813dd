"""Compound-JSON interface (Ablation D): free generation of `{"action": ..., "args": ...}`.

The model sees the option vocabulary (names and argument forms) but no state-filtered menu. Its
reply is parsed into an instance of the guardless instantiation -- one instance per target of
each option's class, exactly what the menu would be built from before guards -- and executed
with the same raw executor. An emission is
  * invalid when it cannot be turned into an instance (no JSON, unknown action, bad or missing
    arguments, a target that is not an instance of the option's class), or
  * a no-op when it executes but its effect predicate does not hold (or the executor fails
    explicitly): the model asked for something the state did not allow.
Both are counted (§6.3: without the filter the model emits many illegal or no-op actions).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from omjax.options.menu import Instance
from omjax.options.schema import SUCCESS, Schema

MAX_EMISSION_CHARS = 4096
"""Characters of a reply `parse_emission` reads; the contract's one-line object is about 50."""

MAX_JSON_DEPTH = 8
"""Deepest `{...}` nesting an emission may have (the contract's object is two deep)."""

INVALID_REASONS = ("no_json", "bad_json", "not_object", "unknown_action", "bad_args", "no_such_target")
"""Why an emission could not be executed; one counter per reason."""


@dataclass(frozen=True)
class Emission:
    """What one free-form reply amounted to."""

    instance: int | None
    """Index into the guardless instance list, or None when the emission is invalid."""
    error: str | None = None
    """One of INVALID_REASONS when invalid."""
    detail: str = ""
    """Human-readable explanation of the error, for logs."""


_JSON_SPECIAL = re.compile(r'[{}"\\]')


def _first_object_span(text: str, max_depth: int | None = None) -> tuple[int, int, int] | None:
    """(start, end, depth) of the first balanced `{...}` in `text`: the earliest-starting object
    that closes (braces inside JSON strings ignored) and its deepest nesting. One pass over the
    braces, quotes and backslashes: every `{` outside a string is pushed, every `}` pops its
    partner, and the popped pair starting earliest wins -- the first `{` itself as soon as the
    stack empties. Past `max_depth` open braces the scan stops: (first `{`, -1, depth)."""
    opened: list[int] = []
    best: tuple[int, int] | None = None
    depth_max, in_string, escaped_at = 0, False, -1
    for match in _JSON_SPECIAL.finditer(text):
        k, ch = match.start(), match.group()
        if in_string:
            if k == escaped_at:
                continue
            if ch == "\\":
                escaped_at = k + 1
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = bool(opened)
        elif ch == "{":
            opened.append(k)
            depth_max = max(depth_max, len(opened))
            if max_depth is not None and depth_max > max_depth:
                return opened[0], -1, depth_max
        elif ch == "}" and opened:
            start = opened.pop()
            if best is None or start < best[0]:
                best = (start, k)
            if not opened:
                break
    return None if best is None else (best[0], best[1] + 1, depth_max)


def extract_json_object(text: str) -> str | None:
    """The first balanced `{...}` in `text` (braces inside JSON strings ignored), or None."""
    span = _first_object_span(text)
    return None if span is None else text[span[0]:span[1]]


def _target_from_args(args) -> tuple[int, int] | None | str:
    """(x, y) from `{"target": [x, y]}`, `{"x": x, "y": y}` or `[x, y]`; None for no target;
    a string describes why the arguments are malformed."""
    if args is None or args == {} or args == []:
        return None
    if isinstance(args, dict):
        if "target" in args:
            args = args["target"]
        elif {"x", "y"} <= set(args):
            args = [args["x"], args["y"]]
        else:
            return f"args {args!r} name no target (expected target: [x, y] or x/y)"
    if (
        isinstance(args, (list, tuple))
        and len(args) == 2
        and all(isinstance(v, int) and not isinstance(v, bool) for v in args)
    ):
        return int(args[0]), int(args[1])
    return f"target {args!r} is not two integers [x, y]"


def parse_emission(reply: str, schema: Schema, instances: Sequence[Instance]) -> Emission:
    """Turn a free-form reply into an instance of `instances` (the guardless instantiation).

    Total and linear-time: only the first `MAX_EMISSION_CHARS` characters are read, objects nested
    deeper than `MAX_JSON_DEPTH` and numbers too long for Python's int parser are `bad_json`."""
    span = _first_object_span(reply[:MAX_EMISSION_CHARS], MAX_JSON_DEPTH)
    if span is None:
        return Emission(None, "no_json", "reply holds no {...} object")
    start, end, depth = span
    if depth > MAX_JSON_DEPTH:
        return Emission(None, "bad_json", f"object nested deeper than {MAX_JSON_DEPTH}")
    raw = reply[start:end]
    try:
        obj = json.loads(raw)
    except (ValueError, RecursionError) as err:  # JSONDecodeError, or an int past Python's digit limit
        return Emission(None, "bad_json", str(err)[:200])
    if not isinstance(obj, dict) or "action" not in obj:
        return Emission(None, "not_object", f"expected an object with an 'action' key, got {raw!r}")
    name = obj["action"]
    if not isinstance(name, str) or name not in schema.option_names:
        return Emission(None, "unknown_action", f"{name!r} is not one of {', '.join(schema.option_names)}")
    opt = schema.option_index(name)
    takes_target = schema.options[opt].target_class is not None
    target = _target_from_args(obj.get("args"))
    if isinstance(target, str):
        return Emission(None, "bad_args", target)
    if takes_target and target is None:
        return Emission(None, "bad_args", f"{name} needs a target [x, y]")
    if not takes_target and target is not None:
        return Emission(None, "bad_args", f"{name} takes no target, got {list(target)}")
    for k, inst in enumerate(instances):
        if inst.opt == opt and inst.target == target:
            return Emission(k)
    return Emission(None, "no_such_target", f"{name} has no instance at {target}")




def render_vocabulary(schema: Schema, instances: Sequence[Instance] | None = None) -> str:
    """The action vocabulary shown instead of a menu: every option and its argument form, then,
    given the guardless `instances`, the cells of each target class they cover -- the
    coordinates the state offers, with nothing about which actions are feasible on them."""
    lines = ['Reply with one JSON object, e.g. {"action": "<name>", "args": {"target": [x, y]}}.', "Actions:"]
    for spec in schema.options:
        args = '{"target": [x, y]}' if spec.target_class is not None else "{}"
        what = spec.label.format(target=f"<{spec.target_class}>" if spec.target_class else "").strip()
        lines.append(f'- "{spec.name}" args {args}: {what}')
    if instances is not None:
        cells: dict[str, list[tuple[int, int]]] = {}
        for inst in instances:
            cls = schema.options[inst.opt].target_class
            if cls is not None and inst.target not in cells.setdefault(cls, []):
                cells[cls].append(inst.target)
        lines.append("Target cells (x, y):")
        for cls in dict.fromkeys(s.target_class for s in schema.options if s.target_class is not None):
            where = ", ".join(f"({x}, {y})" for x, y in cells.get(cls, [])) or "none"
            lines.append(f"- <{cls}>: {where}")
    return "\n".join(lines)


@dataclass(frozen=True)
class EmissionTally:
    """Per-agent emission counts of one episode: all [A] int arrays."""

    emitted: np.ndarray
    invalid: np.ndarray
    noop: np.ndarray

    @classmethod
    def zeros(cls, n_agents: int) -> EmissionTally:
        z = np.zeros(n_agents, np.int64)
        return cls(emitted=z, invalid=z.copy(), noop=z.copy())

    def record(self, agent: int, emission: Emission, outcome: int | None) -> EmissionTally:
        """Count one emission; `outcome` is the execution outcome code (None if not executed)."""
        if emission.instance is None and outcome is not None:
            raise ValueError("an invalid emission cannot have an execution outcome")
        if emission.instance is not None and outcome is None:
            raise ValueError("a valid emission needs the outcome of its execution")
        one = np.zeros_like(self.emitted)
        one[agent] = 1
        return EmissionTally(
            emitted=self.emitted + one,
            invalid=self.invalid + one * (emission.instance is None),
            noop=self.noop + one * (outcome is not None and outcome != SUCCESS),
        )

    @property
    def wasted(self) -> np.ndarray:
        """[A] emissions that did nothing useful: invalid plus no-op."""
        return self.invalid + self.noop


class EmissionLedger:
    """The reply bookkeeping every compound-JSON game shares: per-episode `EmissionTally`s and
    the valid emissions awaiting the end of their execution."""

    def reset_ledger(self, n_episodes: int, n_agents: int) -> None:
        self.tallies = [EmissionTally.zeros(n_agents) for _ in range(n_episodes)]
        self._pending: dict[tuple[int, int], Emission] = {}

    def parse_reply(self, k: int, agent: int, reply: str, schema: Schema, instances: Sequence[Instance]) -> int | None:
        """Index into `instances` of the instance the reply names, or None (an invalid emission:
        counted now; the game falls back)."""
        emission = parse_emission(reply, schema, instances)
        if emission.instance is None:
            self.tallies[k] = self.tallies[k].record(agent, emission, None)
        else:
            self._pending[(k, agent)] = emission
        return emission.instance

    def executed(self, k: int, agent: int, outcome: int) -> None:
        """Count the pending emission of (k, agent), whose execution ended with `outcome`
        (nothing pending: the fallback of an invalid emission, already counted)."""
        emission = self._pending.pop((k, agent), None)
        if emission is not None:
            self.tallies[k] = self.tallies[k].record(agent, emission, outcome)

    def pending(self) -> list[tuple[int, int]]:
        """(episode, agent) of every valid emission still executing."""
        return list(self._pending)

    def invalid_counts(self) -> np.ndarray:
        """int [K, A] invalid emissions per episode and agent."""
        return np.stack([t.invalid for t in self.tallies])

    def noop_counts(self) -> np.ndarray:
        """int [K, A] emissions that executed without their promised effect."""
        return np.stack([t.noop for t in self.tallies])
