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
