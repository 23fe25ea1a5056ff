"""Preemption benchmark: a burst of one-GPU jobs fills the cluster, then a gang reclaims (not pure: clock).

Phase 1: 500 nodes of 8 GPUs register and 4,000 one-GPU jobs of queue `burst` arrive at one
ts. Phase 2: queue `gang` submits one 64-task gang job of 8 GPUs per task, which can only run
by preempting 512 of the burst's jobs (reclaim: `gang` is within its deserved quota, `burst`
is above its fair share). Both phases run through the offline Simulator, whose agent answers
every command at the same ts, so a phase ends with its last command. Prints a table of wall
time and CPU time of this process (time.process_time: other load on a shared machine does not
inflate it) to the last command of each phase.

    .venv/bin/python bench/preemption_bench.py [--nodes 500] [--jobs 4000] [--gang-tasks 64]
    .venv/bin/python bench/preemption_bench.py --rule self_level   # phase 2 by a PAI rule
"""

from __future__ import annotations

import argparse
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import orjson

from domain.simulation import Simulator

PHASE_1_TS = 1000
PHASE_2_TS = 2000


def events(nodes: int, jobs: int, gang_tasks: int, rule: str) -> Iterator[dict[str, Any]]:
    total = nodes * 8
    gang_quota = gang_tasks * 8
    if rule == "reclaim":
        yield _queue("burst", total - gang_quota, {})
        yield _queue("gang", gang_quota, {})
    else:  # self_level: no deserved quota for `gang`, so only the explicit PAI rule can act
        yield _queue("burst", total, {})
        rules = {
            "self_level": {"high_priority": [9, 9], "low_priority": [1, 5], "modules": ["DLC"]}
        }
        yield _queue("gang", 0, rules, weight=0)
    for index in range(nodes):
        yield {"type": "NodeHeartbeat", "ts": 0, "node": f"n{index:04d}", "capacity": {"gpu": 8}}
    for index in range(jobs):
        yield {
            "type": "JobSubmitted",
            "ts": PHASE_1_TS,
            "job": f"burst-{index:05d}",
            "queue": "burst",
            "priority": 4,
            "resources": {"gpu": 1},
        }
    yield {
        "type": "JobSubmitted",
        "ts": PHASE_2_TS,
        "job": "gang-job",
        "queue": "gang",
        "priority": 9,
        "tasks": gang_tasks,
        "resources": {"gpu": 8},
    }


def _queue(
    name: str, quota: int, preemption: dict[str, Any], weight: float | None = None
) -> dict[str, Any]:
    gpu: dict[str, Any] = {"quota": quota, "limit": -1}
    if weight is not None:
        gpu["over_quota_weight"] = weight
    return {
        "type": "QueueConfigured",
        "ts": 0,
        "queue": name,
        "resources": {"gpu": gpu},
        "preemption": preemption,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=500)
    parser.add_argument("--jobs", type=int, default=4000)
    parser.add_argument("--gang-tasks", type=int, default=64)
    parser.add_argument("--rule", choices=["reclaim", "self_level"], default="reclaim")
    args = parser.parse_args()

    lines = [orjson.dumps(e) for e in events(args.nodes, args.jobs, args.gang_tasks, args.rule)]
    simulator = Simulator()
    start = time.perf_counter()
    start_cpu = time.process_time()
    last: dict[int, float] = {}
    last_cpu: dict[int, float] = {}
    counts: dict[int, Counter[str]] = {PHASE_1_TS: Counter(), PHASE_2_TS: Counter()}
    for item in simulator.run(lines):
        now, now_cpu = time.perf_counter(), time.process_time()
        ts = int(item["ts"])
        last[ts] = now
        last_cpu[ts] = now_cpu
        if ts in counts:
            counts[ts][f"{item['type']} {item.get('reason')}"] += 1
    phase_1 = last[PHASE_1_TS] - start
    phase_2 = last[PHASE_2_TS] - last[PHASE_1_TS]
    cpu_1 = last_cpu[PHASE_1_TS] - start_cpu
    cpu_2 = last_cpu[PHASE_2_TS] - last_cpu[PHASE_1_TS]
    gang = simulator.state.jobs["gang-job"]
    print(
        f"{args.nodes} nodes x 8 GPUs; {args.jobs} one-GPU jobs; gang of {args.gang_tasks} x 8 GPUs"
    )
    print(
        f"phase 2 rule: {args.rule}"
        + ("" if args.rule == "reclaim" else " (PAI self-level, not fairness)")
    )
    print()
    victims = sum(n for kind, n in counts[PHASE_2_TS].items() if kind.startswith("Preempt"))
    print(f"{'phase':<34} {'wall ms':>9} {'cpu ms':>9}  commands")
    label_1 = f"1 burst: register + {args.jobs} jobs"
    label_2 = f"2 gang: preempt {victims} + place"
    print(f"{label_1:<34} {phase_1 * 1000:>9.1f} {cpu_1 * 1000:>9.1f}  {dict(counts[PHASE_1_TS])}")
    print(f"{label_2:<34} {phase_2 * 1000:>9.1f} {cpu_2 * 1000:>9.1f}  {dict(counts[PHASE_2_TS])}")
    print()
    print(
        f"gang-job: {gang.status.value}, {gang.placed_tasks} tasks on {len(gang.placements)} nodes"
    )


if __name__ == "__main__":
    main()
