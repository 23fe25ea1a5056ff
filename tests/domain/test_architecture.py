"""The import direction: domain/ is pure and never reaches out to streams/ or projections/."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

DOMAIN = Path(__file__).resolve().parents[2] / "domain"
THIRD_PARTY = {"pydantic", "pydantic_core", "orjson"}
# Standard-library modules that bring a clock, randomness, I/O or concurrency into the core.
IMPURE = {
    "asyncio",
    "datetime",
    "os",
    "random",
    "secrets",
    "socket",
    "subprocess",
    "threading",
    "time",
    "uuid",
}
FORBIDDEN = {"aiokafka", "faust", "streams", "projections"}


def modules() -> list[Path]:
    return sorted(DOMAIN.rglob("*.py"))


def imported(path: Path) -> list[str]:
    """Top-level names of every absolute import in the module (relative ones stay in domain)."""
    names = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.append(node.module)
    return names


@pytest.mark.parametrize("path", modules(), ids=lambda p: str(p.relative_to(DOMAIN.parent)))
def test_domain_imports_only_the_standard_library_pydantic_orjson_and_itself(path: Path) -> None:
    wrong = []
    for name in imported(path):
        top = name.split(".")[0]
        allowed = top in sys.stdlib_module_names or top in THIRD_PARTY or top == "domain"
        if top in FORBIDDEN or top in IMPURE or not allowed:
            wrong.append(name)
    assert wrong == [], f"{path.name} imports {wrong}: domain/ must stay pure (STYLE.md 1)"


@pytest.mark.parametrize("path", modules(), ids=lambda p: str(p.relative_to(DOMAIN.parent)))
def test_each_domain_module_says_what_it_is_and_that_it_is_pure(path: Path) -> None:
    if path.name == "__init__.py" and not path.read_text().strip():
        return
    doc = ast.get_docstring(ast.parse(path.read_text())) or ""
    first = doc.splitlines()[0] if doc else ""
    assert "(pure)" in doc.split("\n\n")[0], (
        f"{path.name}: first line should end with (pure): {first!r}"
    )


def test_the_checker_sees_a_forbidden_import(tmp_path: Path) -> None:
    module = tmp_path / "bad.py"
    module.write_text("import time\nfrom streams.kafka_io import x\nfrom . import sibling\n")
    assert imported(module) == ["time", "streams.kafka_io"]


# -- no import cycles inside domain/ ----------------------------------------------------------


def module_name(path: Path) -> str:
    parts = list(path.relative_to(DOMAIN.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def domain_imports(path: Path, known: set[str]) -> set[str]:
    """Every domain module the module imports, anywhere in it (type-checking-only imports
    and imports inside functions count: a cycle is a cycle however it is hidden)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            # `from domain.x import y` may name a module (domain.x.y) or a name in domain.x.
            names = [f"{node.module}.{alias.name}" for alias in node.names] + [node.module]
        for name in names:
            while name and name not in known:
                name = name.rpartition(".")[0]
            if name:
                found.add(name)
    return found


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected groups of more than one module, or a module importing itself
    (Tarjan's algorithm, iterative; sorted for a stable message)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    cycles: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            for target in edges:
                if target not in index:
                    index[target] = low[target] = counter
                    counter += 1
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(sorted(graph[target]))))
                    break
                if target in on_stack:
                    low[node] = min(low[node], index[target])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    group = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        group.append(member)
                        if member == node:
                            break
                    if len(group) > 1 or node in graph[node]:
                        cycles.append(sorted(group))
    return sorted(cycles)


def domain_graph() -> dict[str, set[str]]:
    paths = {module_name(path): path for path in modules()}
    known = set(paths)
    return {
        name: {target for target in domain_imports(path, known) if target != "domain"}
        - ({name} if path.name == "__init__.py" else set())
        for name, path in paths.items()
    }


def test_import_cycles_are_found() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": {"e"}, "f": set()}
    assert import_cycles(graph) == [["a", "b", "c"], ["e"]]


def test_no_import_cycles_inside_domain() -> None:
    graph = domain_graph()
    assert "domain.cycle.session" in graph and "domain.plugins" in graph
    assert import_cycles(graph) == []
