"""Where a run's arrays live when several devices are visible (`jax.sharding`).

The devices form a two-axis `Mesh` ("data", "model"):
- "data" splits the S x A adapter bank, its optimizer state, the update batch and each backbone
  call's decision rows along their leading axis (a leading axis that the data axis does not
  divide stays replicated over it);
- "model" shards the frozen base Megatron-style when it does not fit one device
  (`base_spec`): q/k/v/gate/up (and the fused linear-attention and per-layer-input projections)
  column-parallel on their output dim, o/down row-parallel on their input dim, embedding tables
  on the vocabulary, the LM head on its vocabulary columns, experts on the expert axis; norms and
  other vectors replicated. The adapters follow their base weight (`lora_spec`): B of a
  column-parallel projection is split on d_out, A of a row-parallel one on d_in, so the low-rank
  path produces its delta in the layout of the base projection's output. Replicated factors
  compile to the same collectives (Qwen3-4B widths, 2 layers, 2 x 2 mesh: 60 all-gathers and 27
  all-reduces either way, GSPMD slices a replicated factor locally), so following the base only
  saves memory: each device keeps 1/m of those factors, their gradients and Adam moments. With
  one model device (the default) the base is replicated.

The jitted decide and update programs take these layouts from their arguments and XLA's GSPMD
partitioner inserts the collectives; results equal one device's up to float rounding. Several
hosts join one mesh after `jax.distributed.initialize()` (`omjax train --coordinator`): then
`jax.devices()` lists every host's devices, every process runs the same program on the same host
data, and results come back whole to each (`to_host`). How many devices the model axis gets is
`model_axis` (config `run.base_sharding`, `run.model_devices`).

On the CPU, n forced host devices (`--xla_force_host_platform_device_count=n`) share one pool
of PJRT_NPROC threads (default: the cores) and each collective holds its thread until all n
devices reach it, so a mesh of more devices than threads can deadlock (the Qwen3.5 decide on
1 x 4 did, on 2 cores); set PJRT_NPROC to at least 2n (as tests/train/test_devices.py does).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np
from jax.experimental import multihost_utils
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from omjax.config import LORA_TARGETS, ConfigError

# Base weights by leaf name (every family's `params_from_hf` names; linears are [D_in, D_out]).
_COLUMN = {"q", "k", "v", "gate", "up", "qkv", "z", "ple_gate", "ple_model_proj", "lm_head",
           "q_bias", "k_bias", "v_bias", "gate_bias", "up_bias", "conv"}
"""Split on the last axis: the output dim of a column-parallel projection (its bias has only that
axis; the linear-attention `conv` [kernel, C] runs on `qkv`'s output channels)."""
_FIRST = {"o", "down", "ple_proj", "embed", "ple_embed", "experts_gate_up", "experts_down"}
"""Split on the first axis: the input dim of a row-parallel projection, an embedding table's
vocabulary, the expert axis."""
_REPLICATED = {"attn_norm", "mlp_norm", "post_attn_norm", "post_mlp_norm", "q_norm", "k_norm", "norm",
               "layer_scalar", "ple_norm", "ple_proj_norm", "out_norm", "dt_bias", "A_log", "a", "b",
               "o_bias", "down_bias", "router_proj", "router_scale", "expert_scale", "moe_post_mlp_norm",
               "moe_pre_norm", "moe_post_norm"}
"""Norms, scalars and the small per-head projections: a copy on every device."""

_LORA_COLUMN = {"q", "k", "v", "gate", "up"}
_LORA_ROW = {"o", "down"}

BASE_SHARDING = ("auto", "replicate", "shard")


def _name(path: tuple) -> str:
    keys = [k.key for k in path if isinstance(k, jax.tree_util.DictKey)]
    return str(keys[-1]) if keys else ""


def _axis_spec(ndim: int, axis: int | None, size: int, dim: int | None) -> PartitionSpec:
    """`axis` of an ndim array on "model" when `size` devices divide its length `dim`."""
    if axis is None or size == 1 or dim % size:
        return PartitionSpec()
    spec = [None] * ndim
    spec[axis] = "model"
    return PartitionSpec(*spec)


def base_spec(path: tuple, leaf: Any, model_devices: int) -> PartitionSpec:
    """PartitionSpec of one frozen-base leaf over the "model" axis (a dim the axis does not
    divide stays whole). An unknown leaf name is an error, so a new family states its layout."""
    name = _name(path)
    shape = np.shape(leaf)
    # A scanned layer stack (`{"layers": {name: [L, ...]}}`) keeps its layer axis whole.
    lead = int(any(isinstance(a, jax.tree_util.DictKey) and a.key == "layers" and isinstance(b, jax.tree_util.DictKey)
                   for a, b in zip(path, path[1:])))
    if name in _COLUMN:
        return _axis_spec(len(shape), len(shape) - 1, model_devices, shape[-1])
    if name in _FIRST:
        return _axis_spec(len(shape), lead, model_devices, shape[lead])
    if name in _REPLICATED:
        return PartitionSpec()
    raise ValueError(f"no sharding rule for base parameter {jax.tree_util.keystr(path)} {shape}; "
                     f"add its name to omjax/train/sharding.py")


def lora_spec(path: tuple, leaf: Any, data_devices: int, model_devices: int) -> PartitionSpec:
    """PartitionSpec of one adapter-bank (or optimizer-state) leaf [N, L, ...]: N over "data" when
    the data axis divides it; a LoRA factor's base-side dim over "model" (see the module doc)."""
    shape = np.shape(leaf)
    if not shape:
        return PartitionSpec()
    data = "data" if data_devices > 1 and shape[0] % data_devices == 0 else None
    spec = [data] + [None] * (len(shape) - 1)
    keys = [k.key for k in path if isinstance(k, jax.tree_util.DictKey)]
    # A factor [N, L, d_in, r] (`a`) or [N, L, r, d_out] (`b`): its base-side dim is -2 or -1.
    if len(shape) == 4 and len(keys) >= 2 and keys[-2] in LORA_TARGETS and model_devices > 1:
        factor, target = keys[-1], keys[-2]
        if factor == "b" and target in _LORA_COLUMN and shape[3] % model_devices == 0:
            spec[3] = "model"
        if factor == "a" and target in _LORA_ROW and shape[2] % model_devices == 0:
            spec[2] = "model"
    return PartitionSpec(*spec)


def model_axis(setting: str, n_devices: int, model_devices: int, per_device_bytes: Callable[[int], float],
               bytes_limit: int | None) -> int:
    """Devices along the "model" axis (1: the base replicated) for `run.base_sharding` =
    `setting` and `run.model_devices` = `model_devices` (0: choose).

    `per_device_bytes(m)` is the training memory one device needs with the base split m ways;
    `bytes_limit` is one device's memory (None where the backend does not say, as on the CPU).
    `auto` replicates when the need with m = 1 fits (or no limit is known) and otherwise takes
    the fewest devices that divide `n_devices` and fit (all of them when none fits); `shard` does
    the same from m = 2 (all devices without a limit). A given `model_devices` is used as is."""
    if setting not in BASE_SHARDING:
        raise ConfigError(f"run.base_sharding: must be one of {list(BASE_SHARDING)}, got {setting!r}")
    if model_devices:
        if n_devices % model_devices:
            raise ConfigError(f"run.model_devices: {model_devices} does not divide the {n_devices} devices")
        return model_devices
    if setting == "replicate" or n_devices == 1:
        return 1
    if setting == "auto" and (bytes_limit is None or per_device_bytes(1) <= bytes_limit):
        return 1
    sizes = [m for m in range(2, n_devices + 1) if n_devices % m == 0]
    if bytes_limit is None:
        return n_devices
    return next((m for m in sizes if per_device_bytes(m) <= bytes_limit), n_devices)


def device_bytes_limit(devices: Sequence[Any]) -> int | None:
    """The memory of one of `devices` that this process holds, in bytes, where the backend
    reports it (not on the CPU); a device of another host reports nothing here."""
    mine = next(d for d in devices if d.process_index == jax.process_index())
    return (mine.memory_stats() or {}).get("bytes_limit")


class Placement:
    """Device placement over `devices` (default: every device of every process), `model_devices`
    of them along the "model" axis that shards the base."""

    def __init__(self, devices: Sequence[Any] | None = None, model_devices: int = 1):
        self.devices = list(jax.devices() if devices is None else devices)
        if not self.devices:
            raise ValueError("Placement needs at least one device")
        if model_devices < 1 or len(self.devices) % model_devices:
            raise ValueError(f"model_devices={model_devices} must divide the {len(self.devices)} devices")
        self.model_devices = model_devices
        self.data_devices = len(self.devices) // model_devices
        self.mesh = Mesh(np.array(self.devices).reshape(self.data_devices, model_devices), ("data", "model"))
        self._replicated = NamedSharding(self.mesh, PartitionSpec())
        self._split = NamedSharding(self.mesh, PartitionSpec("data"))

    @property
    def n_devices(self) -> int:
        return len(self.devices)

    def replicate(self, tree: Any) -> Any:
        """Every leaf on every device (one device: the tree as it is)."""
        return tree if self.n_devices == 1 else jax.device_put(tree, self._replicated)

    def split(self, tree: Any) -> Any:
        """Leaves [N, ...] split over the data axis along N (replicated when the data axis does
        not divide every leaf's N)."""
        if self.n_devices == 1:
            return tree
        leaves = jax.tree.leaves(tree)
        divisible = all(np.ndim(x) and np.shape(x)[0] % self.data_devices == 0 for x in leaves)
        return jax.device_put(tree, self._split if divisible else self._replicated)

    def base_shardings(self, params: Any) -> Any:
        """The NamedSharding of every base leaf (`params` may be shapes only)."""
        return jax.tree_util.tree_map_with_path(
            lambda p, x: NamedSharding(self.mesh, base_spec(p, x, self.model_devices)), params)

    def base(self, params: Any) -> Any:
        """The frozen base: sharded over the model axis (`base_spec`), replicated without one."""
        if self.n_devices == 1:
            return params
        return jax.device_put(params, self.base_shardings(params))

    def bank(self, tree: Any) -> Any:
        """An adapter bank or its optimizer state [N, ...]: N over the data axis, each LoRA
        factor laid out with its base weight (`lora_spec`)."""
        if self.n_devices == 1:
            return tree
        return jax.device_put(tree, jax.tree_util.tree_map_with_path(
            lambda p, x: NamedSharding(self.mesh, lora_spec(p, x, self.data_devices, self.model_devices)), tree))


def to_host(tree: Any) -> Any:
    """Device arrays -> NumPy, whole on every process: an array split over several hosts'
    devices is gathered first (`process_allgather`; every process must make the same call)."""
    return jax.tree.map(lambda x: np.asarray(x) if getattr(x, "is_fully_addressable", True)
                        else multihost_utils.process_allgather(x, tiled=True), tree)


def staging_device() -> Any:
    """The host's CPU device, where a base too large for one accelerator is read before it is
    sharded (None, JAX's default device, when the CPU backend is not loaded)."""
    try:
        return jax.local_devices(backend="cpu")[0]
    except RuntimeError:
        return None
