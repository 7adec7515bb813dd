"""Benchmarks: `python -m omjax.bench <name> [args]`. Each prints a side-by-side ratio in one run.

A benchmark is a module `omjax.bench.<name>` with `main(argv: list[str]) -> int`.
"""
