"""Metrics benchmark: what the scheduler's metrics hook costs per transaction, and what one scrape costs.

Run: .venv/bin/python bench/metrics_bench.py [--quick]

Table 1: `SchedulerMonitor.committed` (the sequencer's one hook, called after each committed
transaction) per call, with the commands of a busy cycle, next to the pure cycle it follows
(a submission cycle on the same cluster): the hook's share of the scheduling loop.
Table 2: one /metrics page (every queue, job and node gauge, rendered by prometheus-client)
of the scheduler and of the projections, for a full cluster: paid per scrape, never by the
scheduling loop. Times are CPU time of this process (time.process_time).
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.core_bench import SEED, Core, cluster_setup, full_cluster, ms, percentile
from domain.events import JobSubmitted
from domain.plugins import DEFAULT_PLUGINS
from domain.wire_types import ResourcesIn
from projections.metrics import exposition, registry_for
from projections.view import View
from streams.metrics import SchedulerMonitor, generate_latest
from streams.snapshots import SnapshotWriter

clock = time.process_time


def table_hook(nodes: int, submissions: int) -> None:
    core = Core()
    core.group(cluster_setup(nodes, consolidation=True), ts=0)
    monitor = SchedulerMonitor("default")
    rng = random.Random(SEED)
    cycles: list[float] = []
    hooks: list[float] = []
    for index in range(submissions):
        job = JobSubmitted(
            job=f"j{index:06d}",
            queue=f"q{rng.randrange(20):02d}",
            resources=ResourcesIn(gpu=1, cpu=4000, memory=32_000),
        )
        began = clock()
        commands = core.group([job])
        cycles.append(clock() - began)
        began = clock()
        monitor.committed(
            journaled=1, ticks=0, rejections=[], commands=commands,
            cycle_s=cycles[-1], transaction_s=cycles[-1], seq=core.seq, ts=core.ts,
        )  # fmt: skip
        hooks.append(clock() - began)
    print(f"\n### Table 1: the hook per transaction ({nodes} nodes, {submissions} submissions)\n")
    print("| | p50 ms | p99 ms |")
    print("|---|---:|---:|")
    print(
        f"| submission cycle (pure core) | {ms(percentile(cycles, 0.5))} | {ms(percentile(cycles, 0.99))} |"
    )
    print(
        f"| `SchedulerMonitor.committed` | {ms(percentile(hooks, 0.5))} | {ms(percentile(hooks, 0.99))} |"
    )


def table_scrape(nodes: int, pending: int) -> None:
    core, _ = full_cluster(nodes, pending, random.Random(SEED), DEFAULT_PLUGINS, True)
    monitor = SchedulerMonitor("default")

    class Held:  # what the monitor reads of a scheduler
        state = core.state
        snapshots = SnapshotWriter("snapshots", "default", every_records=0)
        clock = staticmethod(lambda: 0)

        def ingress_reader(self) -> tuple[None, list[object]]:
            return None, []

    monitor.attach(Held())
    view = View(state=core.state)
    projections = registry_for(lambda: view, lambda: {"lag": 0, "last_record_s": 0.0})
    print(f"\n### Table 2: one /metrics page ({nodes} nodes, {nodes + pending} jobs, 20 queues)\n")
    print("| page | ms | bytes |")
    print("|---|---:|---:|")
    for name, render in (
        ("scheduler", lambda: generate_latest(monitor.registry)),
        ("projections", lambda: exposition(projections)),
    ):
        times = []
        for _ in range(5):
            began = clock()
            page = render()
            times.append(clock() - began)
        print(f"| {name} | {ms(percentile(times, 0.5))} | {len(page):,} |")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="500 nodes: seconds")
    args = parser.parse_args(argv)
    nodes = 500 if args.quick else 5000
    table_hook(nodes, 1000 if args.quick else 5000)
    table_scrape(nodes, 1000 if args.quick else 10_000)


if __name__ == "__main__":
    main()
