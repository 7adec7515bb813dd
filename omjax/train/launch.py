"""What `omjax train` and `omjax eval` do once their config has parsed: the checks that need
the game registry and the model files, the run directory, and how failures are reported.

Every failure a user can fix is one line naming the key or file (exit code 2; `--debug` shows
the traceback), running out of device memory included (`omjax.train.oom`: a plan whose estimate
cannot fit is refused before the model loads; XLA's RESOURCE_EXHAUSTED is one line); an engine
worker crash is one line naming where it happened (exit code 1);
Ctrl-C abandons the current round and prints the resume command (exit code 130).
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import jax
from jax.experimental import multihost_utils

from omjax.config import EXIT_ERROR, Config, ConfigError
from omjax.envs.meltingpot.workers import RolloutWorkerError
from omjax.games.registry import check_env
from omjax.jax_cache import enable_compilation_cache
from omjax.models.loader import ModelFileError, check_model
from omjax.train import oom
from omjax.train.checkpoint import CheckpointError
from omjax.train.trainer import RunInterrupted, Trainer, read_group

EXIT_FAILED = 1
EXIT_INTERRUPTED = 130
"""Exit codes besides EXIT_ERROR: a run that failed (an engine worker crashed), Ctrl-C (128 +
SIGINT, as shells do)."""

USER_ERRORS = (ConfigError, FileNotFoundError, ModelFileError, CheckpointError)
"""What a user can fix: reported as one line, the traceback only under --debug."""


def preflight(cfg: Config) -> None:
    """What can be checked before any model or engine loads, as one ConfigError naming the key:
    the layout and agent count against the game registry, the model file and LoRA targets."""
    check_env(cfg.env)
    check_model(cfg.model.name, cfg.lora)


def claim_run_dir(run_dir: Path, overwrite: bool) -> None:
    """A fresh run's directory: absent or empty, or (under `overwrite`) emptied completely."""
    if not run_dir.exists():
        return
    if not run_dir.is_dir():
        raise ConfigError(f"run.out_dir: {run_dir} is a file, not a directory")
    if any(run_dir.iterdir()):
        if not overwrite:
            raise ConfigError(f"run.out_dir: {run_dir} already holds a run; continue it with "
                              f"`omjax train --resume {run_dir}` or replace it with --overwrite")
        shutil.rmtree(run_dir)


def group_seeds(cfg: Config, seeds: list[int] | None, resume: bool) -> list[int] | None:
    """The seeds of a multi-seed run (None: one seed, from the config); a resumed group keeps its own."""
    group = read_group(cfg.run.out_dir) if resume else None
    if group is None:
        return seeds
    if seeds is not None and seeds != group:
        raise ConfigError(f"--resume {cfg.run.out_dir} trains seeds {group}, not --seeds {seeds}")
    return group


def train(cfg: Config, seeds: list[int] | None, resume: bool, overwrite: bool, compile_cache: bool,
          debug: bool, hosts: tuple[str, int, int] | None = None) -> int:
    """Check, then train (or resume) the run `cfg` describes (`seeds`: several seeds in one
    program; `hosts`: (coordinator, processes, this process) of a multi-host run, whose
    `run.out_dir` every host must see); the command's exit code."""
    if hosts is not None:
        jax.distributed.initialize(*hosts)
    estimate = None
    try:
        seeds = group_seeds(cfg, seeds, resume)
        preflight(cfg)
        estimate = oom.check_plan(cfg, seeds)  # a plan that cannot fit is refused before the model loads
        if not resume and jax.process_index() == 0:
            claim_run_dir(Path(cfg.run.out_dir), overwrite)
        if hosts is not None:  # the other hosts start once the first has claimed the shared directory
            multihost_utils.sync_global_devices("omjax run directory claimed")
        if compile_cache:
            enable_compilation_cache()
        trainer = Trainer(cfg, seeds=seeds)
        where = trainer.placement
        if where.n_devices > 1:
            base = f"sharded over {where.model_devices}" if where.model_devices > 1 else "replicated on each"
            print(f"{where.n_devices} devices, mesh {where.data_devices} data x {where.model_devices} model: "
                  f"adapters and decision rows split over data, the frozen base {base}")
        try:
            runs = trainer.run_group(resume=resume)
        except RunInterrupted as stop:
            print(f"\nomjax train: {stop}", file=sys.stderr)
            if stop.in_flight:
                # The abandoned update is still running on XLA's threads and the interpreter's
                # shutdown would wait for it (tens of seconds); nothing of it is ever written,
                # so the process ends here.
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(EXIT_INTERRUPTED)
            return EXIT_INTERRUPTED
    except USER_ERRORS as err:
        if debug:
            raise
        print(f"omjax train: {err}", file=sys.stderr)
        return EXIT_ERROR
    except RolloutWorkerError as err:
        if debug:
            raise
        print(f"omjax train: {err}; continue with: omjax train --resume {cfg.run.out_dir}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        print("\nomjax train: interrupted before the first round started; nothing was written", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as err:  # XLA's RESOURCE_EXHAUSTED: one line instead of its allocation dump
        if debug or not oom.out_of_memory(err):
            raise
        print(f"omjax train: {oom.oom_line(oom.phase_of(err), err, estimate, oom.device_memory())}", file=sys.stderr)
        return EXIT_ERROR
    for run_dir, rows in zip(trainer.run_dirs, runs):
        if rows:
            print(f"first round team return {rows[0]['team_return_mean']:.2f}, "
                  f"last round {rows[-1]['team_return_mean']:.2f} ({len(rows)} rounds) -> {run_dir}")
    return 0
