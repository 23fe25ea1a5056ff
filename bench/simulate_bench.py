"""`quotaflow simulate` end to end: decisions per second next to merely reading and writing lines.

Run: .venv/bin/python bench/simulate_bench.py [--nodes 5000] [--jobs 10000] [--queues 20]
     [--nodes-down 0] [--root TREE]

Writes a JSON-lines file (ClusterConfigured, `--queues` queues sharing the GPUs' quota, `--nodes`
nodes of 8 GPUs, then `--jobs` one-GPU submissions, each at its own ts and the queues taken in
turn, with `--nodes-down` NodeDown directives as they begin), then runs, each as its own
process:

1. `python -m cli simulate FILE > OUT` (the real command, start-up included);
2. the floor: a process that imports the same CLI, reads the same file line by line, parses
   each line with orjson and writes as many output lines as simulate wrote (a Dispatch-sized
   object serialised with orjson), so it pays Python start-up, the imports and the I/O, but
   no validation, no state and no cycle.

Prints CPU time (user + system of the child) and wall time of each, decisions (Dispatch lines)
per CPU second, and the ratio of the two CPU times. `sha` (of simulate's output) compares trees.

The tree's modules are compiled to bytecode first (`compileall`), so both runs read cached
bytecode as every run after a user's first does. Without that, an environment with
PYTHONDONTWRITEBYTECODE set (as some sandboxes and containers have) compiles the project's
modules in every run: about 0.4 s of CPU added to each of the two runs, which made the floor
look twice as slow and the ratio look better than it is.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import orjson

REPO = Path(__file__).resolve().parents[1]
QUEUES = 20  # the goal's run (issue 12); `--queues` shows what idle queues cost a cycle
PACKAGES = ("cli", "domain", "streams", "projections", "devtools")  # what `cli` may import

FLOOR = """
import sys, orjson
import cli.main  # the same imports as the real command
count = int(sys.argv[2])
out = sys.stdout.buffer
with open(sys.argv[1], "rb") as source:
    for line in source:
        orjson.loads(line)
line = orjson.dumps({"type": "Dispatch", "job": "j000001", "node": "n00001", "tasks": 1,
    "resources": {"gpu": 1, "cpu": 4000, "memory": 32000}, "attempt": 1, "seq": 1, "ts": 1,
    "reason": "quota"})
for _ in range(count):
    out.write(line + b"\\n")
out.flush()
"""


def write_input(
    path: Path, nodes: int, jobs: int, queues: int = QUEUES, nodes_down: int = 0
) -> None:
    with path.open("wb") as out:
        lines: list[dict[str, object]] = [{"type": "ClusterConfigured", "ts": 0}]
        for index in range(queues):
            lines.append(
                {
                    "type": "QueueConfigured",
                    "ts": 0,
                    "queue": f"q{index:02d}",
                    "resources": {"gpu": {"quota": nodes * 8 // queues, "limit": -1}},
                }
            )
        capacity = {"gpu": 8, "cpu": 64_000, "memory": 512_000}
        for index in range(nodes):
            lines.append(
                {"type": "NodeHeartbeat", "ts": 0, "node": f"n{index:05d}", "capacity": capacity}
            )
        for index in range(nodes_down):  # failed as the submissions begin (contract section 7)
            lines.append({"type": "NodeDown", "ts": 1000, "node": f"n{index:05d}"})
        for index in range(jobs):
            lines.append(
                {
                    "type": "JobSubmitted",
                    "ts": 1000 + index,
                    "job": f"j{index:06d}",
                    "queue": f"q{index % queues:02d}",
                    "resources": {"gpu": 1, "cpu": 4000, "memory": 32_000},
                }
            )
        for line in lines:
            out.write(orjson.dumps(line) + b"\n")


def timed(command: list[str], tree: str, out_path: Path) -> tuple[float, float]:
    env = {**os.environ, "PYTHONPATH": tree}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    wall = time.perf_counter()
    with out_path.open("wb") as out:
        subprocess.run(command, stdout=out, env=env, cwd=tree, check=True)
    wall = time.perf_counter() - wall
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, wall


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--nodes", type=int, default=5_000)
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--queues", type=int, default=QUEUES)
    parser.add_argument("--nodes-down", type=int, default=0, help="NodeDown directives")
    parser.add_argument("--root", help="run another source tree (for before/after)")
    args = parser.parse_args(argv)
    tree = args.root or str(REPO)
    packages = [str(Path(tree) / name) for name in PACKAGES if (Path(tree) / name).is_dir()]
    subprocess.run([sys.executable, "-m", "compileall", "-q", *packages], check=True)
    with tempfile.TemporaryDirectory() as folder:
        source, out = Path(folder) / "in.jsonl", Path(folder) / "out.jsonl"
        write_input(source, args.nodes, args.jobs, args.queues, args.nodes_down)
        cpu, wall = timed([sys.executable, "-m", "cli", "simulate", str(source)], tree, out)
        data = out.read_bytes()
        lines = data.count(b"\n")
        decisions = data.count(b'"type":"Dispatch"')
        sha = hashlib.sha256(data).hexdigest()[:12]
        floor_cpu, floor_wall = timed(
            [sys.executable, "-c", FLOOR, str(source), str(lines)], tree, Path(folder) / "f"
        )
    print(f"python {sys.version.split()[0]}; tree {tree}; its bytecode compiled before timing")
    print(
        f"\n`quotaflow simulate`: {args.nodes} nodes x 8 GPUs, {args.queues} queues, "
        f"{args.jobs} one-GPU submissions, {args.nodes_down} nodes failing as they begin"
    )
    print(
        "| run | CPU s | wall s | output lines | decisions | decisions/s (CPU) | "
        "CPU vs floor | sha |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---|")
    print(
        f"| simulate | {cpu:.2f} | {wall:.2f} | {lines:,} | {decisions:,} | "
        f"{decisions / cpu:,.0f} | {cpu / floor_cpu:.1f}x | {sha} |"
    )
    print(f"| read + write floor | {floor_cpu:.2f} | {floor_wall:.2f} | {lines:,} | | | 1.0x | |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
