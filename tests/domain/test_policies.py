"""Queue policies (contract §5, PAI's queue-policy documentation), table-driven given / when / then over the pure core."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pytest

from domain.commands import PreemptReason
from domain.cycle.framework import CycleView, PreemptionRule
from domain.events import Event
from domain.pending import Standing, pending_view
from domain.plugins import Plugins
from domain.reasons import ReasonKind
from domain.state import Job
from tests.domain.harness import Cluster, event, job, node, queue

S = 1000  # ms per second
# Tests here run for minutes of virtual time without agents heartbeating; keep nodes alive.
PATIENT = event("ClusterConfigured", heartbeat_timeout_s=1_000_000)


def policy_queue(name: str, kind: str, **policy: Any) -> Event:
    return queue(name, gpu_quota=8, policy={"kind": kind, **policy})


def blocked_head(kind: str, head_priority: int = 5, **policy: Any) -> Cluster:
    """One 4-GPU node with 3 GPUs taken: `head` (2 GPUs) is blocked, `small` (1 GPU) behind it
    would fit."""
    cluster = Cluster()
    cluster.given(0, PATIENT, policy_queue("q", kind, **policy), node("n1", gpu=4))
    cluster.when(1 * S, job("filler", "q", gpu=3, preemptible=False))
    assert cluster.dispatched() == ["filler"]
    cluster.when(
        2 * S, job("head", "q", gpu=2, priority=head_priority), job("small", "q", gpu=1, priority=5)
    )
    return cluster


# -- a blocked head with a smaller job behind it that fits ------------------------------------


@pytest.mark.parametrize(
    ("kind", "head_priority", "placed"),
    [
        ("fifo", 5, []),
        ("round_robin", 5, ["small"]),
        ("balance", 5, []),  # only after the timeout, below
        ("intelligent", 7, []),  # 7 and above is never skipped
        ("intelligent", 9, []),
        ("intelligent", 6, ["small"]),  # below 7 is skipped
        ("intelligent", 1, ["small"]),
    ],
)
def test_blocked_head_and_a_small_job_behind_it(
    kind: str, head_priority: int, placed: list[str]
) -> None:
    cluster = blocked_head(kind, head_priority)
    assert cluster.dispatched() == placed
    stops = not placed
    assert cluster.queue_view("q").stopped_by == ("head" if stops else None)
    assert cluster.why("head")[0] is ReasonKind.CAPACITY


def test_fifo_keeps_the_queue_stopped_until_the_head_fits() -> None:
    cluster = blocked_head("fifo")
    cluster.when(3 * S, job("later", "q", gpu=1))
    assert cluster.dispatched() == []
    cluster.finish(4 * S, "filler")
    assert cluster.dispatched() == ["head", "small", "later"]


def test_round_robin_tries_every_job_in_order() -> None:
    cluster = blocked_head("round_robin")
    cluster.when(3 * S, job("too-big", "q", gpu=2), job("last", "q", gpu=1))
    assert cluster.dispatched() == []  # node now full: 3 + 1 of 4
    cluster.finish(4 * S, "small")
    assert cluster.dispatched() == ["last"]  # head and too-big still do not fit


def test_balance_skips_the_head_only_after_its_timeout() -> None:
    cluster = blocked_head("balance", balance_timeout_s=60)
    assert cluster.job_view("head").blocked_since == 2 * S
    assert (62 * S, "balance", "head") in cluster.state.timers
    cluster.when(61 * S, event("Tick"))
    assert cluster.dispatched() == []
    # The timeout alone wakes a cycle: nothing else changed at 62 s.
    cluster.when(62 * S, event("Tick"))
    assert cluster.dispatched() == ["small"]
    assert cluster.job_view("head").blocked_since == 2 * S  # still blocked, now skipped


def test_balance_window_widens_one_job_per_timeout() -> None:
    cluster = Cluster()
    cluster.given(0, PATIENT, policy_queue("q", "balance", balance_timeout_s=60), node("n1", gpu=4))
    cluster.given(1 * S, job("filler", "q", gpu=3, preemptible=False))
    cluster.when(2 * S, job("first", "q", gpu=2), job("second", "q", gpu=2), job("small", "q"))
    assert cluster.dispatched() == []
    cluster.when(62 * S, event("Tick"))
    # first is skipped now; second is tried for the first time, blocks, starts its own timeout.
    assert cluster.dispatched() == []
    assert cluster.queue_view("q").stopped_by == "second"
    assert cluster.job_view("second").blocked_since == 62 * S
    cluster.when(121 * S, event("Tick"))
    assert cluster.dispatched() == []
    cluster.when(122 * S, event("Tick"))
    assert cluster.dispatched() == ["small"]


def test_balance_placed_job_leaves_and_a_requeue_starts_a_fresh_blocked_period() -> None:
    cluster = blocked_head("balance", balance_timeout_s=60)
    cluster.finish(10 * S, "filler")
    assert cluster.dispatched() == ["head", "small"]
    assert cluster.job_view("head").blocked_since is None
    assert cluster.queue_view("q").stopped_by is None


def test_balance_cycle_is_skipped_while_nothing_changes_and_no_timer_is_due() -> None:
    cluster = blocked_head("balance", balance_timeout_s=60)
    timers = list(cluster.state.timers)
    for second in range(3, 60):
        cluster.when(second * S, event("Tick"))
        assert cluster.state.needs_cycle is False
    assert cluster.state.timers == timers  # one wake-up, not one per cycle
    assert cluster.dispatched(cluster.commands[1:]) == []


def test_balance_timeout_zero_is_round_robin() -> None:
    cluster = blocked_head("balance", balance_timeout_s=0)
    assert cluster.dispatched() == ["small"]


# -- ordering: effective priority, submission order, interactive first, aging ------------------


def one_free_gpu(kind: str, **policy: Any) -> Cluster:
    cluster = Cluster()
    cluster.given(0, PATIENT, policy_queue("q", kind, **policy), node("n1", gpu=1))
    cluster.given(0, job("filler", "q", preemptible=False))
    return cluster


@pytest.mark.parametrize(("kind", "first"), [("intelligent", "old"), ("fifo", "new")])
def test_aging_lets_an_old_low_priority_job_overtake_a_newer_higher_one(
    kind: str, first: str
) -> None:
    cluster = one_free_gpu(kind, aging_interval_s=60)
    cluster.when(1 * S, job("old", "q", priority=4))
    cluster.when(62 * S, job("new", "q", priority=5))
    # At 130 s old has aged 2 steps (4 -> 6), new 1 step (5 -> 6): equal, so submission order.
    cluster.finish(130 * S, "filler")
    assert cluster.dispatched() == [first]


def test_aging_stops_at_six_so_a_priority_seven_job_goes_first() -> None:
    cluster = one_free_gpu("intelligent", aging_interval_s=1)
    cluster.when(1 * S, job("ancient", "q", priority=1))
    cluster.when(1000 * S, job("urgent", "q", priority=7))
    entries = pending_view(cluster.state, "q", 1000 * S)
    assert [(e.job, e.effective_priority) for e in entries] == [("urgent", 7), ("ancient", 6)]
    cluster.finish(1001 * S, "filler")
    assert cluster.dispatched() == ["urgent"]


def test_higher_priority_first_then_submission_order() -> None:
    cluster = one_free_gpu("round_robin")
    cluster.when(1 * S, job("a", "q", priority=3), job("b", "q", priority=8), job("c", "q"))
    cluster.when(2 * S, job("d", "q", priority=8))
    order = [e.job for e in pending_view(cluster.state, "q", 2 * S)]
    assert order == ["b", "d", "c", "a"]


def test_interactive_jobs_are_tried_before_unattended_ones_of_the_same_queue() -> None:
    cluster = one_free_gpu("fifo")
    cluster.when(1 * S, job("batch", "q", priority=9), job("notebook", "q", interactive=True))
    cluster.finish(2 * S, "filler")
    assert cluster.dispatched() == ["notebook"]


def test_a_requeued_job_keeps_its_place() -> None:
    cluster = Cluster()
    cluster.given(0, event("ClusterConfigured", heartbeat_timeout_s=10), policy_queue("q", "fifo"))
    cluster.given(0, node("n1", gpu=1))
    cluster.when(1 * S, job("early", "q"))
    cluster.when(2 * S, job("late", "q"))
    cluster.when(11 * S, event("Tick"))  # n1 is lost: early goes back to pending
    assert [e.job for e in pending_view(cluster.state, "q", 11 * S)] == ["early", "late"]
    cluster.when(12 * S, node("n1", gpu=1))
    assert cluster.dispatched() == ["early"]


# -- a policy change applies to pending jobs at once and never touches running ones -----------


@pytest.mark.parametrize(
    ("before", "after", "placed"),
    [
        ("fifo", "round_robin", ["small"]),
        ("fifo", "balance", ["small"]),  # blocked for 60 s already: over a 30 s timeout
        ("fifo", "intelligent", ["small"]),
        ("round_robin", "fifo", []),
    ],
)
def test_policy_change_mid_queue(before: str, after: str, placed: list[str]) -> None:
    cluster = blocked_head(before)
    cluster.when(3 * S, job("later", "q", gpu=1))
    cluster.when(62 * S, policy_queue("q", after, balance_timeout_s=30))
    assert cluster.dispatched() == placed
    assert cluster.preempted() == []
    assert cluster.job_view("filler").status == "running"


def test_policy_change_to_fifo_stops_jobs_submitted_after_it() -> None:
    cluster = blocked_head("round_robin")
    assert cluster.dispatched() == ["small"]
    cluster.finish(3 * S, "small")
    assert cluster.dispatched() == []
    cluster.when(4 * S, policy_queue("q", "fifo"), job("later", "q", gpu=1))
    assert cluster.dispatched() == []
    assert cluster.queue_view("q").stopped_by == "head"


def test_policy_change_from_intelligent_to_fifo_drops_aging() -> None:
    cluster = one_free_gpu("intelligent", aging_interval_s=60)
    cluster.when(1 * S, job("old", "q", priority=4))
    cluster.when(62 * S, job("new", "q", priority=5))
    cluster.when(130 * S, policy_queue("q", "fifo"))
    assert [e.job for e in pending_view(cluster.state, "q", 130 * S)] == ["new", "old"]


# -- blocked covers quota, limit and gang ------------------------------------------------------


@pytest.mark.parametrize(
    ("head", "expect_reason"),
    [
        ({"gpu": 3, "tasks": 3}, ReasonKind.CAPACITY),  # a gang: all three tasks or none
        ({"gpu": 4, "interactive": True}, ReasonKind.QUOTA),  # only within deserved quota
        ({"gpu": 11}, ReasonKind.LIMIT),
    ],
)
@pytest.mark.parametrize(("kind", "small_placed"), [("fifo", False), ("round_robin", True)])
def test_blocked_covers_capacity_quota_limit_and_gang(
    head: dict[str, Any], expect_reason: ReasonKind, kind: str, small_placed: bool
) -> None:
    cluster = Cluster()
    cluster.given(
        0,
        queue("q", gpu_quota=3, gpu_limit=10, policy={"kind": kind}),
        node("n1", gpu=4),
        node("n2", gpu=4),
    )
    cluster.when(1 * S, job("head", "q", **head), job("small", "q", gpu=1))
    assert cluster.why("head")[0] is expect_reason
    assert cluster.dispatched() == (["small"] if small_placed else [])


# -- holds: what a preemption frees is kept for the preemptor ---------------------------------


class UrgentPreemptsLowerPriority:
    """A test-only preemption rule: priority >= 8 may preempt lower-priority jobs anywhere."""

    reason: PreemptReason = "priority"
    explains = "priority: a test rule"
    explicit = False
    fairness = False

    def applies(self, cycle: CycleView, job: Job) -> bool:
        return job.priority >= 8

    def candidate_queues(self, cycle: CycleView, job: Job) -> Iterable[str]:
        return sorted(cycle.state.queues)

    def admits(self, cycle: CycleView, job: Job, victim: Job) -> bool:
        return job.priority >= 8 and victim.priority < job.priority

    def allows_after(self, cycle: CycleView, job: Job, victims: list[Job]) -> bool:
        return True

    def reads_priority(self, cycle: CycleView, job: Job) -> bool:
        return True  # both applies and admits compare priorities


@pytest.mark.parametrize("kind", ["fifo", "round_robin", "balance", "intelligent"])
def test_resources_freed_by_a_preemption_are_held_for_the_preemptor(kind: str) -> None:
    rule: PreemptionRule = UrgentPreemptsLowerPriority()
    cluster = Cluster(Plugins(preemption_rules=[rule]))
    cluster.given(0, policy_queue("q", kind), node("n1", gpu=4))
    cluster.given(1 * S, job("low", "q", gpu=4, priority=1))
    cluster.agents_obey(2 * S)
    cluster.when(3 * S, job("urgent", "q", gpu=4, priority=9), job("small", "q", gpu=1))
    assert cluster.preempted() == ["low"]
    assert cluster.dispatched() == []
    assert cluster.job_view("urgent").blocked_since is None  # a preemption started: not blocked
    # The agent stops low: its 4 GPUs are free, but held for urgent; small must not take one.
    cluster.when(4 * S, event("JobPreempted", job="low", node="n1", attempt=1))
    assert cluster.dispatched() == ["urgent"]
    view = {e.job: e for e in pending_view(cluster.state, "q", 4 * S)}
    assert "small" in view and "low" in view


def test_a_job_behind_a_preempting_job_may_use_what_is_not_held() -> None:
    rule: PreemptionRule = UrgentPreemptsLowerPriority()
    cluster = Cluster(Plugins(preemption_rules=[rule]))
    cluster.given(0, policy_queue("q", "fifo"), node("n1", gpu=4), node("n2", gpu=2))
    cluster.given(1 * S, job("low", "q", gpu=4, priority=1), job("low2", "q", gpu=1, priority=1))
    cluster.when(3 * S, job("urgent", "q", gpu=4, priority=9), job("small", "q", gpu=1))
    # urgent is not blocked (its preemption started), so even fifo goes on; small may not
    # take what is held for urgent on n1, but may take n2's free GPU.
    assert cluster.preempted() == ["low"]
    assert [(c.job, c.node) for c in cluster.last if c.type == "Dispatch"] == [("small", "n2")]
    entries = {e.job: e for e in pending_view(cluster.state, "q", 3 * S)}
    assert entries["urgent"].standing is Standing.PREEMPTING
    assert cluster.node_view("n1").held.gpu == 4000


def test_a_shape_that_found_no_room_fails_fast_only_for_the_same_selector_or_larger() -> None:
    """The session's no-room memo must not change a decision: a failure under one node
    selector says nothing about another, and a smaller request may still fit."""
    cluster = Cluster()
    cluster.given(
        0,
        PATIENT,
        policy_queue("q", "round_robin"),
        node("a1", gpu=2, labels={"gpu": "a100"}),
        node("h1", gpu=1, labels={"gpu": "h100"}),
    )
    cluster.when(
        1 * S,
        job("h-big", "q", gpu=2, node_selector={"gpu": "h100"}),  # no room on h1
        job("h-bigger", "q", gpu=2, tasks=2, node_selector={"gpu": "h100"}),  # larger: no room
        job("a-two", "q", gpu=2, node_selector={"gpu": "a100"}),  # other selector: fits
        job("h-one", "q", gpu=1, node_selector={"gpu": "h100"}),  # smaller: fits
        job("any", "q", gpu=1),  # no selector: nothing left
    )
    assert cluster.dispatched() == ["a-two", "h-one"]
    assert cluster.why("h-bigger")[1]["selector"] == "gpu=h100"
    kind, facts = cluster.why("any")
    assert (kind, facts["selector"], facts["tasks"]) == (ReasonKind.CAPACITY, "", 1)
