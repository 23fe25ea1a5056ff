"""Why reclaim did not help, kept across cycles when every other queue is within its share: the same reasons as made afresh."""

from __future__ import annotations

from typing import Any
from unittest import mock

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from domain.cycle import reclaim_reasons
from domain.reasons import ReasonKind
from domain.simulation import Simulator
from tests.domain.harness import Cluster, event, job, node
from tests.domain.test_preemption_properties import scenarios
from tests.domain.test_shortcut_properties import fragmented
from tests.domain.test_victim_search import gpu_queue


def test_a_blocked_job_is_told_of_a_queue_that_starts_running_work_within_its_share() -> None:
    """a (2 deserved) asks 2 GPUs; b runs one GPU on each 2-GPU node, within its share of 2:
    room is scattered, no queue may give any back and nothing is moved. Then c starts a job
    within its share, and the next cycle's reason names c as well."""
    cluster = Cluster()
    cluster.given(
        0,
        event("ClusterConfigured", placement="spread", consolidation=False),
        gpu_queue("a", 2),
        gpu_queue("b", 2),
        gpu_queue("c", 1),
        node("n1", 2),
        node("n2", 2),
        node("n3", 1),
    )
    cluster.given(1, job("b0", "b"), job("b1", "b"))
    cluster.agents_obey(1)
    cluster.when(3, job("a1", "a", gpu=2))
    kind, facts = cluster.why("a1")
    assert kind is ReasonKind.RECLAIM
    assert facts["stopped"] == ("b=within_share",)
    first = cluster.reason("a1")
    cluster.when(4, event("Tick"))  # another cycle, nothing changed: the same reason
    assert cluster.reason("a1") == first
    cluster.when(5, job("c0", "c"))
    cluster.agents_obey(5)
    cluster.when(6, event("Tick"))
    kind, facts = cluster.why("a1")
    assert kind is ReasonKind.RECLAIM
    assert facts["looked_at"] == ("b", "c")
    assert facts["stopped"] == ("b=within_share", "c=within_share")
    assert "reclaim did not help: b: within_share, c: within_share" in str(cluster.reason("a1"))


class ReasonsSeen(Simulator):
    """Records, after every cycle, each pending job's reason as a person reads it."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[int, tuple[tuple[str, object], ...]]] = []

    def _cycle_and_answer(self, ts: int) -> None:
        super()._cycle_and_answer(ts)
        reasons = tuple(
            (job.id, None if job.pending_reason is None else job.pending_reason.to_wire())
            for job in sorted(self.state.jobs.values(), key=lambda job: job.id)
            if job.pending_reason is not None
        )
        self.seen.append((ts, reasons))


def reasons_seen(lines: list[dict[str, Any]]) -> list[tuple[int, tuple[tuple[str, object], ...]]]:
    simulator = ReasonsSeen()
    for _ in simulator.run(orjson.dumps(line) for line in lines):
        pass
    return simulator.seen


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(scenarios(), fragmented()))
def test_reasons_kept_across_cycles_are_those_made_afresh(lines: list[dict[str, Any]]) -> None:
    with mock.patch.object(reclaim_reasons, "ALL_WITHIN_MAX", 0):  # every call starts anew
        afresh = reasons_seen(lines)
    assert reasons_seen(lines) == afresh
