"""Option-library sampling per training seed (paper §5.1 "Departures", §6.1 channel (i)).

Each game has candidate libraries, as repeated samples of the Stage-1 drafting prompt would give
(`CANDIDATES`; written offline here, see the README's departures). `env.library: sampled`
draws one of them from the training seed; `resolve_library(cfg)` turns that into the concrete
candidate before anything is built, so the run's `config.yaml` (and `library.json`) name the
library and its guard file, and `omjax eval` of the run plays the same one.

    cfg = resolve_library(load_config("configs/overcooked_aa_qwen3-4b.yaml", ["seed=3"]))
    cfg.env.library        # 'lib_a' or 'lib_b', the same for every call with seed 3
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np

from omjax.config import Config, EnvConfig

CANDIDATES: dict[str, tuple[str, ...]] = {
    "overcooked": ("lib_a", "lib_b"),
    "cleanup": ("lib_a", "lib_b"),
    "harvest": ("lib_a", "lib_b"),
}
"""Game -> its candidate libraries (the first is the default); `omjax.options.overcooked.LIBRARIES`
and the Melting Pot modules' `VARIANTS` define them (a test keeps the two in step)."""

_SALT = 0x1B5A  # keeps the library draw independent of the other streams seeded by `seed`


def sample_library(game: str, seed: int) -> str:
    """The candidate library training seed `seed` plays (uniform, deterministic in the seed)."""
    if game not in CANDIDATES:
        raise ValueError(f"no candidate libraries for game {game!r}; games: {', '.join(CANDIDATES)}")
    if seed < 0:
        raise ValueError(f"seed must be >= 0, got {seed}")
    names = CANDIDATES[game]
    return names[int(np.random.default_rng([_SALT, seed]).integers(len(names)))]


def library_of(env: EnvConfig) -> str:
    """The concrete library an env config plays (`sampled` must be resolved first): `env.library`,
    else the library `env.layout` names (a Melting Pot layout may be a library name), else the
    game's first candidate. Whether `env.layout` is a valid layout is the game's to check."""
    if env.library == "sampled":
        raise ValueError("env.library=sampled has not been resolved from the seed "
                         "(omjax.options.libraries.resolve_library does it)")
    if env.game == "overcooked":
        return env.library or CANDIDATES["overcooked"][0]
    named = env.layout if env.layout in CANDIDATES[env.game] else CANDIDATES[env.game][0]
    if env.library and env.layout in CANDIDATES[env.game] and named != env.library:
        raise ValueError(f"env.layout={env.layout!r} and env.library={env.library!r} name different libraries")
    return env.library or named


def guard_variant(env: EnvConfig) -> str:
    """The registry variant whose shipped guard file the env's library uses
    (`omjax.games.registry.guard_path(env.game, guard_variant(env))`)."""
    lib = library_of(env)
    if env.game == "overcooked":
        return env.layout if lib == "lib_a" else f"{env.layout}@{lib}"
    return lib


def resolve_library(cfg: Config) -> Config:
    """`cfg` with `env.library` concrete: a `sampled` library is drawn from `cfg.seed`."""
    if cfg.env.library != "sampled":
        return cfg
    return dataclasses.replace(cfg, env=dataclasses.replace(cfg.env, library=sample_library(cfg.env.game, cfg.seed)))


LIBRARY_FILE = "library.json"
"""In a run directory: the `library_record` of the run."""


def library_record(cfg: Config, sampled: bool, guards: str) -> dict:
    """What `library.json` of a run holds: the game, the library played, whether the seed drew
    it, and the guard file its menus use ("" for the unfiltered menu)."""
    return {"game": cfg.env.game, "layout": cfg.env.layout, "library": library_of(cfg.env),
            "sampled_from_seed": cfg.seed if sampled else None, "guards": guards}


def write_library_record(run_dir: str | Path, record: dict) -> Path:
    path = Path(run_dir) / LIBRARY_FILE
    path.write_text(json.dumps(record, indent=2) + "\n")
    return path
