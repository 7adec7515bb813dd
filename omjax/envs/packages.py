"""Importing a third-party module without running its package's `__init__`.

Some simulators' package `__init__`s import far more than omjax needs (jaxmarl: every bundled
environment, brax included, about 10 s, plus a printed "Submoduled environments not found";
dm-meltingpot: TensorFlow through its bots). Registering a bare package object first lets the
needed submodules import on their own.
"""

from __future__ import annotations

import importlib.util
import sys
import types


def bare_package(name: str, install_hint: str) -> types.ModuleType:
    """The package `name` from sys.modules, or a bare one (no `__init__` run) registered there."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise ImportError(f"{name} is not installed; {install_hint}")
    pkg = types.ModuleType(name)
    pkg.__path__ = list(spec.submodule_search_locations)
    pkg.__spec__ = spec
    pkg.__file__ = spec.origin
    sys.modules[name] = pkg
    return pkg
