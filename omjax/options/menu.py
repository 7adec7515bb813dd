"""Menu assembly (paper §5.1 Stage 4): instantiate per target, hide guarded instances, shuffle letters.

Python path (one agent, one decision):

    instances = instantiate(schema, targets_by_class)          # one per target, never nearest-only
    hidden = hidden_mask(schema, guards, instances, feats, live)  # bool [I]
    items = assemble_menu(schema, guards, instances, feats, live, rng)  # lettered, shuffled

`feats` int [I, F] are the read-set codes of each instance for the deciding agent; `live`
bool [I, R] says, per instance and `Reason`, whether the raw executor would fail with that reason
right now (NoPath by the planner, NothingHeld by the held item, ...). An explicit guard hides an
instance only when its reason fails live; an inferred guard hides it when all its literals hold.

JAX path (a batch, one jitted call): `GuardTable.from_guards(schema, guards)` compiles the guards to
literal tables (a pytree, so it may be a traced argument) and `hidden_mask_jax(table, inst_opt, feats, live)` evaluates every guard for
`[..., I]` (e.g. `[envs, agents, instances]`). Letters: `letter_ranks_jax(key, visible)`; back on
the host, `items_from_ranks(schema, instances, ranks[e, a])` gives that agent's `MenuItem`s.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from omjax.config import MENU_FORMATS
from omjax.options.schema import Reason, Schema
from omjax.options.synthesis import Guard, validate_guard

MAX_LITERALS = 2


@dataclasses.dataclass(frozen=True)
class Instance:
    """One menu entry candidate: option index and its target ((x, y) or None)."""

    opt: int
    target: tuple[int, int] | None


@dataclasses.dataclass(frozen=True)
class MenuItem:
    """A visible menu entry as shown to the LLM."""

    letter: str
    index: int  # index into the instance list
    opt: str
    target: tuple[int, int] | None
    label: str


def instantiate(schema: Schema, targets_by_class: dict[str, list[tuple[int, int]]]) -> list[Instance]:
    """One instance per target of each option's class (target-less options: one instance)."""
    out = []
    for o, spec in enumerate(schema.options):
        if spec.target_class is None:
            out.append(Instance(o, None))
            continue
        if spec.target_class not in targets_by_class:
            raise ValueError(f"{schema.game}: no targets given for class {spec.target_class!r} "
                             f"(option {spec.name!r}); classes given: {sorted(targets_by_class)}")
        out += [Instance(o, (int(t[0]), int(t[1]))) for t in targets_by_class[spec.target_class]]
    return out


def label(schema: Schema, inst: Instance) -> str:
    spec = schema.options[inst.opt]
    target = "" if inst.target is None else f"({inst.target[0]}, {inst.target[1]})"
    return spec.label.format(target=target)


def letter(i: int) -> str:
    """0 -> A, 25 -> Z, 26 -> AA, ... (spreadsheet column names)."""
    if i < 0:
        raise ValueError(f"letter index must be >= 0, got {i}")
    out = ""
    i += 1
    while i:
        i, r = divmod(i - 1, 26)
        out = chr(ord("A") + r) + out
    return out


def guard_hides(schema: Schema, guard: Guard, inst: Instance, feats, live) -> bool:
    """Python evaluator of one guard on one instance (features int [F], live bool [R])."""
    if schema.options[inst.opt].name != guard.opt:
        return False
    if guard.channel == "explicit":
        return bool(live[guard.reason])
    return all(int(feats[schema.read_index(n)]) == schema.read_feature(n).code(v) for n, v in guard.when.items())


def hidden_mask(schema: Schema, guards: list[Guard], instances: list[Instance], feats, live) -> np.ndarray:
    """bool [I]: instances hidden by at least one guard.

    The guards are compiled once to literal tables (`_compiled_guards`) and evaluated for all
    instances with NumPy; `hidden_mask_reference` is the same rule guard by guard, instance by
    instance, and the fallback for guard lists that do not compile (unknown features or values,
    which it reports only for options that have instances)."""
    feats = np.asarray(feats)
    live = np.asarray(live, bool)
    _check_shapes(schema, instances, feats, live)
    table = _compiled_guards(schema, guards)
    if table is None:
        return hidden_mask_reference(schema, guards, instances, feats, live)
    if not instances:
        return np.zeros(0, bool)
    opt, feat, value, explicit = table
    inst_opt = np.fromiter((inst.opt for inst in instances), np.int64, len(instances))
    out = np.any(explicit[inst_opt] & live, axis=-1)
    if len(opt):
        got = feats[:, np.maximum(feat, 0)]  # [I, G, L]
        lit_ok = (got == value) | (feat < 0)
        out |= np.any(np.all(lit_ok, axis=-1) & (inst_opt[:, None] == opt[None, :]), axis=-1)
    return out


