"""Running out of device memory as one line: a plan checked before its first compile, and XLA's
RESOURCE_EXHAUSTED caught around the train loop.

`check_plan(cfg, seeds)` runs before `omjax train` loads the model: it sizes the run's update
with `memory_estimate` exactly as the trainer sizes its mesh (`Trainer._plan`: every
adapter's activations at once, the base split over the model axis the trainer would choose) and
refuses, with `PlanTooLarge` (a `ConfigError`: one line, exit code 2), a plan whose estimate
exceeds one device's memory. The device's memory is `memory_stats()["bytes_limit"]`; a CPU
reports none, so there the check is skipped (host memory is the operating system's to give, and
CPU runs are small). `OMJAX_DEVICE_MEMORY_BYTES` overrides the device's figure, on any backend:
for tests, and to plan for a device other than the one at hand.

`out_of_memory(err)` tells XLA's allocation failures (`jax.errors.JaxRuntimeError` /
`XlaRuntimeError` whose text has RESOURCE_EXHAUSTED or "Out of memory") from other errors, and
`oom_line` is the one line printed instead of XLA's dump: what was running, the estimate against
the device, the settings to lower.
"""

from __future__ import annotations

import os
import traceback
from collections.abc import Sequence
from typing import Any

from omjax.config import Config, ConfigError

GIB = 1024 ** 3
MEMORY_ENV = "OMJAX_DEVICE_MEMORY_BYTES"
"""Environment override of one device's memory in bytes (see the module docstring)."""
ESTIMATE_TOKENS = 768
"""Sequence length the memory estimate assumes when `train.update_tokens` does not fix one (the
paper's prompts, as `omjax.bench gpu` builds them)."""

LOWER = {
    "update": "lower train.minibatch_size (rows per gradient step), train.update_tokens or train.update_rows "
              "(padding), or set train.remat=true (train.remat=auto recomputes only what the estimate says must be)",
    "rollouts": "run fewer --seeds or train.rollouts (every pending decision of a step is one batched call)",
    "start": "use a smaller model.dtype or backbone, or more devices (run.base_sharding=shard)",
}
"""What to lower, by the phase that ran out."""


class PlanTooLarge(ConfigError):
    """The run's `memory_estimate` exceeds one device's memory."""


def device_memory(devices: Sequence[Any] | None = None) -> int | None:
    """One device's memory in bytes: `OMJAX_DEVICE_MEMORY_BYTES`, else the backend's
    `bytes_limit` (None on a CPU)."""
    if os.environ.get(MEMORY_ENV):
        return int(float(os.environ[MEMORY_ENV]))
    import jax

    from omjax.train.sharding import device_bytes_limit

    return device_bytes_limit(list(jax.devices() if devices is None else devices))


def _estimate(cfg: Config, model_cfg: Any, n_seeds: int, remat: bool | int) -> dict:
    """The update's `memory_estimate` under `remat` (True, False or a layer count)."""
    from omjax.models import memory_estimate

    t = cfg.train
    width = 4 if cfg.model.dtype == "float32" else 2
    return memory_estimate(model_cfg, n_seeds * cfg.n_adapters, cfg.lora.rank, t.minibatch_size,
                           t.update_tokens or ESTIMATE_TOKENS, base_bytes=width, act_bytes=width, remat=remat,
                           parallel_agents=True)


def _axis(cfg: Config, est: dict, n_devices: int, limit: int | None) -> int:
    from omjax.train.sharding import model_axis

    return model_axis(cfg.run.base_sharding, n_devices, cfg.run.model_devices, lambda m: _need(est, m), limit)


def planned_remat(cfg: Config, model_cfg: Any, n_seeds: int, n_devices: int, limit: int | None) -> bool | int:
    """`train.remat` resolved: `true`/`false` as set; `auto` the fewest layers (from the bottom,
    an int) whose recomputation lets the update's estimate fit `limit` bytes per device, the
    base split as the trainer would split it: 0 where everything fits or `limit` is None, True
    where even recomputing every layer does not fit (then `check_plan` refuses the run)."""
    if cfg.train.remat != "auto":
        return cfg.train.remat
    if limit is None:
        return 0
    for k in range(model_cfg.num_layers + 1):
        est = _estimate(cfg, model_cfg, n_seeds, k)
        if _need(est, _axis(cfg, est, n_devices, limit)) <= limit:
            return k
    return True


