"""`omjax train`: PA-MAGRPO training from a YAML config.

    omjax train --config configs/quickstart_overcooked_smollm2.yaml [key=value ...]
    omjax train --resume runs/quickstart [key=value ...]
    omjax train --config configs/quickstart_overcooked_smollm2.yaml --seeds 0-4

`--seeds 0-4` (or `0,2,5`) trains those seeds in one process, one run directory per seed
(`<run.out_dir>/seed_<s>`, each in the single-seed format); `--resume` of the group's directory
continues every seed.

`key=value` overrides any config field (`train.rounds=3`, `seed=1`, `run.out_dir=runs/x`).
`--resume DIR` continues a killed run from its newest checkpoint with the config saved in DIR.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from omjax.config import ConfigError, load_config
from omjax.jax_cache import enable_compilation_cache


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="omjax train", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--config", help="YAML run config (see configs/)")
    src.add_argument("--resume", metavar="DIR", help="run directory of a stopped run to continue")
    p.add_argument("overrides", nargs="*", metavar="key=value", help="config overrides")
    p.add_argument("--seeds", metavar="LIST", help="train several seeds in one program: 0-4 or 0,2,5")
    p.add_argument("--no-compile-cache", action="store_true",
                   help="do not keep compiled XLA programs in ~/.cache/omjax/xla between runs")
    return p


def parse_seeds(text: str) -> list[int]:
    """`0-4` -> [0, 1, 2, 3, 4]; `0,2,5` -> [0, 2, 5]; ranges and lists mix (`0-2,7`)."""
    seeds: list[int] = []
    for part in text.split(","):
        lo, sep, hi = part.strip().partition("-")
        try:
            seeds += list(range(int(lo), int(hi) + 1)) if sep else [int(lo)]
        except ValueError:
            raise ConfigError(f"--seeds {text!r}: {part!r} is not a seed or a range a-b") from None
    if not seeds or len(set(seeds)) != len(seeds) or min(seeds) < 0:
        raise ConfigError(f"--seeds {text!r}: need distinct seeds >= 0")
    return seeds


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "train":
        argv = argv[1:]
    args = _parser().parse_args(argv)
    # Imported here, not at the top: `omjax train --help` then answers without loading JAX.
    from omjax.train.trainer import Trainer, read_group

    try:
        seeds = parse_seeds(args.seeds) if args.seeds else None
        if args.resume:
            run_dir = Path(args.resume)
            saved = run_dir / "config.yaml"
            if not saved.is_file():
                print(f"omjax train: --resume {run_dir}: {saved} not found (not a run directory)", file=sys.stderr)
                return 2
            cfg = load_config(saved, [*args.overrides, f"run.out_dir={run_dir}"])
            group = read_group(run_dir)
            if seeds is not None and group is not None and seeds != group:
                print(f"omjax train: --resume {run_dir} trains seeds {group}, not --seeds {args.seeds}",
                      file=sys.stderr)
                return 2
            seeds = group if group is not None else seeds
        else:
            cfg = load_config(args.config, args.overrides)
    except ConfigError as e:
        print(f"omjax train: config error: {e}", file=sys.stderr)
        return 2

    if not args.no_compile_cache:
        enable_compilation_cache()

    trainer = Trainer(cfg, seeds=seeds)
    try:
        runs = trainer.run_group(resume=bool(args.resume))
    except FileNotFoundError as e:
        print(f"omjax train: {e}", file=sys.stderr)
        return 2
    for run_dir, rows in zip(trainer.run_dirs, runs):
        if rows:
            print(f"first round team return {rows[0]['team_return_mean']:.2f}, "
                  f"last round {rows[-1]['team_return_mean']:.2f} ({len(rows)} rounds) -> {run_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
