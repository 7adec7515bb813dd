"""JAX's persistent compilation cache, shared by every omjax command.

Compiling a burn-in, rollout or update program takes 5-60 s on a 2-core CPU; keeping the compiled
programs on disk makes every later run of the same shapes start at once.
"""

from __future__ import annotations

import os
from pathlib import Path

import jax


def cache_dir() -> Path:
    """`$OMJAX_CACHE/xla`, by default `~/.cache/omjax/xla`."""
    return Path(os.environ.get("OMJAX_CACHE", Path.home() / ".cache" / "omjax")) / "xla"


def enable_compilation_cache() -> None:
    """Turn on the cache for this process (programs compiling in under 1 s are not kept)."""
    jax.config.update("jax_compilation_cache_dir", str(cache_dir()))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 1.0)


# XLA executables built by this process, counted from JAX's monitoring events: one per backend
# compile, a persistent-cache hit included (it still means a program shape not seen before in
# this process). The trainer reports the count per round, so a round that compiles is visible.
_BACKEND_COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"
_compiled = 0
_listening = False


def _on_event(event: str, duration: float, **_) -> None:
    global _compiled
    if event == _BACKEND_COMPILE_EVENT:
        _compiled += 1


def compilations() -> int:
    """XLA compilations in this process since the first call of this function."""
    global _listening
    if not _listening:
        import jax

        jax.monitoring.register_event_duration_secs_listener(_on_event)
        _listening = True
    return _compiled
