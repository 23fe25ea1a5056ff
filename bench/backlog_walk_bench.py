"""Backlog walk: what one step over a blocked look-alike costs in a cycle (bench).

Run: .venv/bin/python bench/backlog_walk_bench.py [--jobs 20000] [--root TREE]

One 8-GPU node runs an 8-GPU job; a round-robin queue then holds `--jobs` one-GPU jobs of
three priorities. Round-robin tries every pending job in every cycle, and all of them are
blocked for the same reason, so a cycle is the walk: one full try per shape and a step per
other job. Runs seven cycles (the first sets every job's reason) and prints the fastest's
CPU time, per job. Since stop 35 the cycle that folds the backlog walks every job and settles
the walk (docs/policies.md, "Settled walks"), so each of the seven steps only the first job
of each shape: the time no longer grows with `--jobs`. `--root` runs another source tree's
core (for before/after).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def run(jobs: int) -> float:
    from domain.decider import close_group, fold, initial_state, run_cycle
    from domain.events import (
        ClusterConfigured,
        Event,
        JobSubmitted,
        JournalRecord,
        NodeHeartbeat,
        QueueConfigured,
    )
    from domain.plugins import DEFAULT_PLUGINS
    from domain.wire_types import QueuePolicyConfig, QueueResource, ResourcesIn

    state = initial_state()
    seq = 0

    def group(ts: int, events: list[Event]) -> None:
        nonlocal state, seq
        for item in events:
            seq += 1
            state, _ = fold(state, JournalRecord(seq=seq, ts=ts, event=item), DEFAULT_PLUGINS)
        state, _ = close_group(state, DEFAULT_PLUGINS)

    gpu = ResourcesIn(gpu=1, cpu=0, memory=0)
    group(
        0,
        [
            ClusterConfigured(heartbeat_timeout_s=10**9),
            QueueConfigured(
                queue="q",
                resources={"gpu": QueueResource(quota=8, limit=-1)},
                policy=QueuePolicyConfig(kind="round_robin"),
            ),
            NodeHeartbeat(node="n0", capacity=ResourcesIn(gpu=8, cpu=64_000, memory=512_000)),
            JobSubmitted(job="big", queue="q", resources=ResourcesIn(gpu=8, cpu=0, memory=0)),
        ],
    )
    backlog: list[Event] = [
        JobSubmitted(job=f"j{i:06d}", queue="q", priority=1 + i % 3, resources=gpu)
        for i in range(jobs)
    ]
    group(1000, backlog)
    fastest = float("inf")
    for _ in range(7):
        state.ts += 1
        state.needs_cycle = True
        began = time.process_time()
        run_cycle(state, DEFAULT_PLUGINS)
        fastest = min(fastest, time.process_time() - began)
    return fastest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--root", help="run another source tree's core (for before/after)")
    args = parser.parse_args(argv)
    tree = args.root or str(REPO)
    sys.path.insert(0, tree)
    fastest = run(args.jobs)
    print(f"core from {tree}: {args.jobs} blocked look-alikes in a round-robin queue")
    print(
        f"fastest of 7 cycles: {fastest * 1000:.1f} ms CPU, {fastest / args.jobs * 1e6:.2f} us a job"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
