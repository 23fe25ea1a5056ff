"""Real-trace benchmark: the Microsoft ITP and Alibaba GPU traces through the offline simulator.

Run: .venv/bin/python bench/trace_bench.py [--traces DIR] [--only itp|alibaba|contended]
     [--fractions 0.25 0.5 1] [--timeout S] [--root TREE] [--profile]

The traces are read from `../shared/traces` beside the repository (or `--traces`, or
$QUOTAFLOW_TRACES); when that folder is absent the benchmark says so and prints no table.
Nothing from the traces is copied into the project.

Workloads (virtual time: the simulator's built-in agent finishes each job `duration_s` after
it starts, so no trace is compressed unless said so):

- **itp**: every cluster file of msft-itp (all 10) is one queue of one cluster of 150 nodes x
  8 GPUs (64 cores, 512 GB each); quotas split the GPUs equally, limits unlimited. A job of
  n GPUs asks one task of n GPUs up to 8, n/8 tasks of 8 GPUs when n is a multiple of 8, else
  n tasks of one GPU (a gang); 6 cores and 48 GB per GPU.
- **alibaba**: openb's 1,213 GPU nodes (their gpu, cpu, memory) and 8,152 pods, one queue per
  qos class with quotas splitting the GPUs equally; a pod asks num_gpu GPUs, or gpu_milli/1000
  of one GPU when shared; duration deletion - scheduled (or - creation if never scheduled).
- **contended**: alibaba with every other node kept and arrivals compressed 3,000x.

Each size (the first 1/4, 1/2 or all of the jobs, by submission time) runs in its own process
with a time limit, so a run that does not finish is reported as such and peak memory (max
RSS) is that run's own. Wall and CPU time cover feeding the JSON lines through
`domain.simulation.Simulator` (decode, fold, cycles, encode) after the input is built.
`commands` and `sha` (the first 12 hex digits of the SHA-256 of the output lines) let two
trees be compared: the same sha means the same decisions.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ITP_NODES = 150
GPU_CPU, GPU_MEMORY = 6_000, 48_000
SETS = ("itp", "alibaba", "contended")


def traces_dir(given: str | None) -> Path:
    if given:
        return Path(given)
    if os.environ.get("QUOTAFLOW_TRACES"):
        return Path(os.environ["QUOTAFLOW_TRACES"])
    return (REPO / ".." / "shared" / "traces").resolve()


def _line(ts: int, **fields: object) -> dict[str, object]:
    return {"ts": ts, **fields}


def _queue(name: str, quota: float) -> dict[str, object]:
    return {
        "type": "QueueConfigured",
        "queue": name,
        "resources": {"gpu": {"quota": quota, "limit": -1}},
    }


def itp_lines(root: Path, fraction: float) -> tuple[list[dict[str, object]], int]:
    folder = root / "msft-itp"
    files = sorted(folder.glob("cluster*.csv"))
    head: list[dict[str, object]] = [_line(0, type="ClusterConfigured", heartbeat_timeout_s=10**9)]
    quota = ITP_NODES * 8 // len(files)
    head += [_line(0, **_queue(path.stem, quota)) for path in files]
    capacity = {"gpu": 8, "cpu": 64_000, "memory": 512_000}
    head += [
        _line(0, type="NodeHeartbeat", node=f"n{i:04d}", capacity=capacity)
        for i in range(ITP_NODES)
    ]
    jobs: list[tuple[int, str, dict[str, object]]] = []
    for path in files:
        with path.open() as source:
            rows = sorted(csv.DictReader(source), key=lambda r: int(r["submission_time"]))
        for row in rows[: round(len(rows) * fraction)]:
            gpus = int(row["num_gpu"])
            if gpus <= 8:
                tasks, per = 1, gpus
            elif gpus % 8 == 0:
                tasks, per = gpus // 8, 8
            else:
                tasks, per = gpus, 1
            ident = f"{path.stem}-{row['job_id'][:18]}"
            event = {
                "type": "JobSubmitted",
                "job": ident,
                "queue": path.stem,
                "tasks": tasks,
                "resources": {"gpu": per, "cpu": GPU_CPU * per, "memory": GPU_MEMORY * per},
                "duration_s": int(row["duration"]),
            }
            jobs.append((int(row["submission_time"]) * 1000 + 1, ident, event))
    jobs.sort(key=lambda item: (item[0], item[1]))
    return head + [_line(ts, **event) for ts, _, event in jobs], len(jobs)


def alibaba_lines(
    root: Path, fraction: float, every_other_node: bool, compress: int
) -> tuple[list[dict[str, object]], int]:
    folder = root / "alibaba-gpu-v2023"
    with (folder / "openb_node_list_gpu_node.csv").open() as source:
        nodes = list(csv.DictReader(source))
    if every_other_node:
        nodes = nodes[::2]
    with (folder / "openb_pod_list_default.csv").open() as source:
        pods = sorted(csv.DictReader(source), key=lambda r: (int(r["creation_time"]), r["name"]))
    pods = pods[: round(len(pods) * fraction)]
    classes = sorted({"ls", "be", "burstable", "guaranteed"})
    gpus = sum(int(node["gpu"]) for node in nodes)
    head: list[dict[str, object]] = [_line(0, type="ClusterConfigured", heartbeat_timeout_s=10**9)]
    head += [_line(0, **_queue(name, gpus // len(classes))) for name in classes]
    head += [
        _line(
            0,
            type="NodeHeartbeat",
            node=node["sn"],
            capacity={
                "gpu": int(node["gpu"]),
                "cpu": int(node["cpu_milli"]),
                "memory": int(node["memory_mib"]),
            },
        )
        for node in nodes
    ]
    lines: list[dict[str, object]] = []
    for pod in pods:
        created = int(pod["creation_time"])
        start = int(pod["scheduled_time"]) if pod["scheduled_time"] else created
        count, milli = int(pod["num_gpu"]), int(pod["gpu_milli"])
        gpu: float = milli / 1000 if count == 1 and milli < 1000 else count
        event = {
            "type": "JobSubmitted",
            "job": pod["name"],
            "queue": pod["qos"].lower(),
            "resources": {
                "gpu": gpu,
                "cpu": int(pod["cpu_milli"]),
                "memory": int(pod["memory_mib"]),
            },
            "duration_s": max(0, int(pod["deletion_time"]) - start),
        }
        lines.append(_line(created * 1000 // compress + 1, **event))
    return head + lines, len(pods)


def build(which: str, root: Path, fraction: float) -> tuple[list[bytes], int, str]:
    if which == "itp":
        lines, jobs = itp_lines(root, fraction)
        note = f"{ITP_NODES} nodes x 8 GPUs, 10 queues (one per cluster file)"
    elif which == "alibaba":
        lines, jobs = alibaba_lines(root, fraction, False, 1)
        note = "1,213 GPU nodes, one queue per qos"
    else:
        lines, jobs = alibaba_lines(root, fraction, True, 3000)
        note = "every other node, arrivals compressed 3,000x"
    return [json.dumps(line).encode() for line in lines], jobs, note


def run_one(which: str, root: Path, fraction: float, profile: bool) -> None:
    """Child process: builds the input, simulates it, prints one JSON result line."""
    from domain.simulation import Simulator

    lines, jobs, _ = build(which, root, fraction)
    digest = hashlib.sha256()
    commands = rejected = 0
    profiler = None
    if profile:
        import cProfile

        profiler = cProfile.Profile()
        profiler.enable()
    wall, cpu = time.perf_counter(), time.process_time()
    for item in Simulator().run(lines):
        commands += 1
        rejected += item.get("type") == "Rejected"
        digest.update(json.dumps(item, sort_keys=True).encode())
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    if profiler is not None:
        import pstats

        profiler.disable()
        pstats.Stats(profiler, stream=sys.stderr).sort_stats("cumulative").print_stats(35)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    result = {
        "jobs": jobs,
        "commands": commands,
        "rejected": rejected,
        "wall": wall,
        "cpu": cpu,
        "rss": rss,
        "sha": digest.hexdigest()[:12],
    }
    print(json.dumps(result))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--traces", help="the traces folder (default ../shared/traces)")
    parser.add_argument("--only", choices=SETS, action="append", help="one workload (repeatable)")
    parser.add_argument("--fractions", type=float, nargs="+", default=[0.25, 0.5, 1.0])
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per run")
    parser.add_argument("--root", help="run another source tree's core (for before/after)")
    parser.add_argument("--profile", action="store_true", help="cProfile to stderr")
    parser.add_argument(
        "--child", nargs=2, metavar=("WORKLOAD", "FRACTION"), help=argparse.SUPPRESS
    )
    args = parser.parse_args(argv)
    root = traces_dir(args.traces)
    if args.child:
        sys.path.insert(0, args.root or str(REPO))
        run_one(args.child[0], root, float(args.child[1]), args.profile)
        return 0
    if not root.is_dir():
        print(f"traces folder not found at {root}: no trace benchmark run (pass --traces DIR)")
        return 0
    tree = args.root or str(REPO)
    print(f"python {sys.version.split()[0]}; traces {root}; core from {tree}")
    print(
        "| workload | size | jobs | commands (rejected) | wall s | CPU s | peak RSS MB | CPU ms/job | sha |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|---|")
    for which in args.only or list(SETS):
        timed_out = False
        for fraction in args.fractions:
            label = {0.25: "1/4", 0.5: "1/2", 1.0: "full"}.get(fraction, str(fraction))
            if timed_out:
                print(f"| {which} | {label} | not run: a smaller size did not finish | |")
                continue
            command = [sys.executable, __file__, "--child", which, str(fraction)]
            command += ["--traces", str(root), "--root", tree]
            if args.profile:
                command.append("--profile")
            try:
                done = subprocess.run(
                    command, capture_output=True, text=True, timeout=args.timeout, check=False
                )
            except subprocess.TimeoutExpired:
                print(f"| {which} | {label} | | | did not finish in {args.timeout:.0f} s | | | | |")
                timed_out = True
                sys.stdout.flush()
                continue
            if args.profile:
                sys.stderr.write(done.stderr)
            if done.returncode != 0:
                print(f"| {which} | {label} | failed: {done.stderr.strip()[-300:]} |")
                continue
            r = json.loads(done.stdout.strip().splitlines()[-1])
            print(
                f"| {which} | {label} | {r['jobs']:,} | {r['commands']:,} ({r['rejected']}) | {r['wall']:.1f} | "
                f"{r['cpu']:.1f} | {r['rss']:.0f} | {1000 * r['cpu'] / r['jobs']:.2f} | "
                f"{r['sha']} |"
            )
            sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
