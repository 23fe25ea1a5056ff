"""Fair-share recomputation cost: a full walk versus an incremental one after one leaf's demand
changes, for 3-level queue trees of 100, 1,000 and 10,000 leaf queues on 5,000 nodes.

Run: .venv/bin/python bench/fairshare_bench.py [--repeat N]
Prints a table; times are per recompute (median of N, in milliseconds).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from domain import fairshare
from domain.decider import apply
from domain.events import JobCancelled, JobSubmitted, NodeHeartbeat, QueueConfigured
from domain.state import State

SHAPES = [(4, 5, 5), (10, 10, 10), (20, 20, 25)]  # 100, 1,000 and 10,000 leaves
NODES = 5_000
GPUS_PER_NODE = 8


class Builder:
    def __init__(self) -> None:
        self.state = State()
        self.seq = 0

    def fold(self, event: QueueConfigured | NodeHeartbeat | JobSubmitted | JobCancelled) -> None:
        self.seq += 1
        apply(self.state, event, self.seq, 0)


def build(shape: tuple[int, int, int], gpus_per_leaf: int) -> tuple[Builder, list[str]]:
    """A tree whose leaves share the cluster's quota evenly and each ask for `gpus_per_leaf`."""
    top, middle, bottom = shape
    leaves = top * middle * bottom
    capacity = NODES * GPUS_PER_NODE
    leaf_quota = capacity // (leaves * 2)  # half the cluster guaranteed, half spare
    builder = Builder()

    def queue(name: str, parent: str | None, quota: int, weight: int) -> None:
        resources = {"gpu": {"quota": quota, "limit": -1, "over_quota_weight": weight}}
        builder.fold(QueueConfigured(queue=name, parent=parent, resources=resources))  # type: ignore[arg-type]

    leaf_ids: list[str] = []
    for t in range(top):
        top_id = f"t{t}"
        queue(top_id, None, leaf_quota * middle * bottom, 1 + t % 3)
        for m in range(middle):
            middle_id = f"{top_id}-m{m}"
            queue(middle_id, top_id, leaf_quota * bottom, 1 + m % 2)
            for b in range(bottom):
                leaf_id = f"{middle_id}-l{b}"
                queue(leaf_id, middle_id, leaf_quota, 1 + b % 4)
                leaf_ids.append(leaf_id)
    for n in range(NODES):
        builder.fold(NodeHeartbeat(node=f"n{n}", capacity={"gpu": GPUS_PER_NODE}))  # type: ignore[arg-type]
    for index, leaf_id in enumerate(leaf_ids):
        builder.fold(
            JobSubmitted(job=f"j{index}", queue=leaf_id, tasks=gpus_per_leaf, resources={"gpu": 1})  # type: ignore[arg-type]
        )
    fairshare.recompute(builder.state, full=True)
    return builder, leaf_ids


def median_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1000


def measure(
    shape: tuple[int, int, int], gpus_per_leaf: int, repeat: int
) -> tuple[int, float, float, float]:
    builder, leaf_ids = build(shape, gpus_per_leaf)
    state = builder.state
    full: list[float] = []
    for _ in range(repeat):
        start = time.perf_counter()
        fairshare.recompute(state, full=True)
        full.append(time.perf_counter() - start)
    incremental: list[float] = []
    for turn in range(repeat):
        leaf = leaf_ids[(turn * 7919) % len(leaf_ids)]
        job_id = f"extra{turn}"
        builder.fold(JobSubmitted(job=job_id, queue=leaf, resources={"gpu": 1}))  # type: ignore[arg-type]
        start = time.perf_counter()
        fairshare.recompute(state)
        incremental.append(time.perf_counter() - start)
        builder.fold(JobCancelled(job=job_id))
        fairshare.recompute(state)
    # The worst case for incremental: capacity changes, so every level may be re-shared.
    capacity: list[float] = []
    for turn in range(repeat):
        builder.fold(NodeHeartbeat(node=f"extra{turn}", capacity={"gpu": GPUS_PER_NODE}))  # type: ignore[arg-type]
        start = time.perf_counter()
        fairshare.recompute(state)
        capacity.append(time.perf_counter() - start)
    return len(state.queues), median_ms(full), median_ms(incremental), median_ms(capacity)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args()
    capacity = NODES * GPUS_PER_NODE
    print(f"{NODES} nodes x {GPUS_PER_NODE} GPUs = {capacity} GPUs; median of {args.repeat} runs")
    print(
        f"{'tree':>9} {'leaves':>7} {'queues':>7} {'demand':>13} {'full ms':>9} "
        f"{'1 leaf ms':>10} {'speed-up':>9} {'+1 node ms':>11}"
    )
    for shape in SHAPES:
        leaves = shape[0] * shape[1] * shape[2]
        for label, total in (("under (0.5x)", capacity // 2), ("over (2x)", capacity * 2)):
            per_leaf = max(1, total // leaves)
            queues, full, incremental, node = measure(shape, per_leaf, args.repeat)
            tree = "x".join(map(str, shape))
            print(
                f"{tree:>9} {leaves:>7} {queues:>7} {label:>13} {full:>9.2f} "
                f"{incremental:>10.3f} {full / incremental:>8.0f}x {node:>11.2f}"
            )


if __name__ == "__main__":
    main()
