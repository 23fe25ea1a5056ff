"""What the expand action keeps free for pending jobs, summed per shape, equals summing every
pending job as it once did: a property over generated clusters with elastic, interactive,
non-preemptible and preempting jobs, and a snapshot's restore (pure)."""

from __future__ import annotations

from collections import Counter
from typing import Any

import orjson
from hypothesis import HealthCheck, given, settings

from domain.actions.expand import Expand
from domain.cycle.framework import Cycle
from domain.cycle.ordering import QueueKey, queue_key
from domain.indexes import demand_shape
from domain.plugins import ACTIONS, Plugins
from domain.quota_checks import admission_breach
from domain.resources import ZERO, Resources
from domain.simulation import Simulator
from domain.snapshot import decode_state, encode_state
from domain.state import State
from tests.domain.harness import Cluster, event, job, node, queue
from tests.domain.test_preemption_properties import scenarios


def every_job_summed(cycle: Cycle) -> list[tuple[QueueKey, Resources]]:
    """Expand's reserve as it was: every pending job of every queue read one by one."""
    state = cycle.state
    waiting: list[tuple[QueueKey, Resources]] = []
    for queue_id in sorted(state.queues):
        queue = state.queues[queue_id]
        if not len(queue.pending):
            continue
        key = queue_key(cycle.state, queue_id)
        need = ZERO
        for job_id in queue.pending.job_ids():
            job = state.jobs[job_id]
            if job.held or admission_breach(state, job, job.min_tasks) is not None:
                continue
            need = need + job.per_task * job.min_tasks
        if not need.is_zero():
            waiting.append((key, need))
    return waiting


def recounted(state: State) -> dict[str, Counter[object]]:
    return {
        queue_id: Counter(demand_shape(state.jobs[j]) for j in queue.pending.job_ids())
        for queue_id, queue in state.queues.items()
    }


class CheckedExpand(Expand):
    asked = 0

    def _waiting(self, cycle: Cycle) -> list[tuple[QueueKey, Resources]]:
        kept = super()._waiting(cycle)
        assert kept == every_job_summed(cycle)
        counts = {q: Counter(queue.pending.demand) for q, queue in cycle.state.queues.items()}
        assert counts == recounted(cycle.state)
        CheckedExpand.asked += 1
        return kept


CHECKED = Plugins(
    actions=[CheckedExpand() if isinstance(a, Expand) else a for a in ACTIONS],
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_the_reserve_summed_per_shape_is_every_pending_jobs(lines: list[dict[str, Any]]) -> None:
    simulator = Simulator(CHECKED)
    half = len(lines) // 2
    list(simulator.run(orjson.dumps(line) for line in lines[:half]))
    # A restart from a snapshot: the per-shape counts are made again from the pending jobs.
    simulator.state = decode_state(encode_state(simulator.state))
    counts = {q: Counter(queue.pending.demand) for q, queue in simulator.state.queues.items()}
    assert counts == recounted(simulator.state)
    list(simulator.run(orjson.dumps(line) for line in lines[half:]))


def test_a_preemptor_holding_room_is_not_in_the_reserve() -> None:
    # Given an elastic job of queue c that could grow, and queue a's preemptor holding the
    # room its victims (tasks of b's elastic job) free as they stop,
    cluster = Cluster(CHECKED)
    cluster.given(
        0,
        event("ClusterConfigured", heartbeat_timeout_s=1_000_000),
        *(queue(name, gpu_quota=quota) for name, quota in (("a", 4), ("b", 4), ("c", 2))),
        node("n1", gpu=4),
        node("n2", gpu=4),
        node("n3", gpu=2),
    )
    cluster.given(1000, job("e", "b", gpu=1, tasks=8, min_tasks=1))
    cluster.given(2000, job("g", "c", gpu=1, tasks=4, min_tasks=1))
    asked = CheckedExpand.asked
    # when the preemptor waits for them and another job of its queue waits behind it,
    cluster.when(3000, job("p", "a", gpu=4))
    assert set(cluster.preempted()) == {"e"}  # one Preempt a node
    cluster.when(4000, job("later", "a", gpu=1))
    # then the reserve the growing job must leave is summed without the holder.
    assert "p" in cluster.state.holders and CheckedExpand.asked > asked
