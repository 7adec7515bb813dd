"""Imports run one way: envs -> options -> prompts/interfaces -> games -> models -> train -> eval ->
bench, with leaf utilities below everything and command-line entry points above.

Every `import` / `from ... import` of an omjax module anywhere in a module (top level or inside
a function) and every `importlib.import_module("omjax....")` with a literal name is an edge; an
edge into a higher layer fails, and so does any cycle among modules (same layer included).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "omjax"

LAYERS = ("base", "envs", "options", "codecs", "games", "models", "train", "eval", "bench", "entry")
"""Bottom to top: a module may import its own layer and the layers before it."""

PACKAGE_LAYER = {
    "envs": "envs", "options": "options", "prompts": "codecs", "interfaces": "codecs", "games": "games",
    "models": "models", "train": "train", "eval": "eval", "bench": "bench",
}
BASE = {"omjax", "omjax.config", "omjax.jax_cache"}
"""Leaf utilities every layer may use (they import no other omjax module)."""
ENTRY = {"omjax.cli", "omjax.__main__"}
"""The `omjax <command>` dispatcher: it names every command module."""


def module_name(path: Path) -> str:
    parts = ("omjax",) + path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def layer(module: str) -> str:
    if module in BASE:
        return "base"
    if module in ENTRY:
        return "entry"
    package = module.split(".")[1]
    if package not in PACKAGE_LAYER:
        raise KeyError(f"module {module} is in no layer: add its package to PACKAGE_LAYER or it to BASE")
    return PACKAGE_LAYER[package]


def _resolve(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def imports(source: str, module: str, is_package: bool, known: set[str]) -> list[tuple[str, int]]:
    """(imported omjax module, line) for every import in `module`'s source, nested ones included."""
    out = []
    for node in ast.walk(ast.parse(source, module)):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            target = _resolve(module, is_package, node)
            # `from pkg import sub` imports the submodule when there is one.
            names = [f"{target}.{a.name}" if f"{target}.{a.name}" in known else target for a in node.names]
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr == "import_module" and node.args and isinstance(node.args[0], ast.Constant)
              and isinstance(node.args[0].value, str)):
            names = [node.args[0].value]
        for name in names:
            if name == "omjax" or name.startswith("omjax."):
                while name not in known and "." in name:  # `import omjax.a.b` binds omjax.a.b's module
                    name = name.rsplit(".", 1)[0]
                out.append((name, node.lineno))
    return out


def graph() -> dict[str, list[tuple[str, int]]]:
    files = {module_name(p): p for p in sorted(ROOT.rglob("*.py"))}
    known = set(files)
    return {m: [(t, line) for t, line in imports(p.read_text(), m, p.name == "__init__.py", known) if t != m]
            for m, p in files.items()}


def test_every_module_has_a_layer():
    for module in graph():
        layer(module)


def test_no_import_runs_upward():
    order = {name: k for k, name in enumerate(LAYERS)}
    upward = sorted({f"{m}:{line} imports {t} ({layer(m)} -> {layer(t)})"
                     for m, edges in graph().items() for t, line in edges if order[layer(t)] > order[layer(m)]})
    assert not upward, "imports against the layer order:\n" + "\n".join(upward)


def test_no_import_cycles():
    edges = {m: sorted({t for t, _ in e}) for m, e in graph().items()}
    state: dict[str, int] = {}
    cycles: list[list[str]] = []

    def visit(node: str, stack: list[str]) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in edges.get(node, ()):
            if state.get(nxt) == 1:
                cycles.append(stack[stack.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt, stack)
        stack.pop()
        state[node] = 2

    for node in edges:
        if node not in state:
            visit(node, [])
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)


def package(module: str) -> str:
    """omjax.train.rollout -> train; a leaf utility or entry point is its own package."""
    return module.split(".")[1] if module.count(".") >= 1 and module not in BASE | ENTRY else module


def test_no_package_cycles_and_the_models_stand_alone():
    """Packages import one another one way (no two packages import each other, directly or
    round a loop), and `omjax.models` needs no other omjax package: a backbone loads and runs
    without the games, options or prompts."""
    edges: dict[str, set[str]] = {}
    for m, e in graph().items():
        edges.setdefault(package(m), set()).update(package(t) for t, _ in e if package(t) != package(m))
    reach = {p: set(out) for p, out in edges.items()}
    for _ in edges:  # transitive closure
        for p in reach:
            reach[p] |= set().union(*(reach.get(q, set()) for q in reach[p]))
    cycles = sorted(p for p in reach if p in reach[p])
    assert not cycles, f"packages on an import cycle: {cycles}"
    assert edges["models"] <= BASE, f"omjax.models imports {sorted(edges['models'] - BASE)}"


@pytest.mark.parametrize("source, expected", [
    ("from omjax.train import rollout\n", "omjax.train.rollout"),
    ("from . import menu\n", "omjax.options.menu"),
    ("def f():\n    from omjax.envs.overcooked.env import transition\n", "omjax.envs.overcooked.env"),
    ("import importlib\nimportlib.import_module('omjax.games.overcooked')\n", "omjax.games.overcooked"),
])
def test_the_scanner_sees_top_level_relative_nested_and_dynamic_imports(source, expected):
    known = {"omjax.train.rollout", "omjax.options.menu", "omjax.envs.overcooked.env", "omjax.games.overcooked"}
    assert [name for name, _ in imports(source, "omjax.options.probe", False, known)] == [expected]
    assert layer("omjax.options.probe") == "options" and layer(expected) != "base"
