"""Flax (pure-function) text decoders for the policy LLMs, their loader and functional LoRA.

Entry points:
- `load(path_or_name, dtype=...)` -> `Model` with `.config`, `.params`, `.tokenizer`, `.logits`.
- `family(model_type)` -> the family module for an HF `model_type`.
- `memory_estimate(cfg, n_agents, lora_rank, batch, seq)` -> bytes per component.
- `omjax.models.lora` (adapters), `omjax.models.inference` (sampling, menu scoring, log-probs).

Family contract (one module per HF `model_type`, registered in `FAMILIES`):

    Config                      frozen, hashable dataclass (a jit static argument); has
                                `vocab_size`, `num_layers` and `n_params` (frozen-base count)
    config_from_hf(hf: dict) -> Config
    params_from_hf(cfg, get, dtype) -> params pytree
        `get(name)` returns the HF tensor called `name` (raises naming it if missing); each
        tensor's shape is checked with `base.take` (error names the tensor). Linear weights
        are `[D_in, D_out]`; `params["layers"]` is a layer stack `{name: [L, ...]}` (dense) or one
        stack per layer kind `{kind: {name: [N_kind, ...]}}` (qwen3_5, gemma4).
    lora_shapes(cfg) -> [{target: (d_in, d_out)}] per layer, targets among q k v o gate up down
    init_cache(cfg, batch, max_len, dtype) -> cache (see `omjax.models.base`)
    forward(params, cfg, tokens[B, T] int32, *, attention_mask[B, T] | None = None,
            lora | None = None, lora_scale: float = 1.0, cache | None = None,
            last_only: bool | int = False, remat: bool | int = False) -> (logits f32, cache)
        logits are `[B, T, V]`, or `[B, n, V]` (the final n positions) with `last_only=n`
        (True is 1). Mask values >= 2 mark branches (`base.token_positions`) in families whose
        `SEGMENTS` is True; a recurrent family (`SEGMENTS = False`) cannot run them. Padding
        is on the left whenever a cache or `last_only` is used. `lora` is one adapter tree
        `{"layers": {group: {target: {"a", "b"}}}}` (no agent axis; `omjax.models.lora`); `remat` wraps each layer in
        `jax.checkpoint` (an int n: the bottom n layers only, `base.remat_below`). The returned cache is None when no cache was passed.
    trunk(params, cfg, tokens, *, attention_mask, n_layers) -> base.Trunk
        the frozen base's residual stream entering layer `n_layers`; `forward(..., trunk=)`
        continues from it (the update's frozen layers under `lora.top_layers`).
    forward_and_trunk(params, cfg, tokens, *, n_layers, **forward kwargs) -> (logits, cache, Trunk)
        or None: `forward` that also returns the trunk of its tokens (with a cache, of the
        tokens after it), so rollouts hand the update the trunk they already computed.
    TRUNK_CACHE: bool
        whether `forward(..., trunk=, cache=)` continues a cache chunk by chunk from a trunk
        (every chunk from a trunk at the same layer; what `lora.scope=reply` runs).
"""

from omjax.models.families import FAMILIES, family
from omjax.models.loader import load
from omjax.models.memory import memory_estimate

__all__ = ["FAMILIES", "family", "load", "memory_estimate"]
