"""Published `config.json` dicts of the paper's four backbones, and random-weight models at their
real shapes (no hub access needed): what `python -m omjax.bench gpu` builds.

    cfg_dict = published("qwen3-4b-instruct-2507")      # the hub config.json as a dict
    model = random_model("gemma-4-e2b-it", jnp.bfloat16) # Model at the real shapes, random weights
    model = random_model("qwen3.5-2b", tiny=True)        # same architecture, test-sized

The numbers were written from the published config.json files (no network here); each dict
names its hub repository. Only fields the omjax families read (`config_from_hf`) and the ones
transformers needs to build the same architecture are kept. A user with the snapshot can check
one with `omjax.models.load_config(<snapshot>)` against `config(name)`.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from omjax.models import family as _family
from omjax.models.loader import Model

_SLIDING, _FULL = "sliding_attention", "full_attention"


def _gemma4(*, hidden_size: int, intermediate_size: int, num_hidden_layers: int, num_key_value_heads: int,
            sliding_per_full: int, num_kv_shared_layers: int, use_double_wide_mlp: bool) -> dict:
    """A gemma-4 E-series config.json: the sizes that differ between E2B and E4B, the rest shared."""
    return {
        "model_type": "gemma4", "architectures": ["Gemma4ForConditionalGeneration"],
        "tie_word_embeddings": True,
        "text_config": {
            "model_type": "gemma4_text", "vocab_size": 262144, "hidden_size": hidden_size,
            "intermediate_size": intermediate_size, "num_hidden_layers": num_hidden_layers,
            "num_attention_heads": 8, "num_key_value_heads": num_key_value_heads, "head_dim": 256,
            "global_head_dim": 512, "attention_k_eq_v": False, "sliding_window": 512,
            "layer_types": ([_SLIDING] * sliding_per_full + [_FULL]) * (num_hidden_layers // (sliding_per_full + 1)),
            "num_kv_shared_layers": num_kv_shared_layers, "use_double_wide_mlp": use_double_wide_mlp,
            "vocab_size_per_layer_input": 262144, "hidden_size_per_layer_input": 256,
            "hidden_activation": "gelu_pytorch_tanh", "rms_norm_eps": 1e-6,
            "final_logit_softcapping": 30.0, "max_position_embeddings": 131072,
            "tie_word_embeddings": True, "enable_moe_block": False,
            "rope_parameters": {
                _SLIDING: {"rope_type": "default", "rope_theta": 10000.0},
                _FULL: {"rope_type": "proportional", "partial_rotary_factor": 0.25,
                        "rope_theta": 1000000.0},
            },
        },
    }


PUBLISHED: dict[str, dict[str, Any]] = {
    # Qwen/Qwen3-4B-Instruct-2507, config.json: dense Qwen3 decoder, GQA 32/8, head_dim 128,
    # tied embeddings, 262k context with rope_theta 5e6 (the 2507 refresh of Qwen3-4B).
    "qwen3-4b-instruct-2507": {
        "model_type": "qwen3", "architectures": ["Qwen3ForCausalLM"],
        "vocab_size": 151936, "hidden_size": 2560, "intermediate_size": 9728,
        "num_hidden_layers": 36, "num_attention_heads": 32, "num_key_value_heads": 8,
        "head_dim": 128, "hidden_act": "silu", "rms_norm_eps": 1e-6, "rope_theta": 5000000,
        "rope_scaling": None, "max_position_embeddings": 262144, "tie_word_embeddings": True,
        "attention_bias": False, "use_sliding_window": False, "sliding_window": None,
        "bos_token_id": 151643, "eos_token_id": 151645,
    },
    # Qwen/Qwen3.5-2B, config.json `text_config` (the checkpoint is Qwen3_5ForConditionalGeneration;
    # omjax reads the text decoder): 24 layers, 3 Gated DeltaNet : 1 gated full attention
    # (full_attention_interval 4), hidden 2048, full attention 8 heads / 2 KV heads of 256 with
    # partial rotary 0.25 (rope_theta 1e7, vocab 248320, as across the Qwen3.5 family);
    # DeltaNet 16 key / 16 value heads of 128, conv kernel 4; tied embeddings.
    "qwen3.5-2b": {
        "model_type": "qwen3_5", "architectures": ["Qwen3_5ForConditionalGeneration"],
        "tie_word_embeddings": True,
        "text_config": {
            "model_type": "qwen3_5_text", "vocab_size": 248320, "hidden_size": 2048,
            "intermediate_size": 6144, "num_hidden_layers": 24, "num_attention_heads": 8,
            "num_key_value_heads": 2, "head_dim": 256, "hidden_act": "silu", "rms_norm_eps": 1e-6,
            "full_attention_interval": 4,
            "layer_types": (["linear_attention"] * 3 + ["full_attention"]) * 6,
            "linear_num_key_heads": 16, "linear_num_value_heads": 16, "linear_key_head_dim": 128,
            "linear_value_head_dim": 128, "linear_conv_kernel_dim": 4,
            "rope_parameters": {"rope_type": "default", "rope_theta": 10000000,
                                "partial_rotary_factor": 0.25, "mrope_section": [11, 11, 10],
                                "mrope_interleaved": True},
            "max_position_embeddings": 262144, "tie_word_embeddings": True, "attention_bias": False,
        },
    },
    # google/gemma-4-E2B-it, config.json `text_config` (Gemma4ForConditionalGeneration): 35 layers,
    # 4 sliding (window 512, head_dim 256) : 1 full (global_head_dim 512, proportional rope at
    # 0.25), 8 query heads / 1 KV head, the last 20 layers KV-shared with double-wide MLPs
    # (6144 -> 12288), per-layer inputs of 256 over a 262144 vocabulary, logit soft-cap 30.
    "gemma-4-e2b-it": _gemma4(hidden_size=1536, intermediate_size=6144, num_hidden_layers=35,
                              num_key_value_heads=1, sliding_per_full=4, num_kv_shared_layers=20,
                              use_double_wide_mlp=True),
    # google/gemma-4-E4B-it, config.json `text_config`: 42 layers, 5 sliding : 1 full, hidden
    # 2560, MLP 10240 (no double-wide), 8 query heads / 2 KV heads, the last 18 layers
    # KV-shared; otherwise as E2B.
    "gemma-4-e4b-it": _gemma4(hidden_size=2560, intermediate_size=10240, num_hidden_layers=42,
                              num_key_value_heads=2, sliding_per_full=5, num_kv_shared_layers=18,
                              use_double_wide_mlp=False),
}

# Test-sized versions keep each architecture's structure (layer-type pattern, KV sharing,
# per-layer inputs, partial rotary) and shrink widths, depths and vocabularies.
_TINY: dict[str, dict[str, Any]] = {
    "qwen3-4b-instruct-2507": {"vocab_size": 512, "bos_token_id": None, "eos_token_id": None,
                               "hidden_size": 64, "intermediate_size": 128,
                               "num_hidden_layers": 2, "num_attention_heads": 4,
                               "num_key_value_heads": 2, "head_dim": 16},
    "qwen3.5-2b": {"vocab_size": 512, "hidden_size": 64, "intermediate_size": 128,
                   "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2,
                   "head_dim": 16, "layer_types": ["linear_attention"] * 3 + ["full_attention"],
                   "linear_num_key_heads": 2, "linear_num_value_heads": 2,
                   "linear_key_head_dim": 16, "linear_value_head_dim": 16},
    "gemma-4-e2b-it": {"vocab_size": 512, "hidden_size": 64, "intermediate_size": 96,
                       "num_hidden_layers": 10, "num_attention_heads": 4, "num_key_value_heads": 1,
                       "head_dim": 16, "global_head_dim": 32, "sliding_window": 8,
                       "layer_types": ([_SLIDING] * 4 + [_FULL]) * 2, "num_kv_shared_layers": 5,
                       "vocab_size_per_layer_input": 512, "hidden_size_per_layer_input": 8},
    "gemma-4-e4b-it": {"vocab_size": 512, "hidden_size": 64, "intermediate_size": 128,
                       "num_hidden_layers": 12, "num_attention_heads": 4, "num_key_value_heads": 2,
                       "head_dim": 16, "global_head_dim": 32, "sliding_window": 8,
                       "layer_types": ([_SLIDING] * 5 + [_FULL]) * 2, "num_kv_shared_layers": 6,
                       "vocab_size_per_layer_input": 512, "hidden_size_per_layer_input": 8},
}


def _check(name: str) -> None:
    if name not in PUBLISHED:
        raise ValueError(f"unknown backbone {name!r}; published configs: {sorted(PUBLISHED)}")


def published(name: str, tiny: bool = False, layers: int | None = None) -> dict[str, Any]:
    """The config.json dict of backbone `name` (a copy); `tiny` shrinks it for tests; `layers`
    keeps only the bottom that many decoder layers (`with_depth`)."""
    _check(name)
    hf = copy.deepcopy(PUBLISHED[name])
    if tiny:
        target = hf.get("text_config", hf)
        target.update(copy.deepcopy(_TINY[name]))
    return hf if layers is None else with_depth(hf, layers)


def with_depth(hf: dict, layers: int) -> dict:
    """A copy of config.json dict `hf` with about `layers` decoder layers: the layer-type
    pattern's first entries and the KV-shared tail scaled with the depth (one more layer of a
    type the tail reads when the cut would leave none below it; compile-time benches
    compare a program with the same program at a fraction of the depth)."""
    hf = copy.deepcopy(hf)
    text = _text(hf)
    old = text["num_hidden_layers"]
    shared = text.get("num_kv_shared_layers") or 0
    if shared and "layer_types" in text:
        # The KV-shared tail keeps the original's last layer types; the layers below it are the
        # pattern's first ones, at least up to a layer of each type the tail reads from.
        types = list(text["layer_types"])
        shared = max(1, round(shared * layers / old))
        tail = types[old - shared:]
        below = max(layers - shared, 1 + max(types.index(t) for t in tail))
        text["layer_types"] = types[:below] + tail
        text["num_kv_shared_layers"] = shared
        layers = below + shared
    elif "layer_types" in text:
        text["layer_types"] = text["layer_types"][:layers]
    text["num_hidden_layers"] = layers
    return hf


def _text(hf: dict) -> dict:
    return hf.get("text_config", hf)


def config(name: str, tiny: bool = False) -> Any:
    """The omjax family `Config` of backbone `name`."""
    hf = published(name, tiny)
    return _family(_text(hf)["model_type"]).config_from_hf(hf)


def _hf_shapes(text: dict) -> dict[str, tuple[int, ...]]:
    """Tensor name -> shape of the transformers text model, built on torch's meta device (no
    memory): the names and shapes `params_from_hf` asks for."""
    import torch
    import transformers

    kinds = {"llama": ("LlamaConfig", "LlamaForCausalLM"), "qwen3": ("Qwen3Config", "Qwen3ForCausalLM"),
             "qwen3_5_text": ("Qwen3_5TextConfig", "Qwen3_5ForCausalLM"),
             "gemma4_text": ("Gemma4TextConfig", "Gemma4ForCausalLM")}
    cfg_cls, model_cls = (getattr(transformers, n) for n in kinds[text["model_type"]])
    fields = {k: v for k, v in text.items() if k not in ("model_type", "architectures")}
    with torch.device("meta"):
        ref = model_cls(cfg_cls(**fields))
    return {k: tuple(v.shape) for k, v in ref.state_dict().items()}


def abstract_params(name: str, dtype=jnp.bfloat16, *, tiny: bool = False, layers: int | None = None
                    ) -> tuple[Any, Any]:
    """(family `Config`, parameter tree of `jax.ShapeDtypeStruct`s) of backbone `name`, built by the
    family's own `params_from_hf` without allocating a weight."""
    return abstract_from_hf(published(name, tiny, layers), dtype)


