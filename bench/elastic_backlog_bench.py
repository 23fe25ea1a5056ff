"""A shrunk elastic job beside a backlog: what a cycle costs as the backlog grows (bench).

Run: .venv/bin/python bench/elastic_backlog_bench.py [--backlogs 5000 20000] [--cycles 2000]
     [--root TREE]

100 nodes of 8 GPUs and four queues of 200 GPUs' quota. An elastic job of 2,000 one-GPU
tasks (at least one) takes what is free and can always grow, so the expand action runs in
every cycle; then `--backlogs` one-GPU jobs arrive at one ts, and `--cycles` more one at a
time, each at its own ts (a cycle each). Each size runs twice as `python -m cli simulate
FILE` (its own process, bytecode compiled first): without the later jobs, then with them;
it prints both CPU times, their difference per later cycle, and the output's sha (to compare
trees: `--root` runs another source tree). Until
stop 54 the expand action read every pending job in every such cycle, so the time per
cycle grew with the backlog.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

import orjson

REPO = Path(__file__).resolve().parents[1]
QUEUES = 4
NODES = 100


def write_input(path: Path, backlog: int, cycles: int) -> None:
    lines: list[dict[str, object]] = [{"type": "ClusterConfigured", "ts": 0}]
    for index in range(QUEUES):
        lines.append(
            {
                "type": "QueueConfigured",
                "ts": 0,
                "queue": f"q{index}",
                "resources": {"gpu": {"quota": NODES * 8 // QUEUES}},
            }
        )
    capacity = {"gpu": 8, "cpu": 64_000, "memory": 512_000}
    for index in range(NODES):
        lines.append(
            {"type": "NodeHeartbeat", "ts": 0, "node": f"n{index:03d}", "capacity": capacity}
        )
    elastic = {"job": "elastic", "queue": "q0", "tasks": 2000, "min_tasks": 1}
    lines.append({"type": "JobSubmitted", "ts": 1, **elastic, "resources": {"gpu": 1}})
    for index in range(backlog):
        queue = f"q{index % QUEUES}"
        lines.append(
            {
                "type": "JobSubmitted",
                "ts": 2,
                "job": f"b{index:06d}",
                "queue": queue,
                "resources": {"gpu": 1},
            }
        )
    for index in range(cycles):
        queue = f"q{index % QUEUES}"
        lines.append(
            {
                "type": "JobSubmitted",
                "ts": 10 + index,
                "job": f"x{index:06d}",
                "queue": queue,
                "resources": {"gpu": 1},
            }
        )
    with path.open("wb") as out:
        for line in lines:
            out.write(orjson.dumps(line) + b"\n")


def compiled(tree: str) -> None:
    """Compiles the tree's CLI and core to bytecode, so a timed run reads it as every run
    after a user's first does; says so."""
    packages = [
        str(Path(tree) / name) for name in ("cli", "domain") if (Path(tree) / name).is_dir()
    ]
    subprocess.run([sys.executable, "-m", "compileall", "-q", *packages], check=True)
    print(f"python {sys.version.split()[0]}; tree {tree}; its bytecode compiled before timing")


def simulate(tree: str, source: Path, out: Path) -> float:
    """`python -m cli simulate SOURCE > OUT` with the tree's code; its CPU seconds."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    with out.open("wb") as sink:
        subprocess.run(
            [sys.executable, "-m", "cli", "simulate", str(source)],
            stdout=sink,
            env={**os.environ, "PYTHONPATH": tree},
            cwd=tree,
            check=True,
        )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--backlogs", type=int, nargs="+", default=[5_000, 20_000])
    parser.add_argument("--cycles", type=int, default=2_000)
    parser.add_argument("--root", help="run another source tree (for before/after)")
    args = parser.parse_args(argv)
    tree = args.root or str(REPO)
    compiled(tree)
    print(
        f"\n{NODES} nodes x 8 GPUs, {QUEUES} queues, one shrunk elastic job, {args.cycles} cycles"
    )
    print("| backlog | CPU s, backlog alone | CPU s, with the cycles | ms a cycle | sha |")
    print("|---:|---:|---:|---:|---|")
    with tempfile.TemporaryDirectory() as folder:
        for backlog in args.backlogs:
            source, out = Path(folder) / "in.jsonl", Path(folder) / "out.jsonl"
            write_input(source, backlog, 0)
            alone = simulate(tree, source, out)
            write_input(source, backlog, args.cycles)
            cpu = simulate(tree, source, out)
            sha = hashlib.sha256(out.read_bytes()).hexdigest()[:12]
            per_cycle = 1000 * (cpu - alone) / args.cycles
            print(f"| {backlog:,} | {alone:.2f} | {cpu:.2f} | {per_cycle:.2f} | {sha} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
