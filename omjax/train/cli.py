"""`omjax train`: PA-MAGRPO training from a YAML config.

    omjax train --config configs/quickstart_overcooked_smollm2.yaml [key=value ...]
    omjax train --resume runs/quickstart [key=value ...]
    omjax train --config C --coordinator host0:1234 --num-processes 2 --process-id I   # on each host I

`key=value` overrides any config field (`train.rounds=3`, `seed=1`, `run.out_dir=runs/x`).
`--resume DIR` continues a stopped run from its newest intact checkpoint with the config saved
in DIR. A fresh run never writes into a non-empty run directory: pass `--overwrite` to delete
the old run first. Ctrl-C abandons the current round and prints the resume command (exit 130);
a bad config, model file or checkpoint prints one line (exit 2; `--debug` shows the traceback).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from omjax.config import EXIT_ERROR, Config, ConfigError, load_config


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="omjax train", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--config", help="YAML run config (see configs/)")
    src.add_argument("--resume", metavar="DIR", help="run directory of a stopped run to continue")
    p.add_argument("overrides", nargs="*", metavar="key=value", help="config overrides")
    p.add_argument("--seeds", metavar="LIST", help="train several seeds in one program: 0-4 or 0,2,5")
    p.add_argument("--overwrite", action="store_true",
                   help="with --config: delete everything in a non-empty run.out_dir before starting")
    p.add_argument("--no-compile-cache", action="store_true",
                   help="do not keep compiled XLA programs in ~/.cache/omjax/xla between runs")
    p.add_argument("--coordinator", metavar="HOST:PORT",
                   help="several hosts: call jax.distributed.initialize with this coordinator (process 0's "
                        "address) so the mesh spans every host's devices; needs --num-processes, --process-id")
    p.add_argument("--num-processes", type=int, metavar="N", help="with --coordinator: processes (hosts) in all")
    p.add_argument("--process-id", type=int, metavar="I", help="with --coordinator: this process, 0 .. N-1")
    p.add_argument("--debug", action="store_true", help="show the full traceback of an error")
    return p


def distributed(args) -> tuple[str, int, int] | None:
    """(coordinator, processes, this process) of a multi-host run, or None for one host."""
    given = [args.coordinator is not None, args.num_processes is not None, args.process_id is not None]
    if not any(given):
        return None
    if not all(given):
        raise ConfigError("--coordinator, --num-processes and --process-id go together")
    if args.num_processes < 1 or not 0 <= args.process_id < args.num_processes:
        raise ConfigError(f"--process-id {args.process_id} must be in 0 .. --num-processes - 1 "
                          f"({args.num_processes} processes)")
    return args.coordinator, args.num_processes, args.process_id


def _config(args) -> Config:
    if not args.resume:
        return load_config(args.config, args.overrides)
    run_dir = Path(args.resume)
    saved = run_dir / "config.yaml"
    if not saved.is_file():
        raise FileNotFoundError(f"--resume {run_dir}: {saved} not found (not a run directory)")
    if args.overwrite:
        raise ConfigError("--overwrite starts a fresh run: use it with --config, not --resume")
    return load_config(saved, [*args.overrides, f"run.out_dir={run_dir}"])


def parse_seeds(text: str) -> list[int]:
    """`0-4` -> [0, 1, 2, 3, 4]; `10000,10003` -> [10000, 10003]; ranges and lists mix (`0-2,7`).
    Training seeds (`omjax train --seeds`) and held-out seeds (`omjax eval --seeds`) alike."""
    seeds: list[int] = []
    for part in text.split(","):
        lo, sep, hi = part.strip().partition("-")
        try:
            span = list(range(int(lo), int(hi) + 1)) if sep else [int(lo)]
        except ValueError:
            span = []
        if not span:
            raise ConfigError(f"--seeds {text!r}: {part!r} is not a seed or a range LO-HI (inclusive, LO <= HI)")
        seeds += span
    if len(set(seeds)) != len(seeds) or min(seeds) < 0:
        raise ConfigError(f"--seeds {text!r}: need distinct seeds >= 0")
    return seeds


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "train":
        argv = argv[1:]
    args = _parser().parse_args(argv)
    try:
        cfg = _config(args)
        seeds = parse_seeds(args.seeds) if args.seeds else None
        hosts = distributed(args)
    except (ConfigError, FileNotFoundError) as err:
        if args.debug:
            raise
        print(f"omjax train: {err}", file=sys.stderr)
        return EXIT_ERROR
    # Imported once the config has parsed, so a config error costs no JAX or engine start-up
    # (0.3 s instead of about 5 s).
    from omjax.train.launch import train

    return train(cfg, seeds=seeds, resume=bool(args.resume), overwrite=args.overwrite,
                 compile_cache=not args.no_compile_cache, debug=args.debug, hosts=hosts)


if __name__ == "__main__":
    sys.exit(main())
