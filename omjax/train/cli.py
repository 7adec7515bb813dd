"""`omjax train`: PA-MAGRPO training from a YAML config.

    omjax train --config configs/quickstart_overcooked_smollm2.yaml [key=value ...]
    omjax train --resume runs/quickstart [key=value ...]

`key=value` overrides any config field (`train.rounds=3`, `seed=1`, `run.out_dir=runs/x`).
`--resume DIR` continues a stopped run from its newest intact checkpoint with the config saved
in DIR. A fresh run never writes into a non-empty run directory: pass `--overwrite` to delete
the old run first. Ctrl-C abandons the current round and prints the resume command (exit 130);
a bad config, model file or checkpoint prints one line (exit 2; `--debug` shows the traceback).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path

from omjax.config import Config, ConfigError, load_config
from omjax.envs.meltingpot.workers import RolloutWorkerError
from omjax.games.registry import check_env
from omjax.jax_cache import enable_compilation_cache
from omjax.models.loader import ModelFileError, check_model
from omjax.train.checkpoint import CheckpointError
from omjax.train.trainer import RunInterrupted, Trainer

EXIT_FAILED = 1
EXIT_ERROR = 2
EXIT_INTERRUPTED = 130
"""Exit codes: a run that failed (an engine worker crashed), a user error (config, files,
checkpoints), Ctrl-C (128 + SIGINT, as shells do)."""

USER_ERRORS = (ConfigError, FileNotFoundError, ModelFileError, CheckpointError)
"""What a user can fix: reported as one line, the traceback only under --debug."""


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="omjax train", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--config", help="YAML run config (see configs/)")
    src.add_argument("--resume", metavar="DIR", help="run directory of a stopped run to continue")
    p.add_argument("overrides", nargs="*", metavar="key=value", help="config overrides")
    p.add_argument("--overwrite", action="store_true",
                   help="with --config: delete everything in a non-empty run.out_dir before starting")
    p.add_argument("--no-compile-cache", action="store_true",
                   help="do not keep compiled XLA programs in ~/.cache/omjax/xla between runs")
    p.add_argument("--debug", action="store_true", help="show the full traceback of an error")
    return p


def preflight(cfg: Config) -> None:
    """What can be checked before any model or engine loads, as one ConfigError naming the key:
    the layout and agent count against the game registry, the model file and LoRA targets."""
    check_env(cfg.env)
    check_model(cfg.model.name, cfg.lora)


def _config(args) -> Config:
    """The run's config; a fresh run's directory is checked (and cleared under --overwrite)."""
    if args.resume:
        run_dir = Path(args.resume)
        saved = run_dir / "config.yaml"
        if not saved.is_file():
            raise FileNotFoundError(f"--resume {run_dir}: {saved} not found (not a run directory)")
        if args.overwrite:
            raise ConfigError("--overwrite starts a fresh run: use it with --config, not --resume")
        cfg = load_config(saved, [*args.overrides, f"run.out_dir={run_dir}"])
    else:
        cfg = load_config(args.config, args.overrides)
    preflight(cfg)
    run_dir = Path(cfg.run.out_dir)
    if not args.resume and run_dir.exists():
        if not run_dir.is_dir():
            raise ConfigError(f"run.out_dir: {run_dir} is a file, not a directory")
        if any(run_dir.iterdir()):
            if not args.overwrite:
                raise ConfigError(f"run.out_dir: {run_dir} already holds a run; continue it with "
                                  f"`omjax train --resume {run_dir}` or replace it with --overwrite")
            shutil.rmtree(run_dir)
    return cfg


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "train":
        argv = argv[1:]
    args = _parser().parse_args(argv)
    try:
        cfg = _config(args)
        if not args.no_compile_cache:
            enable_compilation_cache()
        trainer = Trainer(cfg)
        try:
            rows = trainer.run(resume=bool(args.resume))
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
        if args.debug:
            raise
        print(f"omjax train: {err}", file=sys.stderr)
        return EXIT_ERROR
    except RolloutWorkerError as err:
        if args.debug:
            raise
        print(f"omjax train: {err}; continue with: omjax train --resume {cfg.run.out_dir}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        print("\nomjax train: interrupted before the first round started; nothing was written", file=sys.stderr)
        return EXIT_INTERRUPTED
    if rows:
        print(f"first round team return {rows[0]['team_return_mean']:.2f}, "
              f"last round {rows[-1]['team_return_mean']:.2f} ({len(rows)} rounds) -> {trainer.run_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
