"""The layout of `conformance/` stays readable: no module over 800 lines, and no import circle,
counting imports inside functions (the runner's layout reads case file -> loader -> run ->
verdicts -> reports; a circle is where that order breaks)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "conformance"
MAX_LINES = 800


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, modules: set[str]) -> set[str]:
    """The conformance modules `path` imports anywhere in its text (a `from X import name` that
    names a submodule counts as importing the submodule)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name in modules}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module not in modules:
                continue
            subs = {f"{node.module}.{alias.name}" for alias in node.names}
            found |= (subs & modules) or {node.module}
    return found


def test_no_module_is_over_800_lines():
    long = {str(p.relative_to(ROOT)): n for p in PACKAGE.rglob("*.py")
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert long == {}, "split these modules"


def test_no_import_circle_counting_imports_inside_functions():
    paths = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    modules = set(paths)
    graph = {name: _imports(path, modules) - {name} for name, path in paths.items()}
    # A package's __init__ importing its own submodules is how packages export names, and a
    # submodule importing a sibling through the package is not a circle of the layout.
    for name in graph:
        graph[name] = {m for m in graph[name]
                       if not (m.startswith(name + ".") or name.startswith(m + "."))}
    state: dict[str, int] = {}
    circles: list[list[str]] = []

    def visit(node: str, trail: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                circles.append([*trail[trail.index(nxt):], nxt])
            elif nxt not in state:
                visit(nxt, [*trail, nxt])
        state[node] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name, [name])
    assert circles == [], "\n".join(" -> ".join(c) for c in circles)
