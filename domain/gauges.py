"""The numbers a monitoring system samples from a state: jobs, queues and nodes as labelled values (pure).

The scheduler and the projections export the same numbers (streams/metrics.py,
projections/metrics.py); this is the one place that reads them out of the state. Amounts
are in the contract's units: gpu in devices, cpu in millicores, memory in MB.
"""

from __future__ import annotations

from dataclasses import dataclass

from domain import fairshare
from domain.quota import UNLIMITED
from domain.resources import RESOURCE_NAMES
from domain.state import JobStatus, State


@dataclass(frozen=True, slots=True)
class Family:
    """One gauge family: name (without the `quotaflow_` prefix), help, label names, samples."""

    name: str
    help: str
    labels: tuple[str, ...]
    samples: tuple[tuple[tuple[str, ...], float], ...]


def amount(index: int, value: float) -> float:
    """An internal amount in the contract's unit (gpu is kept in thousandths internally)."""
    return value / 1000.0 if index == 0 else float(value)


def state_gauges(state: State) -> list[Family]:
    """Live jobs per queue and status; deserved, fair share, allocated, limit; nodes by state."""
    fairshare.refresh(state)
    queue_ids = sorted(state.queues)
    pending = dict.fromkeys(queue_ids, 0)
    running = dict.fromkeys(queue_ids, 0)
    for job in state.jobs.values():
        counts = pending if job.status == JobStatus.PENDING else running
        counts[job.queue] = counts.get(job.queue, 0) + 1
    jobs = tuple(
        sample
        for queue_id in sorted(pending)
        for sample in (
            ((queue_id, "pending"), float(pending[queue_id])),
            ((queue_id, "running"), float(running.get(queue_id, 0))),
        )
    )
    deserved: list[tuple[tuple[str, ...], float]] = []
    fair: list[tuple[tuple[str, ...], float]] = []
    allocated: list[tuple[tuple[str, ...], float]] = []
    limits: list[tuple[tuple[str, ...], float]] = []
    for queue_id in queue_ids:
        queue = state.queues[queue_id]
        subtree = queue.subtree_allocated.as_tuple()
        for index, resource in enumerate(RESOURCE_NAMES):
            labels = (queue_id, resource)
            quota = queue.quota.quota[index]
            deserved.append((labels, float("inf") if quota == UNLIMITED else amount(index, quota)))
            fair.append((labels, amount(index, queue.fair_share[index])))
            allocated.append((labels, amount(index, subtree[index])))
            limit = queue.quota.limit[index]
            if limit is not None:
                limits.append((labels, amount(index, limit)))
    lost = sum(1 for node in state.nodes.values() if node.lost)
    per_resource = ("queue", "resource")
    return [
        Family("queue_jobs", "Live jobs per queue and status", ("queue", "status"), jobs),
        Family(
            "queue_deserved",
            "Deserved quota (+Inf: unlimited); gpu devices, cpu millicores, memory MB",
            per_resource,
            tuple(deserved),
        ),
        Family("queue_fair_share", "Fair share of the queue's subtree", per_resource, tuple(fair)),
        Family(
            "queue_allocated", "Allocated to the queue's subtree", per_resource, tuple(allocated)
        ),
        Family("queue_limit", "Limit (absent: no cap)", per_resource, tuple(limits)),
        Family(
            "nodes",
            "Nodes by state",
            ("state",),
            ((("live",), float(len(state.nodes) - lost)), (("lost",), float(lost))),
        ),
    ]
