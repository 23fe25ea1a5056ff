"""Jobs with a node selector on a full, fragmented cluster: simulate's CPU as the cluster grows (bench).

Run: .venv/bin/python bench/selector_bench.py [--nodes 500 2000] [--arrivals 3000] [--root TREE]

`--nodes` nodes of 8 GPUs, half labelled `pool=a`, four queues sharing them, filled with
one-GPU jobs of random lengths (10-600 s, fixed seed); then `--arrivals` jobs 200 ms apart,
every third an 8-GPU job pinned to `pool=a`, the others one GPU. As the small jobs end at
random, the pinned jobs find only fragments: consolidation and reclaim with moves try them
in cycle after cycle, and each try first asks what the matching nodes have free. Each size
runs `python -m cli simulate FILE` in its own process (bytecode compiled first) and prints
its CPU time and the output's sha (`--root` runs another source
tree). Until stop 54 that question summed every node, once per try and per victim taken.
"""

from __future__ import annotations

import argparse
import hashlib
import random
import sys
import tempfile
from pathlib import Path

import orjson

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.elastic_backlog_bench import compiled, simulate  # noqa: E402  (after the path)

QUEUES = 4


def write_input(path: Path, nodes: int, arrivals: int) -> None:
    rng = random.Random(7)
    lines: list[dict[str, object]] = [{"type": "ClusterConfigured", "ts": 0}]
    for index in range(QUEUES):
        quota = {"gpu": {"quota": nodes * 8 // QUEUES}}
        lines.append({"type": "QueueConfigured", "ts": 0, "queue": f"q{index}", "resources": quota})
    capacity = {"gpu": 8, "cpu": 64_000, "memory": 512_000}
    for index in range(nodes):
        labels = {"pool": "a" if index % 2 else "b"}
        node = {"node": f"n{index:05d}", "capacity": capacity, "labels": labels}
        lines.append({"type": "NodeHeartbeat", "ts": 0, **node})
    for index in range(nodes * 8):
        job = {"job": f"s{index:06d}", "queue": f"q{index % QUEUES}", "resources": {"gpu": 1}}
        lines.append(
            {"type": "JobSubmitted", "ts": 1000, **job, "duration_s": rng.randint(10, 600)}
        )
    ts = 1000
    for index in range(arrivals):
        ts += 200
        job = {"job": f"x{index:06d}", "queue": f"q{index % QUEUES}"}
        if index % 3 == 0:
            job |= {"resources": {"gpu": 8}, "node_selector": {"pool": "a"}}
        else:
            job |= {"resources": {"gpu": 1}}
        lines.append({"type": "JobSubmitted", "ts": ts, **job, "duration_s": rng.randint(10, 600)})
    with path.open("wb") as out:
        for line in lines:
            out.write(orjson.dumps(line) + b"\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[500, 2_000])
    parser.add_argument("--arrivals", type=int, default=3_000)
    parser.add_argument("--root", help="run another source tree (for before/after)")
    args = parser.parse_args(argv)
    tree = args.root or str(REPO)
    compiled(tree)
    print(f"\n{args.arrivals} arrivals, every third pinned to half the nodes")
    print("| nodes | CPU s | sha |")
    print("|---:|---:|---|")
    with tempfile.TemporaryDirectory() as folder:
        for nodes in args.nodes:
            source, out = Path(folder) / "in.jsonl", Path(folder) / "out.jsonl"
            write_input(source, nodes, args.arrivals)
            cpu = simulate(tree, source, out)
            sha = hashlib.sha256(out.read_bytes()).hexdigest()[:12]
            print(f"| {nodes:,} | {cpu:.2f} | {sha} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
