"""Pure-core benchmark: fold generated workloads through the decider and time each cycle.

Run: .venv/bin/python bench/core_bench.py [--quick] [--only 1|2|3] [--profile]

Table 1 (submission stream): a cluster of 5,000 nodes x 8 GPUs and 20 queues receives 10,000
one-GPU jobs, each its own journal group and so its own cycle. Prints decisions (Dispatch
commands) per second, p50 / p99 time per cycle and peak memory.

Table 2 (full cluster, long queues): every GPU is taken by 8-GPU jobs; N jobs are pending over
20 queues with mixed policies (fifo, round_robin, balance, intelligent; 5 queues each) and
mixed shapes (1, 2 and 0.5 GPU, 4-task gangs); then running jobs finish one per group, each
freeing a node. Prints p50 / p99 per cycle for N = 1k, 5k, 10k, 20k: how one cycle's cost
grows with the number of pending jobs. Queue policies and allocation only: no preemption rules
and no resolvers, so the numbers are the policy core's.

Table 3: table 2's sizes with the product's plugins (every preemption rule, and
consolidation on as ClusterConfigured defaults to): what preemption and consolidation add.

Times are CPU time of this process (time.process_time), so other load on the machine does not
inflate them; decisions per second use the same clock. The generator is deterministic (fixed
seed); the core never sees the randomness, only events.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import pstats
import random
import resource
import sys
import time
import tracemalloc
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from domain.commands import NodeCommand
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
from domain.plugins import DEFAULT_PLUGINS, Plugins
from domain.state import State
from domain.wire_types import QueuePolicyConfig, QueueResource, ResourcesIn

SEED = 20_260_000
POLICIES = ["fifo", "round_robin", "balance", "intelligent"]
QUEUES = 20
POLICIES_ONLY = Plugins(preemption_rules=(), resolvers=())
clock = time.process_time


class Core:
    """The pure core driven as the sequencer drives it: one group per ts, then its cycle."""

    def __init__(self, plugins: Plugins = DEFAULT_PLUGINS) -> None:
        self.state: State = initial_state()
        self.plugins = plugins
        self.seq = 0
        self.ts = 0

    def group(self, events: list[Event], ts: int | None = None) -> list[NodeCommand]:
        self.ts = self.ts + 1 if ts is None else ts
        for item in events:
            self.seq += 1
            record = JournalRecord(seq=self.seq, ts=self.ts, event=item)
            self.state, _ = fold(self.state, record, self.plugins)
        self.state, commands = close_group(self.state, self.plugins)
        return commands


def cluster_setup(nodes: int, consolidation: bool) -> list[Event]:
    """Nodes of 8 GPUs; QUEUES queues whose quotas add up to the cluster, policies mixed."""
    events: list[Event] = [
        ClusterConfigured(heartbeat_timeout_s=10**9, consolidation=consolidation)
    ]
    for index in range(QUEUES):
        events.append(
            QueueConfigured(
                queue=f"q{index:02d}",
                resources={"gpu": QueueResource(quota=nodes * 8 // QUEUES, limit=-1)},
                policy=QueuePolicyConfig(
                    kind=POLICIES[index % len(POLICIES)],  # type: ignore[arg-type]
                    balance_timeout_s=300,
                    aging_interval_s=600,
                ),
            )
        )
    capacity = ResourcesIn(gpu=8, cpu=64_000, memory=512_000)
    events += [NodeHeartbeat(node=f"n{index:05d}", capacity=capacity) for index in range(nodes)]
    return events


def percentile(samples: list[float], fraction: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.3f}"


# -- table 1 -----------------------------------------------------------------------------


def submissions(jobs: int, rng: random.Random) -> Iterator[list[Event]]:
    for index in range(jobs):
        yield [
            JobSubmitted(
                job=f"j{index:06d}",
                queue=f"q{rng.randrange(QUEUES):02d}",
                priority=rng.randint(1, 9),
                resources=ResourcesIn(gpu=1, cpu=4000, memory=32_000),
            )
        ]


def table_submissions(nodes: int, jobs: int) -> None:
    core = Core()
    core.group(cluster_setup(nodes, consolidation=True), ts=0)
    times: list[float] = []
    decisions = 0
    gc.collect()
    for events in submissions(jobs, random.Random(SEED)):
        began = clock()
        commands = core.group(events)
        times.append(clock() - began)
        decisions += sum(1 for c in commands if c.type == "Dispatch")
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

    # A second, traced run: tracemalloc slows everything, so it is kept out of the timings.
    tracemalloc.start()
    traced = Core()
    traced.group(cluster_setup(nodes, consolidation=True), ts=0)
    for events in submissions(jobs, random.Random(SEED)):
        traced.group(events)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()

    print(f"\nTable 1: submission stream ({nodes} nodes x 8 GPUs, {QUEUES} queues, {jobs} jobs)")
    print(
        "| cycles | decisions | decisions/s | p50 ms/cycle | p99 ms/cycle | max ms | "
        "peak traced MB | process max RSS MB |"
    )
    print("|---|---|---|---|---|---|---|---|")
    print(
        f"| {len(times)} | {decisions} | {decisions / sum(times):,.0f} | "
        f"{ms(percentile(times, 0.5))} | {ms(percentile(times, 0.99))} | {ms(max(times))} | "
        f"{peak / 2**20:.1f} | {rss_mb:.0f} |"
    )


# -- tables 2 and 3 ----------------------------------------------------------------------


def pending_job(index: int, rng: random.Random) -> JobSubmitted:
    shape = rng.random()
    if shape < 0.7:
        gpu, tasks = 1.0, 1
    elif shape < 0.85:
        gpu, tasks = 2.0, 1
    elif shape < 0.95:
        gpu, tasks = 1.0, 4  # a gang
    else:
        gpu, tasks = 0.5, 1
    return JobSubmitted(
        job=f"p{index:06d}",
        queue=f"q{rng.randrange(QUEUES):02d}",
        priority=rng.randint(1, 9),
        tasks=tasks,
        resources=ResourcesIn(gpu=gpu, cpu=4000, memory=32_000),
    )


def full_cluster(
    nodes: int, pending: int, rng: random.Random, plugins: Plugins, consolidation: bool
) -> tuple[Core, float]:
    """Every GPU taken by one 8-GPU job per node, spread evenly over the queues (each at its
    quota, so nobody reclaims at first); then `pending` jobs submitted in one group, whose
    cycle tries them all; its CPU time is returned."""
    core = Core(plugins)
    core.group(cluster_setup(nodes, consolidation), ts=0)
    fillers: list[Event] = [
        JobSubmitted(
            job=f"f{index:05d}",
            queue=f"q{index % QUEUES:02d}",
            priority=5,
            preemptible=False,
            resources=ResourcesIn(gpu=8, cpu=8000, memory=64_000),
        )
        for index in range(nodes)
    ]
    core.group(fillers)
    jobs: list[Event] = [pending_job(index, rng) for index in range(pending)]
    began = clock()
    core.group(jobs)
    return core, clock() - began


def finishes(core: Core, count: int, rng: random.Random) -> Iterator[list[Event]]:
    running = sorted(job_id for job_id in core.state.jobs if job_id.startswith("f"))
    rng.shuffle(running)
    for job_id in running[:count]:
        job = core.state.jobs[job_id]
        yield [
            JobFinished(job=job_id, node=node_id, attempt=job.attempt, outcome="succeeded")
            for node_id in sorted(job.placements)
        ]


def measure_finishes(
    nodes: int, pending: int, cycles: int, plugins: Plugins, consolidation: bool, profile: bool
) -> tuple[list[float], int, float]:
    rng = random.Random(SEED + pending)
    core, first = full_cluster(nodes, pending, rng, plugins, consolidation)
    times: list[float] = []
    placed = 0
    profiler = cProfile.Profile() if profile else None
    gc.collect()
    for events in finishes(core, cycles, rng):
        if profiler:
            profiler.enable()
        began = clock()
        commands = core.group(events)
        times.append(clock() - began)
        if profiler:
            profiler.disable()
        placed += sum(1 for c in commands if c.type == "Dispatch")
    if profiler:
        pstats.Stats(profiler).sort_stats("tottime").print_stats(20)
    return times, placed, first


def table_full_cluster(
    title: str,
    nodes: int,
    sizes: list[int],
    cycles: int,
    plugins: Plugins,
    consolidation: bool,
    profile: bool,
) -> None:
    print(
        f"\n{title}: full cluster ({nodes} nodes x 8 GPUs, {QUEUES} queues, mixed policies), "
        f"then {cycles} finishes, one per cycle, each freeing one node"
    )
    print(
        "| pending jobs | cycles | dispatched | p50 ms/cycle | p99 ms/cycle | max ms | "
        "ms for the cycle that first tries them all |"
    )
    print("|---|---|---|---|---|---|---|")
    for pending in sizes:
        times, placed, first = measure_finishes(
            nodes, pending, cycles, plugins, consolidation, profile
        )
        print(
            f"| {pending} | {len(times)} | {placed} | {ms(percentile(times, 0.5))} | "
            f"{ms(percentile(times, 0.99))} | {ms(max(times))} | {ms(first)} |"
        )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, for a smoke run")
    parser.add_argument("--profile", action="store_true", help="cProfile tables 2 and 3")
    parser.add_argument("--only", choices=["1", "2", "3"], help="run one table")
    args = parser.parse_args(argv)
    if args.quick:
        nodes, jobs, sizes, cycles, product_cycles = 500, 1_000, [1_000, 2_000], 50, 20
    else:
        nodes, jobs, sizes, cycles = 5_000, 10_000, [1_000, 5_000, 10_000, 20_000], 200
        product_cycles = 50
    print(f"python {sys.version.split()[0]}, seed {SEED}, CPU time per cycle")
    if args.only in (None, "1"):
        table_submissions(nodes, jobs)
    if args.only in (None, "2"):
        table_full_cluster(
            "Table 2 (policies only)", nodes, sizes, cycles, POLICIES_ONLY, False, args.profile
        )
    if args.only in (None, "3"):
        table_full_cluster(
            "Table 3 (product plugins: preemption rules, consolidation on)",
            nodes,
            sizes,
            product_cycles,
            DEFAULT_PLUGINS,
            True,
            args.profile,
        )


if __name__ == "__main__":
    main()
