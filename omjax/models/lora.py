"""Functional LoRA: adapters are plain pytrees, the frozen base never changes.

Adapter tree for one agent: `{"layers": [{target: {"a": [d_in, r], "b": [r, d_out]}}, ...]}`,
one dict per decoder layer, holding the targets named in `LoRAConfig.targets` that the family
has in that layer (`family.lora_shapes(cfg)`). `b` starts at zero so a fresh adapter leaves the
base unchanged; `a` is drawn from the seed (Kaiming-uniform, as `peft` does).

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
    """A bank of `n_agents` fresh adapters: leaves `a [A, d_in, r]`, `b [A, r, d_out]` (zeros).

    `shapes` comes from `family.lora_shapes(model_cfg)`; with `cfg.top_layers` only the last
    that many layers get adapters (the others hold none). Each agent's `a` gets its own key, so
    agents start from different adapters (the symmetry-breaking channel of paper §6.1).
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
    return {"layers": layers}


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
        bank = ckpt.restore(path / "adapters")
    return _relist(bank), cfg


def _relist(tree):
    """orbax may hand lists back as dicts keyed "0", "1", ...; restore the list structure."""
    if isinstance(tree, dict):
        if tree and all(isinstance(k, str) and k.isdigit() for k in tree):
            return [_relist(tree[str(i)]) for i in range(len(tree))]
        return {k: _relist(v) for k, v in tree.items()}
    if isinstance(tree, list):
        return [_relist(v) for v in tree]
    return tree
