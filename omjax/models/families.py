"""The model families: one module per HF `model_type` (the contract is in `omjax.models`)."""

from __future__ import annotations

import importlib
from types import ModuleType

FAMILIES: dict[str, str] = {
    "llama": "omjax.models.llama",
    "qwen3": "omjax.models.qwen3",
    "qwen3_5": "omjax.models.qwen3_5",
    "qwen3_5_text": "omjax.models.qwen3_5",
    "gemma4": "omjax.models.gemma4",
    "gemma4_text": "omjax.models.gemma4",
}


def family(model_type: str) -> ModuleType:
    """The family module for an HF `model_type` (imported on first use)."""
    if model_type not in FAMILIES:
        raise ValueError(f"unsupported model_type {model_type!r}; supported: {sorted(FAMILIES)}")
    return importlib.import_module(FAMILIES[model_type])
