"""Scale benchmark: a cycle after one node frees, with a huge backlog over a three-level queue tree.

Run: .venv/bin/python bench/scale_bench.py [--nodes 10000] [--pending 100000] [--cycles 50]
     [--timeout S] [--root TREE] [--profile] [--collector scheduler|default]

10,000 nodes x 8 GPUs; 200 queues in three levels (8 top-level queues, 3 children each, 7
leaves under each of those: 8 + 24 + 168), quotas splitting the GPUs at every level, the
four queue policies mixed over the leaves. Every node runs one preemptible 8-GPU job; the
fillers go to two leaves of every three, so a third of the leaves are below their quota and
may reclaim. Then 100,000 jobs are submitted in one group (70% 1 GPU, 15% 2 GPU, 10% 4-task
gangs, 5% half a GPU; priorities 1-9), with the product's plugins (every preemption rule,
consolidation on). Then `--cycles` running fillers finish, one per group, each freeing a node.

Prints p50 / p99 / max CPU time of those cycles, the CPU time of the cycle that first saw
the whole backlog, and memory per pending job: the growth of the process's resident memory
(after a collection) from before the 100,000 submissions were folded to after, divided by
100,000 (Job, queue indexes and their strings; not the events, which are dropped). Runs in a
child process with a time limit (`--timeout`) so a slow tree is reported as such. `sha`
hashes the finish cycles' commands so two trees can be compared.

Garbage collection (`--collector`): by default as the scheduler sets it
(streams/gc_policy.py): before the finish cycles one full collection runs and everything
alive is frozen, as the scheduler does every 10 minutes; that pass's time is printed apart
("full collection ms": the pause a running scheduler takes once per period). `--collector
default` leaves CPython's collector as it is, whose full passes then land in some cycle.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
SEED = 20_261_200
POLICIES = ["fifo", "round_robin", "balance", "intelligent"]
TOP, MID, LEAF = 8, 3, 7


def rss_mb() -> float:
    with open("/proc/self/statm") as statm:
        pages = int(statm.read().split()[1])
    return pages * 4096 / 2**20


def percentile(samples: list[float], fraction: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def _settle_garbage(collector: str) -> float | None:
    """Before the finish cycles: the scheduler's collector policy (one full pass, then what
    lives is frozen; returns that pass's seconds), or CPython's defaults (None)."""
    if collector == "scheduler":
        try:
            from streams.gc_policy import CollectorPolicy
        except ImportError:  # an older tree: its scheduler left the collector as it is
            pass
        else:
            return CollectorPolicy().settle()
    gc.collect()
    return None


def run(
    nodes: int, pending: int, cycles: int, profile: bool, collector: str = "scheduler"
) -> dict[str, Any]:
    from domain.decider import close_group, fold, initial_state
    from domain.events import (
        ClusterConfigured,
        Event,
        JobFinished,
        JobSubmitted,
        JournalRecord,
        NodeHeartbeat,
        QueueConfigured,
    )
    from domain.plugins import DEFAULT_PLUGINS
    from domain.wire_types import QueuePolicyConfig, QueueResource, ResourcesIn

    state = initial_state()
    seq = 0
    ts = 0

    def group(events: list[Event]) -> list[Any]:
        nonlocal state, seq, ts
        ts += 1000
        for item in events:
            seq += 1
            state, _ = fold(state, JournalRecord(seq=seq, ts=ts, event=item), DEFAULT_PLUGINS)
        state, commands = close_group(state, DEFAULT_PLUGINS)
        return commands

    total = nodes * 8
    setup: list[Event] = [ClusterConfigured(heartbeat_timeout_s=10**9, consolidation=True)]
    leaves: list[str] = []
    for t in range(TOP):
        top = f"t{t}"
        setup.append(
            QueueConfigured(
                queue=top, resources={"gpu": QueueResource(quota=total // TOP, limit=-1)}
            )
        )
        for m in range(MID):
            mid = f"{top}m{m}"
            quota = total // TOP // MID
            setup.append(
                QueueConfigured(
                    queue=mid, parent=top, resources={"gpu": QueueResource(quota=quota, limit=-1)}
                )
            )
            for leaf_index in range(LEAF):
                leaf = f"{mid}l{leaf_index}"
                kind = POLICIES[len(leaves) % len(POLICIES)]
                setup.append(
                    QueueConfigured(
                        queue=leaf,
                        parent=mid,
                        resources={"gpu": QueueResource(quota=quota // LEAF, limit=-1)},
                        policy=QueuePolicyConfig(
                            kind=kind,  # type: ignore[arg-type]
                            balance_timeout_s=300,
                            aging_interval_s=600,
                        ),
                    )
                )
                leaves.append(leaf)
    capacity = ResourcesIn(gpu=8, cpu=64_000, memory=512_000)
    setup += [NodeHeartbeat(node=f"n{i:05d}", capacity=capacity) for i in range(nodes)]
    group(setup)
    busy = [leaf for index, leaf in enumerate(leaves) if index % 3 != 2]
    fillers: list[Event] = [
        JobSubmitted(
            job=f"f{i:05d}",
            queue=busy[i % len(busy)],
            priority=5,
            resources=ResourcesIn(gpu=8, cpu=8000, memory=64_000),
        )
        for i in range(nodes)
    ]
    group(fillers)
    rng = random.Random(SEED)
    jobs: list[Event] = []
    for index in range(pending):
        shape = rng.random()
        gpu, tasks = (
            (1.0, 1)
            if shape < 0.7
            else (2.0, 1)
            if shape < 0.85
            else (1.0, 4)
            if shape < 0.95
            else (0.5, 1)
        )
        jobs.append(
            JobSubmitted(
                job=f"p{index:06d}",
                queue=leaves[rng.randrange(len(leaves))],
                priority=rng.randint(1, 9),
                tasks=tasks,
                resources=ResourcesIn(gpu=gpu, cpu=4000, memory=32_000),
            )
        )
    gc.collect()
    before = rss_mb()
    ts += 1000
    for item in jobs:
        seq += 1
        state, _ = fold(state, JournalRecord(seq=seq, ts=ts, event=item), DEFAULT_PLUGINS)
    del jobs, item
    gc.collect()
    per_job = (rss_mb() - before) * 2**20 / pending
    began = time.process_time()
    state, first_commands = close_group(state, DEFAULT_PLUGINS)
    first = time.process_time() - began
    running = sorted(j for j in state.jobs if j.startswith("f") and state.jobs[j].placements)
    rng.shuffle(running)
    digest = hashlib.sha256()
    times: list[float] = []
    commands = 0
    profiler = None
    if profile:
        import cProfile

        profiler = cProfile.Profile()
    full_pass = _settle_garbage(collector)
    for job_id in running[:cycles]:
        job = state.jobs[job_id]
        if not job.placements:
            continue
        events: list[Event] = [
            JobFinished(job=job_id, node=n, attempt=job.attempt, outcome="succeeded")
            for n in sorted(job.placements)
        ]
        if profiler:
            profiler.enable()
        began = time.process_time()
        out = group(events)
        times.append(time.process_time() - began)
        if profiler:
            profiler.disable()
        commands += len(out)
        for command in out:
            digest.update(command.model_dump_json().encode())
    if profiler:
        import pstats

        pstats.Stats(profiler, stream=sys.stderr).sort_stats("cumulative").print_stats(40)
    return {
        "queues": len(state.queues),
        "first_commands": len(first_commands),
        "first": first,
        "cycles": len(times),
        "commands": commands,
        "p50": percentile(times, 0.5),
        "p99": percentile(times, 0.99),
        "max": max(times),
        "per_job": per_job,
        "sha": digest.hexdigest()[:12],
        "full_pass": full_pass,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--nodes", type=int, default=10_000)
    parser.add_argument("--pending", type=int, default=100_000)
    parser.add_argument("--cycles", type=int, default=50)
    parser.add_argument("--timeout", type=float, default=900.0)
    parser.add_argument("--root", help="run another source tree's core (for before/after)")
    parser.add_argument("--profile", action="store_true", help="cProfile the finish cycles")
    parser.add_argument(
        "--collector",
        choices=["scheduler", "default"],
        default="scheduler",
        help="garbage collection as the scheduler sets it (streams/gc_policy.py) or CPython's",
    )
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    tree = args.root or str(REPO)
    if args.child:
        sys.path.insert(0, tree)
        print(json.dumps(run(args.nodes, args.pending, args.cycles, args.profile, args.collector)))
        return 0
    command = [sys.executable, __file__, "--child", "--root", tree]
    command += ["--nodes", str(args.nodes), "--pending", str(args.pending)]
    command += ["--cycles", str(args.cycles)] + (["--profile"] if args.profile else [])
    command += ["--collector", args.collector]
    print(
        f"python {sys.version.split()[0]}; core from {tree}; CPU time per cycle; "
        f"garbage collection: {args.collector}"
    )
    print(
        f"\n{args.nodes} nodes x 8 GPUs, 200 queues in three levels, {args.pending} pending, "
        f"{args.cycles} finishes (one node frees per cycle)"
    )
    print(
        "| queues | cycles | commands | p50 ms | p99 ms | max ms | first cycle s | "
        "bytes per pending job | full collection ms | sha |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=args.timeout, check=False
        )
    except subprocess.TimeoutExpired:
        print(f"| did not finish in {args.timeout:.0f} s |")
        return 0
    if args.profile:
        sys.stderr.write(done.stderr)
    if done.returncode != 0:
        print(f"| failed: {done.stderr.strip()[-500:]} |")
        return 1
    r = json.loads(done.stdout.strip().splitlines()[-1])
    print(
        f"| {r['queues']} | {r['cycles']} | {r['commands']} | {1000 * r['p50']:.1f} | "
        f"{1000 * r['p99']:.1f} | {1000 * r['max']:.1f} | {r['first']:.1f} | "
        f"{r['per_job']:.0f} | {_ms(r['full_pass'])} | {r['sha']} |"
    )
    return 0


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{1000 * seconds:.0f}"


if __name__ == "__main__":
    sys.exit(main())