def _check_shapes(schema: Schema, instances: list[Instance], feats: np.ndarray, live: np.ndarray) -> None:
    if feats.shape != (len(instances), len(schema.read_set)):
        raise ValueError(f"feats must be [I={len(instances)}, F={len(schema.read_set)}], got {feats.shape}")
    if live.shape != (len(instances), len(Reason)):
        raise ValueError(f"live must be [I={len(instances)}, R={len(Reason)}], got {live.shape}")


def hidden_mask_reference(schema: Schema, guards: list[Guard], instances: list[Instance], feats, live) -> np.ndarray:
    """`hidden_mask` evaluated guard by guard with `guard_hides` (the definition)."""
    feats = np.asarray(feats)
    live = np.asarray(live, bool)
    _check_shapes(schema, instances, feats, live)
    by_opt: dict[str, list[Guard]] = {}
    for g in guards:
        by_opt.setdefault(g.opt, []).append(g)
    out = np.zeros(len(instances), bool)
    for i, inst in enumerate(instances):
        for g in by_opt.get(schema.options[inst.opt].name, ()):
            if guard_hides(schema, g, inst, feats[i], live[i]):
                out[i] = True
                break
    return out


_COMPILED: dict[tuple, tuple] = {}
_COMPILED_MAX = 256


def _compiled_guards(schema: Schema, guards: list[Guard]):
    """(opt int [G], feat int [G, L] (-1: unused slot), value int [G, L], explicit bool [O, R]) of
    the guards, or None if some guard does not compile. Memoised on the identity of the schema
    and of the guard objects (guards are frozen; the cache keeps them alive)."""
    key = (id(schema), *map(id, guards))
    hit = _COMPILED.get(key)
    if hit is not None:
        return hit[2]
    try:
        table = _compile_guards(schema, guards)
    except (KeyError, ValueError, TypeError, IndexError):
        table = None
    if len(_COMPILED) >= _COMPILED_MAX:
        _COMPILED.clear()
    _COMPILED[key] = (schema, tuple(guards), table)
    return table


def _compile_guards(schema: Schema, guards: list[Guard]):
    names = schema.option_names
    explicit = np.zeros((len(names), len(Reason)), bool)
    inferred = []
    for g in guards:
        if g.opt not in names:
            continue  # matches no instance of this schema
        o = names.index(g.opt)
        if g.channel == "explicit":
            explicit[o, int(g.reason)] = True
        else:
            inferred.append((o, [(schema.read_index(n), schema.read_feature(n).code(v)) for n, v in g.when.items()]))
    width = max([len(lits) for _, lits in inferred], default=0)
    opt = np.array([o for o, _ in inferred], np.int64)
    feat = np.full((len(inferred), width), -1, np.int64)
    value = np.zeros((len(inferred), width), np.int64)
    for k, (_, lits) in enumerate(inferred):
        for s, (f, v) in enumerate(lits):
            feat[k, s], value[k, s] = f, v
    return opt, feat, value, explicit


_LETTERS = [letter(i) for i in range(702)]  # A .. ZZ


def _letter(i: int) -> str:
    return _LETTERS[i] if i < len(_LETTERS) else letter(i)


def assemble_menu(schema: Schema, guards: list[Guard], instances: list[Instance], feats, live,
                  rng: np.random.Generator, exists=None) -> list[MenuItem]:
    """Visible instances with shuffled letters; `exists` bool [I] masks absent targets (default all)."""
    visible = ~hidden_mask(schema, guards, instances, feats, live)
    if exists is not None:
        visible &= np.asarray(exists, bool)
    idx = np.nonzero(visible)[0]
    order = rng.permutation(len(idx))  # letter k goes to idx[order[k]]
    items = [None] * len(idx)
    options = schema.options
    for k, i in enumerate(idx[order].tolist()):
        inst = instances[i]
        items[k] = MenuItem(_letter(k), i, options[inst.opt].name, inst.target, label(schema, inst))
    return items


def items_from_ranks(schema: Schema, instances: list[Instance], ranks) -> list[MenuItem]:
    """Host side of the JAX path: one agent's `letter_ranks_jax` row [I] as lettered MenuItems."""
    ranks = np.asarray(ranks)
    if ranks.shape != (len(instances),):
        raise ValueError(f"ranks must be [I={len(instances)}], got {ranks.shape}")
    shown = np.nonzero(ranks >= 0)[0]
    shown = shown[np.argsort(ranks[shown])]
    if not np.array_equal(ranks[shown], np.arange(len(shown))):
        raise ValueError(f"ranks of shown instances must be 0..{len(shown) - 1}, got {sorted(ranks[shown])}")
    return [MenuItem(letter(k), int(i), schema.options[instances[i].opt].name, instances[i].target,
                     label(schema, instances[i])) for k, i in enumerate(shown)]


