"""The `qwen3` family (Qwen3-4B-Instruct-2507 and kin): the dense decoder of
`omjax.models.dense` with per-head RMSNorm on queries and keys."""

from __future__ import annotations

from omjax.models.dense import DenseConfig as Config
from omjax.models.dense import (dense_config_from_hf, forward, forward_and_trunk, init_cache, lora_shapes,
                                params_from_hf, trunk)

__all__ = ["SEGMENTS", "Config", "config_from_hf", "params_from_hf", "lora_shapes", "forward", "init_cache", "trunk",
           "forward_and_trunk", "TRUNK_CACHE"]

SEGMENTS = True
"""Whether `forward` honours branch masks (`omjax.models.base.token_positions`)."""

TRUNK_CACHE = True
"""Whether `forward` continues a cache from a trunk (`lora.scope=reply` with `lora.top_layers`)."""


def config_from_hf(hf_config: dict) -> Config:
    if hf_config.get("use_sliding_window"):
        raise ValueError("qwen3 with use_sliding_window=True is not supported")
    return dense_config_from_hf(hf_config, "qwen3", qk_norm=True)
