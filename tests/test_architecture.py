"""The layers: no import cycle between any two modules, and imports between top-level packages point one way.

Every import counts, including those inside functions and under TYPE_CHECKING: an import
hidden in a function still ties two modules together, and a cycle kept alive that way is
the one that surprises the next reader.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("domain", "streams", "projections", "devtools", "cli")
# What each top-level package may import from the others (docs/architecture.md's table).
MAY_IMPORT: dict[str, set[str]] = {
    "domain": set(),
    "projections": {"domain"},
    "streams": {"domain"},
    "devtools": set(),
    "cli": {"domain", "streams", "projections", "devtools"},
}


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def project_modules(root: Path, packages: Iterable[str] = PACKAGES) -> dict[str, Path]:
    """Every module of the packages, by dotted name."""
    found: dict[str, Path] = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            found[module_name(path, root)] = path
    return found


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    """The project modules `name` imports, anywhere in its body (relative imports resolved)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: set[str] = set()

    def add(target: str) -> None:
        # `import a.b.c` and `from a.b import c` reach the deepest project module named.
        while target and target not in known:
            target = target.rpartition(".")[0]
        if target and target != name:
            out.add(target)

    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                add(alias.name)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                add(f"{base}.{alias.name}" if base else alias.name)
    return out


def graph(root: Path, packages: Iterable[str] = PACKAGES) -> dict[str, set[str]]:
    modules = project_modules(root, packages)
    known = set(modules)
    return {name: imports_of(name, path, known) for name, path in modules.items()}


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(start: str) -> None:
        # Iterative, so a long chain of imports cannot hit the recursion limit.
        work = [(start, iter(sorted(edges.get(start, ()))))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return sorted(found)


def wrong_directions(edges: dict[str, set[str]]) -> list[str]:
    out = []
    for source, targets in sorted(edges.items()):
        top = source.split(".")[0]
        for target in sorted(targets):
            other = target.split(".")[0]
            if other != top and other not in MAY_IMPORT[top]:
                out.append(
                    f"{source} imports {target} ({top}/ may import {sorted(MAY_IMPORT[top])})"
                )
    return out


# -- the project ----------------------------------------------------------------------------


def test_no_module_takes_part_in_an_import_cycle() -> None:
    found = cycles(graph(ROOT))
    assert found == [], "import cycles (break each one):\n" + "\n".join(
        " <-> ".join(c) for c in found
    )


def test_top_level_packages_import_each_other_only_downwards() -> None:
    assert wrong_directions(graph(ROOT)) == []


# -- the checker itself ---------------------------------------------------------------------


def write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_the_checker_finds_a_cycle_hidden_in_a_function_and_one_made_of_relative_imports(
    tmp_path: Path,
) -> None:
    write(
        tmp_path,
        {
            "projections/__init__.py": "",
            "projections/a.py": "from projections.b import x\n",
            "projections/b.py": "def f():\n    from projections import a\n",
            "projections/c.py": "from . import d\n",
            "projections/d.py": "from .c import y\n",
            "projections/e.py": "import projections.a\n",
            "domain/__init__.py": "",
            "domain/f.py": "from projections.e import z\n",
        },
    )
    edges = graph(tmp_path, ("projections", "domain"))
    assert cycles(edges) == [
        ["projections.a", "projections.b"],
        ["projections.c", "projections.d"],
    ]
    assert wrong_directions(edges) == ["domain.f imports projections.e (domain/ may import [])"]
