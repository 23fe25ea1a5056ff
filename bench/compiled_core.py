"""Builds a copy of this tree whose scheduling cycle is compiled by mypyc, to measure what compiling buys (bench).

Run: .venv/bin/python bench/compiled_core.py --out DIR [--rev HEAD]
Then measure it beside the interpreted tree, one at a time, with the benchmarks' --root:

    .venv/bin/python bench/scale_bench.py --root DIR
    .venv/bin/python bench/trace_bench.py --root DIR --only itp --fractions 0.25
    bash DIR/scripts/check-simulate-outputs       # every scenario, byte for byte

The copy is the committed tree at REV (`git archive`); mypyc (shipped with mypy, a dev
dependency) compiles the modules of domain/cycle, domain/actions, domain/rules and
domain/policies into C extensions beside their sources, which Python then imports instead
of them. Two modules stay interpreted, each for a reason mypyc gives: the cycle's interfaces
(framework.py: runtime-checkable Protocols) and the session (session.py: it hands the victim
search a weak proxy of itself, and mypyc's native classes take no weak references). The
rest of domain/ (state, entities, the pydantic contract models) is not compiled either.

QuotaFlow itself runs interpreted: nothing in the product imports this, and the tests run
the sources. The copy links DIR/.venv to this tree's, so its scripts run as they do here.
DIR must be new, empty or an earlier build of this tool (which is replaced): nothing else
is ever deleted.
"""

from __future__ import annotations

import argparse
import io
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("domain/cycle", "domain/actions", "domain/rules", "domain/policies")
MARK = ".compiled-core"  # left in a folder this tool built: only such a folder is rebuilt
INTERPRETED = {
    "domain/cycle/framework.py": "runtime-checkable Protocols",
    "domain/cycle/session.py": "a weak proxy of the session; native classes take none",
}


def modules(tree: Path) -> list[str]:
    """The sources mypyc compiles, relative to the tree, in a stable order."""
    found = []
    for package in PACKAGES:
        for source in sorted((tree / package).glob("*.py")):
            relative = source.relative_to(tree).as_posix()
            if source.name != "__init__.py" and relative not in INTERPRETED:
                found.append(relative)
    return found


def build(out: Path, rev: str) -> float:
    """Copies the tree at `rev` into `out` and compiles it there; returns the build's seconds."""
    if (out / MARK).exists():
        shutil.rmtree(out)  # an earlier build of this tool
    out.mkdir(parents=True, exist_ok=True)
    (out / MARK).touch()
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", rev], check=True, capture_output=True
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(out, filter="data")
    # mypyc's generated setup.py runs setuptools in this folder, which would validate the
    # project's pyproject.toml with the venv's (older) setuptools: set it aside.
    (out / "pyproject.toml").rename(out / "pyproject.toml.orig")
    (out / ".venv").symlink_to(REPO / ".venv")
    mypyc = Path(sys.executable).with_name("mypyc")
    began = time.perf_counter()
    subprocess.run([str(mypyc), *modules(out)], cwd=out, check=True, stdout=subprocess.DEVNULL)
    shutil.rmtree(out / "build")
    return time.perf_counter() - began


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="the folder to build in")
    parser.add_argument("--rev", default="HEAD", help="the commit to copy (default HEAD)")
    args = parser.parse_args(argv)
    out = args.out.resolve()
    if out == REPO or REPO in out.parents:
        parser.error("--out must be outside this repository")
    if out.exists() and not (out / MARK).exists() and any(out.iterdir()):
        parser.error(f"{out} is not empty and not an earlier build of this tool: name a new folder")
    seconds = build(out, args.rev)
    compiled = len(list(out.glob("domain/**/*.so")))
    print(f"compiled {compiled} modules of {args.rev} into {out} in {seconds:.0f} s")
    for source, why in INTERPRETED.items():
        print(f"interpreted: {source} ({why})")
    print(f"measure with --root {out}; check with: bash {out}/scripts/check-simulate-outputs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