def check_menu_format(menu_format: str) -> None:
    """ValueError naming the known formats unless `menu_format` is one (`env.menu_format`)."""
    if menu_format not in MENU_FORMATS:
        raise ValueError(f"unknown menu format {menu_format!r}; known: {', '.join(MENU_FORMATS)}")


def render_menu(items: list[MenuItem], menu_format: str = "letter_first") -> str:
    """The menu's lines. Under `letter_last` each line ends in its letter as the reply writes it
    (SmolLM2 tokenises the ` A` of `choice: A` and of `label -> A` alike, and the `A` at a line's
    start differently: `tests/models/test_smollm2.py`), so choosing an entry can be a copy of the
    token after its label."""
    check_menu_format(menu_format)
    if menu_format == "letter_last":
        return "\n".join(f"{it.label} -> {it.letter}" for it in items)
    return "\n".join(f"{it.letter}) {it.label}" for it in items)


def episode_rng(seed: int, agent: int) -> np.random.Generator:
    """The per-episode, per-agent letter RNG; draw one permutation per decision from it."""
    return np.random.default_rng([int(seed), int(agent)])


# ---------------------------------------------------------------------- JAX
@struct.dataclass
class GuardTable:
    """Guards compiled to literal tables. G inferred guards, L = 2 literal slots, O options, R reasons."""

    opt: np.ndarray  # int32 [G]
    feat: np.ndarray  # int32 [G, L] read-set feature index; -1 = unused slot (always true)
    value: np.ndarray  # int32 [G, L]
    explicit: np.ndarray  # bool [O, R] option o hides when reason r fails live

    @classmethod
    def from_guards(cls, schema: Schema, guards: list[Guard]) -> "GuardTable":
        inferred = [validate_guard(g, schema) for g in guards if g.channel == "inferred"]
        explicit = np.zeros((len(schema.options), len(Reason)), bool)
        for g in guards:
            if g.channel == "explicit":
                explicit[schema.option_index(validate_guard(g, schema).opt), g.reason] = True
        feat = np.full((len(inferred), MAX_LITERALS), -1, np.int32)
        value = np.zeros((len(inferred), MAX_LITERALS), np.int32)
        opt = np.zeros(len(inferred), np.int32)
        for k, g in enumerate(inferred):
            if len(g.when) > MAX_LITERALS:
                raise ValueError(f"guard {g.to_dict()} has more than {MAX_LITERALS} literals")
            opt[k] = schema.option_index(g.opt)
            for s, (name, val) in enumerate(sorted(g.when.items())):
                feat[k, s] = schema.read_index(name)
                value[k, s] = schema.read_feature(name).code(val)
        return cls(opt=opt, feat=feat, value=value, explicit=explicit)


def hidden_mask_jax(table: GuardTable, inst_opt, feats, live):
    """bool [..., I]. inst_opt int [I]; feats int [..., I, F]; live bool [..., I, R]."""
    inst_opt = jnp.asarray(inst_opt)
    feats = jnp.asarray(feats)
    # Inferred: gather each guard's literal features for every instance: [..., I, G, L].
    lit_feat = jnp.maximum(jnp.asarray(table.feat), 0)  # [G, L]
    got = jnp.take(feats, lit_feat.reshape(-1), axis=-1)  # [..., I, G*L]
    got = got.reshape(got.shape[:-1] + lit_feat.shape)  # [..., I, G, L]
    lit_ok = (got == jnp.asarray(table.value)) | (jnp.asarray(table.feat) < 0)  # [..., I, G, L]
    applies = inst_opt[:, None] == jnp.asarray(table.opt)[None, :]  # [I, G]
    inferred = jnp.any(jnp.all(lit_ok, axis=-1) & applies, axis=-1)  # [..., I]
    explicit = jnp.any(jnp.asarray(table.explicit)[inst_opt] & jnp.asarray(live, bool), axis=-1)
    return inferred | explicit


def letter_ranks_jax(key, visible):
    """int32 [..., I]: letter index of each visible instance (a uniform shuffle), -1 if hidden."""
    u = jax.random.uniform(key, visible.shape)
    score = jnp.where(visible, u, 2.0)  # hidden instances sort last
    rank = jnp.argsort(jnp.argsort(score, axis=-1), axis=-1)
    return jnp.where(visible, rank, -1).astype(jnp.int32)
