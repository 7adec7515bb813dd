"""The Melting Pot option-library type: a `Schema` plus each option's executor kind.

A library is an `MPLibrary`: the 4-part contract of `omjax.options.schema` plus, per option,
the executor `kind` (`omjax.options.meltingpot.executor`) and the target class it is
instantiated over, and the game's feature functions (`omjax.options.cleanup`, `harvest`).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable

import numpy as np

from omjax.options.meltingpot.encoding import codec
from omjax.options.records import RecordTable
from omjax.options.schema import Schema
from omjax.options.synthesis import Guard

KINDS = ("eat", "clean", "approach", "fire", "goto", "patch_eat", "wait")


@dataclasses.dataclass(frozen=True)
class MPOption:
    """How one schema option executes: its kind and, for target-less `goto`, its region."""

    kind: str
    region: str | None = None

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"unknown option kind {self.kind!r}; kinds: {', '.join(KINDS)}")


@dataclasses.dataclass(frozen=True)
class MPLibrary:
    """A Melting Pot option library: schema + executor kinds + feature functions.

    The read set (values at initiation) comes in two parts, so a menu of many targets computes
    the target-independent part once: `agent_features(ctx, state, agent, view)` (`view` is
    `targets(ctx, state, agent)`) and `target_features(ctx, state, agent, target_class, target)`;
    `effect_features(ctx, state, ex, target_class)` -> effect-feature values (pre or post);
    `transient_features(ctx, state, agent)` -> dict of logged-only values.
    """

    name: str
    schema: Schema
    options: tuple[MPOption, ...]
    agent_features: Callable
    target_features: Callable
    effect_features: Callable
    transient_features: Callable

    def __post_init__(self):
        if len(self.options) != len(self.schema.options):
            raise ValueError(f"{self.name}: {len(self.options)} executor kinds for {len(self.schema.options)} options")
        for spec, opt in zip(self.schema.options, self.options):
            wants_target = opt.kind in ("eat", "clean", "approach", "patch_eat") or (
                opt.kind == "goto" and opt.region is None)
            if wants_target != (spec.target_class is not None):
                raise ValueError(f"{self.name}: option {spec.name!r} of kind {opt.kind!r} "
                                 f"{'needs' if wants_target else 'takes no'} target class")

    # Value -> code tables of the three feature sets (cached on the frozen instance).
    @functools.cached_property
    def read_codec(self) -> tuple:
        return codec(self.schema.read_set)

    @functools.cached_property
    def effect_codec(self) -> tuple:
        return codec(self.schema.effect_features)

    @functools.cached_property
    def transient_codec(self) -> tuple:
        return codec(self.schema.transient)

    @functools.cached_property
    def kinds(self) -> tuple[str, ...]:
        return tuple(o.kind for o in self.options)

    @functools.cached_property
    def classes(self) -> tuple[str | None, ...]:
        return tuple(s.target_class for s in self.schema.options)


def make_library(game: str, variant: str, options, read_set, effect_set, transient, agent_features,
                 target_features, effect_features, transient_features) -> MPLibrary:
    """A candidate library `<game>/<variant>`: `options` is a tuple of (OptionSpec, MPOption)
    pairs over the game's shared read / effect / transient feature sets."""
    schema = Schema(game=game, options=tuple(spec for spec, _ in options), read_set=read_set,
                    effect_features=effect_set, transient=transient)
    return MPLibrary(name=f"{game}/{variant}", schema=schema, options=tuple(k for _, k in options),
                     agent_features=agent_features, target_features=target_features,
                     effect_features=effect_features, transient_features=transient_features)


def to_union(union: Schema, lib: MPLibrary, table: RecordTable) -> RecordTable:
    """Records of a candidate library re-indexed to the union schema's option order (what files store)."""
    index = np.array([union.option_index(s.name) for s in lib.schema.options], np.int16)
    return dataclasses.replace(table, opt=index[table.opt])


def own_guards(lib: MPLibrary, guards: list[Guard]) -> list[Guard]:
    """The guards that concern this library's options (a union guard file may hold several libraries)."""
    names = set(lib.schema.option_names)
    return [g for g in guards if g.opt in names]