def abstract_from_hf(hf: dict, dtype=jnp.bfloat16) -> tuple[Any, Any]:
    """`abstract_params` of any config.json dict `hf` of a family transformers can build."""
    text = _text(hf)
    fam = _family(text["model_type"])
    cfg = fam.config_from_hf(hf)
    shapes = _hf_shapes(text)

    def get(tensor: str) -> jax.ShapeDtypeStruct:
        if tensor not in shapes:
            raise KeyError(f"{text['model_type']}: the transformers model has no tensor {tensor!r}")
        return jax.ShapeDtypeStruct(shapes[tensor], jnp.float32)

    return cfg, jax.eval_shape(lambda: fam.params_from_hf(cfg, get, dtype))


@functools.cache
def _normal_drawer(shape: tuple[int, ...], dtype: Any, sharding: Any) -> Callable:
    """jit of (key, scale) -> scale * N(0, 1) of `shape`, drawn in float32, cast to `dtype`."""
    return jax.jit(lambda key, scale: (scale * jax.random.normal(key, shape, jnp.float32)).astype(dtype),
                   out_shardings=sharding)


def random_model(name: str, dtype=jnp.bfloat16, *, tiny: bool = False, seed: int = 0,
                 scale: float = 0.02, shard: Callable[[Any], Any] | None = None) -> Model:
    """A `Model` with the real (or `tiny`) shapes of backbone `name` and N(0, scale^2) weights,
    drawn on the default device or, with `shard` (the parameter tree of shapes -> its shardings,
    e.g. `Placement.base_shardings`), directly in those shards, so a base larger than one device is
    never whole on one; no tokenizer. Each leaf is drawn by a program compiled once per distinct
    (shape, dtype, sharding): one program drawing all ~400 leaves took 77 s to compile on the CPU
    and over 100 s on an H200 for Qwen3-4B (8 distinct shapes)."""
    cfg, abstract = abstract_params(name, dtype, tiny=tiny)
    leaves, treedef = jax.tree.flatten(abstract)
    shardings = [None] * len(leaves) if shard is None else jax.tree.leaves(shard(abstract))
    keys = jax.random.split(jax.random.PRNGKey(seed), len(leaves))
    params = jax.tree.unflatten(treedef, [_normal_drawer(x.shape, x.dtype, s)(k, scale)
                                          for k, x, s in zip(keys, leaves, shardings)])
    fam = _family(_text(published(name))["model_type"])
    return Model(config=cfg, params=params, tokenizer=None, family=fam, source=f"random:{name}")
