"""`omjax train`: PA-MAGRPO training from a YAML config.

    omjax train --config configs/quickstart_overcooked_smollm2.yaml [key=value ...]
    omjax train --resume runs/quickstart [key=value ...]

`key=value` overrides any config field (`train.rounds=3`, `seed=1`, `run.out_dir=runs/x`).
`--resume DIR` continues a killed run from its newest checkpoint with the config saved in DIR.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from omjax.config import ConfigError, load_config
from omjax.jax_cache import enable_compilation_cache
from omjax.train.trainer import Trainer


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="omjax train", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--config", help="YAML run config (see configs/)")
    src.add_argument("--resume", metavar="DIR", help="run directory of a stopped run to continue")
    p.add_argument("overrides", nargs="*", metavar="key=value", help="config overrides")
    p.add_argument("--no-compile-cache", action="store_true",
                   help="do not keep compiled XLA programs in ~/.cache/omjax/xla between runs")
    return p


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "train":
        argv = argv[1:]
    args = _parser().parse_args(argv)
    try:
        if args.resume:
            run_dir = Path(args.resume)
            saved = run_dir / "config.yaml"
            if not saved.is_file():
                print(f"omjax train: --resume {run_dir}: {saved} not found (not a run directory)", file=sys.stderr)
                return 2
            cfg = load_config(saved, [*args.overrides, f"run.out_dir={run_dir}"])
        else:
            cfg = load_config(args.config, args.overrides)
    except ConfigError as e:
        print(f"omjax train: config error: {e}", file=sys.stderr)
        return 2

    if not args.no_compile_cache:
        enable_compilation_cache()

    trainer = Trainer(cfg)
    try:
        rows = trainer.run(resume=bool(args.resume))
    except FileNotFoundError as e:
        print(f"omjax train: {e}", file=sys.stderr)
        return 2
    if rows:
        print(f"first round team return {rows[0]['team_return_mean']:.2f}, "
              f"last round {rows[-1]['team_return_mean']:.2f} ({len(rows)} rounds) -> {trainer.run_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
