"""Training-memory arithmetic for a frozen base + per-agent LoRA (paper §6.1: one H100).

Counted from parameter counts and shapes, not measured. Components:
- base: the frozen weights (`cfg.n_params` x `base_bytes`; bf16 = 2 bytes). No gradient or
  optimizer state: only LoRA leaves are trained.
- lora: per agent, `rank * (d_in + d_out)` per adapted projection; stored f32 with an f32
  gradient and Adam's two f32 moments (4 copies), times `n_agents`.
- activations: what the backward pass keeps for one agent's micro-batch `[batch, seq]`. With
  `remat` (one `jax.checkpoint` per layer) that is each layer's input `[B, T, D]` plus the
  live internals of the one layer being recomputed; without it every layer's internals; with
  `remat` an int k, the bottom k layers recomputed and the others' internals kept.
  Layer internals: q/k/v/o and attention output, the SwiGLU gate/up/product (`3 * F`), the
  f32 attention probabilities `[B, H, T, T]` (no flash attention on this path), and the LoRA
  bottlenecks. By default agents' micro-batches run one after another; with
  `parallel_agents=True` (one vmapped call over the bank) activations and logits scale with
  the number of agents.
- logits: f32 choice-position logits `[B, V]` only (menu scoring uses `last_only`).
- kv_cache: rollout-time cache for `batch` prompts of `seq` tokens per agent (bf16).
"""

from __future__ import annotations

import sys

from omjax.models.base import remat_below

GIB = 1024 ** 3


def _lora_shapes(cfg) -> list[dict[str, tuple[int, int]]]:
    return sys.modules[type(cfg).__module__].lora_shapes(cfg)


def memory_estimate(cfg, n_agents: int, lora_rank: int, batch: int, seq: int, *,
                    base_bytes: int = 2, act_bytes: int = 2, remat: bool | int = True,
                    parallel_agents: bool = False) -> dict:
    """Bytes per component and the total (see the module docstring); also `*_gib` keys.

    cfg: any family `Config` (needs `n_params`, `num_layers`, `hidden_size`,
    `intermediate_size`, `num_heads`, `num_kv_heads`, `head_dim`, `vocab_size`).
    """
    for name, v in (("n_agents", n_agents), ("lora_rank", lora_rank), ("batch", batch), ("seq", seq)):
        if v < 1:
            raise ValueError(f"{name} must be >= 1, got {v}")
    shapes = _lora_shapes(cfg)
    lora_params = sum(lora_rank * (i + o) for layer in shapes for i, o in layer.values())
    d, f, L = cfg.hidden_size, cfg.intermediate_size, cfg.num_layers
    h, hkv, dh = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
    tokens = batch * seq
    per_layer_internals = (
        tokens * (4 * d + 2 * h * dh + 2 * hkv * dh + 3 * f) * act_bytes
        + batch * h * seq * seq * 4
        + tokens * lora_rank * 7 * 4)
    layer_inputs = L * tokens * d * act_bytes
    k = remat_below(remat, L)  # layers recomputed
    # Recomputed layers keep their inputs and, one at a time, their internals; the rest keep all.
    acts = layer_inputs + (L - k) * per_layer_internals + (per_layer_internals if k else 0)
    acts *= n_agents if parallel_agents else 1
    out = {
        "base": cfg.n_params * base_bytes,
        "lora": n_agents * lora_params * 4 * 4,
        "activations": acts,
        "logits": (n_agents if parallel_agents else 1) * batch * cfg.vocab_size * 4,
        "kv_cache": n_agents * 2 * L * batch * seq * hkv * dh * base_bytes,
        "lora_params_per_agent": lora_params,
        "base_params": cfg.n_params,
    }
    out["total"] = sum(out[k] for k in ("base", "lora", "activations", "logits", "kv_cache"))
    for k in ("base", "lora", "activations", "logits", "kv_cache", "total"):
        out[k + "_gib"] = out[k] / GIB
    return out
