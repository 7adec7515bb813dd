import importlib
import pkgutil
import sys

import omjax.bench as _bench


_PARTS = {"flops"}
"""Modules of the benchmarks that are not benchmarks themselves (`flops`: the analytic FLOP model
`bench round` prints)."""


def _names() -> list[str]:
    return sorted(m.name for m in pkgutil.iter_modules(_bench.__path__)
                  if not m.name.startswith("_") and m.name not in _PARTS)


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print("usage: python -m omjax.bench <name> [args]\n\nbenchmarks: " + ", ".join(_names()))
        return 0
    if argv[0] not in _names():
        print(f"unknown benchmark {argv[0]!r}; available: {', '.join(_names())}", file=sys.stderr)
        return 2
    return int(importlib.import_module(f"omjax.bench.{argv[0]}").main(argv[1:]) or 0)


sys.exit(main(sys.argv[1:]))
