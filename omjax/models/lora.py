"""Functional LoRA: adapters are plain pytrees, the frozen base never changes.

Adapter tree for one agent: the adapted decoder layers stacked on a layer axis, one stack per
layer group (layers whose adapted targets have the same shapes),
`{"layers": {group: {target: {"a": [N, d_in, r], "b": [N, r, d_out]}}}}`, the group's
adapted layers bottom first. A dense model has one group; Qwen3.5 one for its Gated DeltaNet
layers and one for its full-attention layers; gemma-4 one per head size. The targets are those
of `LoRAConfig.targets` that the family has in a layer (`family.lora_shapes(cfg)`); with
`lora.top_layers` only the top layers are adapted, so a group's stack holds its top `N` layers.
`slots` maps each decoder layer to its (group, index) (the scanned forward slices the stacks
with it); `to_layers` / `from_layers` convert to and from the per-layer list of dicts that
adapters used before they were stacked (commit 0c199d5 and earlier). `b` starts at zero so a
fresh adapter leaves the base unchanged; `a` is drawn from the seed (Kaiming-uniform, as
`peft` does).

The per-agent bank is the same tree with a leading agent axis `[A, ...]` on every leaf;
`jax.vmap` over that axis runs A private adapters on one frozen base in one call (see
`omjax.models.inference`). A shared adapter is simply `n_agents = 1`.

The scale `alpha / rank` lives in `LoRAConfig` (static), not in the tree, so gradients and
optimizer states only ever see `a` and `b`.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import jax
import jax.numpy as jnp

from omjax.config import LORA_TARGETS, LoRAConfig

def linear(x: jax.Array, w: jax.Array, lora_ab: dict | None, scale: float) -> jax.Array:
    """`x @ w + (x @ a) @ b * scale`; just `x @ w` when `lora_ab` is None.

    x: [..., d_in]; w: [d_in, d_out]; a: [d_in, r]; b: [r, d_out]. The low-rank path never
    materialises `a @ b`, so its cost is r * (d_in + d_out) per token.
    """
    y = x @ w
    if lora_ab is None:
        return y
    delta = (x @ lora_ab["a"].astype(x.dtype)) @ lora_ab["b"].astype(x.dtype)
    return y + (delta * scale).astype(y.dtype)


def init_lora(key: jax.Array, shapes: list[dict[str, tuple[int, int]]], cfg: LoRAConfig,
              n_agents: int = 1, dtype=jnp.float32) -> dict:
    """A bank of `n_agents` fresh adapters: leaves `a [A, N, d_in, r]`, `b [A, N, r, d_out]`
    (zeros), one stack per layer group (see the module docstring).

    `shapes` comes from `family.lora_shapes(model_cfg)`; with `cfg.top_layers` only the last
    that many layers get adapters. Each agent's `a` gets its own key, so agents start from
    different adapters (the symmetry-breaking channel of paper §6.1); layer `li`'s draw depends
    on the key, `li` and the target only, so it does not depend on the stacking.
    """
    if n_agents < 1:
        raise ValueError(f"n_agents must be >= 1, got {n_agents}")
    if cfg.top_layers > len(shapes):
        raise ValueError(f"lora.top_layers={cfg.top_layers} but the backbone has {len(shapes)} layers")
    first = len(shapes) - cfg.top_layers if cfg.top_layers else 0
    layers = []
    for li, layer_shapes in enumerate(shapes):
        entry = {}
        for target in cfg.targets:
            if target not in layer_shapes or li < first:
                continue
            d_in, d_out = layer_shapes[target]
            k = jax.random.fold_in(jax.random.fold_in(key, li), LORA_TARGETS.index(target))
            # peft's default: kaiming_uniform(a=sqrt(5)) on A, i.e. U(-1/sqrt(d_in), 1/sqrt(d_in)).
            bound = 1.0 / jnp.sqrt(d_in)
            a = jax.random.uniform(k, (n_agents, d_in, cfg.rank), dtype, -bound, bound)
            entry[target] = {"a": a, "b": jnp.zeros((n_agents, cfg.rank, d_out), dtype)}
        layers.append(entry)
    if not any(layers):
        raise ValueError(f"none of the LoRA targets {cfg.targets} exist in this model")
    return from_layers({"layers": layers}, agent_axis=True)


def group_name(layer: dict[str, tuple[int, int]]) -> str:
    """The group of a layer whose adapted targets have shapes `{target: (d_in, d_out)}`, e.g.
    `"q576x576_v576x192"` (targets in `LORA_TARGETS` order)."""
    return "_".join(f"{t}{layer[t][0]}x{layer[t][1]}" for t in LORA_TARGETS if t in layer)


def stack_size(group: dict) -> int:
    """Layers in one group's stack (`a`'s third axis from the end: `[A,] N, d_in, r`)."""
    return int(next(iter(group.values()))["a"].shape[-3])


def slots(lora_layers: dict, shapes: list[dict[str, tuple[int, int]]]) -> list[tuple[str, int] | None]:
    """Per decoder layer, `(group, index into that group's stack)`, or None for a layer without
    an adapter. `lora_layers`: an adapter's or bank's `["layers"]`; `shapes`: the family's
    `lora_shapes`. A group of N layers adapts the top N layers of its shape (`lora.top_layers`
    adapts a model's top layers). Raises ValueError when the adapter does not fit the model."""
    targets = {t for group in lora_layers.values() for t in group}
    names = [group_name({t: s for t, s in layer.items() if t in targets}) for layer in shapes]
    out: list[tuple[str, int] | None] = [None] * len(shapes)
    for group, stacked in lora_layers.items():
        ids = [i for i, n in enumerate(names) if n == group]
        n = stack_size(stacked)
        if n > len(ids):
            raise ValueError(f"LoRA group {group!r} holds {n} layers, the model has {len(ids)} of that shape")
        for j, i in enumerate(ids[len(ids) - n:]):
            out[i] = (group, j)
    return out


def from_layers(adapter: dict, *, agent_axis: bool = False) -> dict:
    """The stacked layout of an adapter (or, with `agent_axis`, a bank) in the per-layer list
    layout `{"layers": [{target: {"a", "b"}}, ...]}` that adapters had before they were stacked
    (the old checkpoints' layout). Layers without an adapter hold `{}`; an adapted layer below
    one without (not a top-layers adapter) cannot be stacked and raises ValueError."""
    lead = 1 if agent_axis else 0
    groups: dict[str, list[dict]] = {}
    seen_adapted = False
    for i, layer in enumerate(adapter["layers"]):
        if not layer:
            if seen_adapted:
                raise ValueError(f"LoRA layer {i} has no adapter but a layer below it has one; only the top "
                                 "layers of a model can be adapted")
            continue
        seen_adapted = True
        shapes = {t: (int(ab["a"].shape[lead]), int(ab["b"].shape[lead + 1])) for t, ab in layer.items()}
        groups.setdefault(group_name(shapes), []).append(layer)
    return {"layers": {g: jax.tree.map(lambda *xs: jnp.stack(xs, axis=lead), *ls) for g, ls in groups.items()}}


def to_layers(adapter: dict, shapes: list[dict[str, tuple[int, int]]], *, agent_axis: bool = False) -> list[dict]:
    """An adapter's (or, with `agent_axis`, a bank's) per-layer view: `[{target: {"a", "b"}}]`
    per decoder layer (`{}` where none), e.g. to merge it into a transformers model."""
    axis = 1 if agent_axis else 0
    return [{} if slot is None else jax.tree.map(lambda x: jnp.take(x, slot[1], axis=axis),
                                                 adapter["layers"][slot[0]])
            for slot in slots(adapter["layers"], shapes)]


def first_adapted(lora_layers: dict, shapes: list[dict[str, tuple[int, int]]]) -> int:
    """The lowest decoder layer with an adapter (`len(shapes)` when none)."""
    return next((i for i, s in enumerate(slots(lora_layers, shapes)) if s is not None), len(shapes))


def agent(bank: dict, i: int) -> dict:
    """Agent `i`'s adapter (the bank without its leading axis)."""
    return jax.tree.map(lambda x: x[i], bank)


def stack(adapters: list[dict]) -> dict:
    """Stack single-agent adapters into a bank with a leading agent axis."""
    return jax.tree.map(lambda *xs: jnp.stack(xs), *adapters)


def save(path: str | Path, bank: dict, cfg: LoRAConfig) -> None:
    """Write an adapter bank and its config with orbax (directory `path`, overwritten)."""
    import orbax.checkpoint as ocp

    path = Path(path).absolute()
    with ocp.StandardCheckpointer() as ckpt:
        ckpt.save(path / "adapters", bank, force=True)
    (path / "lora_config.json").write_text(
        json.dumps(dataclasses.asdict(cfg)))


def restore(path: str | Path) -> tuple[dict, LoRAConfig]:
    """Read back what `save` wrote: `(bank, LoRAConfig)`."""
    import orbax.checkpoint as ocp

    path = Path(path).absolute()
    if not (path / "lora_config.json").exists():
        raise FileNotFoundError(f"no LoRA checkpoint at {path} (lora_config.json missing)")
    raw = json.loads((path / "lora_config.json").read_text())
    cfg = LoRAConfig(**raw)
    with ocp.StandardCheckpointer() as ckpt:
        bank = _relist(ckpt.restore(path / "adapters"))
    if isinstance(bank.get("layers"), list):            # written before the layers were stacked
        bank = from_layers(bank, agent_axis=True)
    return bank, cfg


def _relist(tree):
    """orbax may hand lists back as dicts keyed "0", "1", ...; restore the list structure."""
    if isinstance(tree, dict):
        if tree and all(isinstance(k, str) and k.isdigit() for k in tree):
            return [_relist(tree[str(i)]) for i in range(len(tree))]
        return {k: _relist(v) for k, v in tree.items()}
    if isinstance(tree, list):
        return [_relist(v) for v in tree]
    return tree