def plan_estimate(cfg: Config, model_cfg: Any, n_seeds: int, n_devices: int,
                  limit: int | None) -> tuple[dict, int, bool | int]:
    """(the update's `memory_estimate` under the planned remat, devices on the model axis, the
    planned remat `planned_remat`): the trainer's own sizing."""
    remat = planned_remat(cfg, model_cfg, n_seeds, n_devices, limit)
    est = _estimate(cfg, model_cfg, n_seeds, remat)
    return est, _axis(cfg, est, n_devices, limit), remat


def _need(est: dict, m: int) -> float:
    return est["total"] - est["base"] + est["base"] / m


def plan_line(est: dict, m: int, limit: int) -> str:
    """Why a plan is refused, in one line."""
    split = f" (the base split over {m} devices)" if m > 1 else ""
    return (f"the plan needs about {_need(est, m) / GIB:.1f} GiB per device{split} by memory_estimate (base "
            f"{est['base_gib']:.1f}, activations {est['activations_gib']:.1f}, KV cache {est['kv_cache_gib']:.1f}, "
            f"adapters {est['lora_gib']:.2f} GiB) but a device has {limit / GIB:.1f} GiB: {LOWER['update']}")


def check_plan(cfg: Config, seeds: list[int] | None) -> dict | None:
    """Refuse (`PlanTooLarge`) a run whose estimate cannot fit one device; the estimate, or None
    where no device memory is known (a CPU without `OMJAX_DEVICE_MEMORY_BYTES`). Reads the
    model's config only, no weights."""
    limit = device_memory()
    if limit is None:
        return None
    import jax

    from omjax.models import loader

    est, m, _ = plan_estimate(cfg, loader.load_config(cfg.model.name), len(seeds or [cfg.seed]),
                              jax.device_count(), limit)
    if _need(est, m) > limit:
        raise PlanTooLarge(plan_line(est, m, limit))
    return est


def out_of_memory(err: BaseException) -> bool:
    """Whether `err` is XLA failing to allocate device memory."""
    import jax

    kinds = tuple(k for k in (getattr(jax.errors, "JaxRuntimeError", None), _xla_runtime_error()) if k is not None)
    text = str(err)
    return isinstance(err, kinds) and ("RESOURCE_EXHAUSTED" in text or "Out of memory" in text)


def _xla_runtime_error():
    try:
        from jaxlib.xla_extension import XlaRuntimeError
    except ImportError:
        return None
    return XlaRuntimeError


def phase_of(err: BaseException) -> str:
    """Which part of a run raised `err`, from the innermost omjax frame of its traceback:
    "rollouts" (`collect_group`), "update" (a round after its rollouts) or "start" (before any
    round: loading, placing, initialising)."""
    names = [f.name for f in traceback.extract_tb(err.__traceback__) if f"{os.sep}omjax{os.sep}" in f.filename]
    for name in reversed(names):
        if name in ("collect_group", "collect", "decide", "prefill"):
            return "rollouts"
        if name in ("round_group", "_stand_in_update"):
            return "update"
    return "start"


def oom_line(phase: str, err: BaseException | str, estimate: dict | None, limit: int | None) -> str:
    """The one line an allocation failure prints: the phase, XLA's own first line, the estimate
    against the device, what to lower."""
    first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    first = first if len(first) <= 160 else first[:157] + "..."
    have = "device memory unknown" if limit is None else f"a device has {limit / GIB:.1f} GiB"
    est = "" if estimate is None else f"memory_estimate {estimate['total'] / GIB:.1f} GiB, "
    what = {"update": "the update", "rollouts": "the rollouts", "start": "start-up"}[phase]
    return f"out of device memory in {what} ({first}); {est}{have}: {LOWER[phase]}"
