"""The `llama` family (SmolLM2, Llama 2/3): a dense GQA decoder, see `omjax.models.dense`."""

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
    return dense_config_from_hf(hf_config, "llama", qk_norm=False)
