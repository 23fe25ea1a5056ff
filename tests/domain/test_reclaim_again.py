"""Reclaim again (domain/actions/reclaim_again.py): a queue below its deserved quota whose
job was blocked while another queue took idle capacity beyond its own gets another look."""

from __future__ import annotations

from typing import Any
from unittest import mock

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from domain.actions import allocate
from domain.cycle.session import Session
from tests.domain import test_blocked_shapes
from tests.domain.harness import Cluster, event, job, node, simulate
from tests.domain.test_reclaim_properties import scenarios
from tests.domain.test_victim_search import gpu_queue, settle
from tests.domain.test_waiting_preemptor_fit import counting_placements


def line(kind: str, ts: int, **fields: Any) -> dict[str, Any]:
    return {"type": kind, "ts": ts, **fields}


def test_a_job_blocked_after_the_last_placement_is_not_tried_again_in_that_cycle() -> None:
    """One 8-GPU node, quotas 5 and 4. q0 runs 3 GPUs. In one group q1 asks for 5 GPUs and
    q0 for 2: q1 (using nothing) is served first and takes every free GPU, 5 of its deserved
    4; then q0's job is blocked, since a job dispatched in this very cycle is no victim."""
    cluster = Cluster()
    cluster.given(0, node("n0", gpu=8), gpu_queue("q0", 5), gpu_queue("q1", 4))
    cluster.given(1, job("j0", "q0", gpu=3))
    settle(cluster, 1)
    tried: list[str] = []
    real = Session._try

    def counting(session: Session, tried_job: Any) -> Any:
        tried.append(tried_job.id)
        return real(session, tried_job)

    # When both arrive together
    with mock.patch.object(Session, "_try", counting):
        cluster.when(4, job("j4", "q1", gpu=5), job("j3", "q0", gpu=2))

    # Then j4 runs and j3 was tried once: nothing that changes a try happened after it
    # (only j4 left the pending list), so a second look in this cycle would find the same
    assert [(c.type, c.job) for c in cluster.last] == [("Dispatch", "j4")]
    assert tried == ["j4", "j3"]


def test_that_later_look_reclaims_what_the_cycle_dispatched() -> None:
    # Given the same cluster in the offline simulator, which runs a cycle only for an input
    # or a timer that falls due
    lines = [
        line("ClusterConfigured", 0),
        line("QueueConfigured", 0, queue="q0", resources={"gpu": {"quota": 5, "limit": -1}}),
        line("QueueConfigured", 0, queue="q1", resources={"gpu": {"quota": 4, "limit": -1}}),
        line("NodeHeartbeat", 0, node="n0", capacity={"gpu": 8}),
        line("JobSubmitted", 1, job="j0", queue="q0", resources={"gpu": 3}),
        # When q1 takes the free GPUs as q0's job arrives, and nothing else happens
        line("JobSubmitted", 4, job="j4", queue="q1", resources={"gpu": 5}),
        line("JobSubmitted", 4, job="j3", queue="q0", resources={"gpu": 2}),
    ]
    output = simulate(*lines)

    # Then a second later the reclaim-again timer's cycle reclaims j4 for j3
    preempts = [
        (o["job"], o["ts"], o["reason"], o.get("by")) for o in output if o["type"] == "Preempt"
    ]
    assert preempts == [("j4", 1004, "reclaim", "j3")]


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(lines=scenarios(), consolidation=st.booleans())
def test_skipped_looks_change_no_command_reason_or_timer(
    lines: list[dict[str, Any]], consolidation: bool
) -> None:
    """Looking again at every such job (as if leaving a pending list were a change) gives
    the same commands, pending reasons and blocked times, cycle by cycle; the timers show
    in the commands, since the simulator runs a cycle for each that falls due."""
    lines = [{"type": "ClusterConfigured", "ts": 0, "consolidation": consolidation}, *lines]
    skipped = test_blocked_shapes.simulate(lines)
    with mock.patch.object(allocate, "note_dequeued", lambda cycle, walked: None):
        looked = test_blocked_shapes.simulate(lines)
    assert skipped == looked


def test_a_search_that_found_nothing_is_made_again_once_a_dispatch_changed_the_queues() -> None:
    # Given q1 at its deserved 2 GPUs on n0 (4 GPUs), and n1 (2 GPUs) free
    lines = [
        line("ClusterConfigured", 0, placement="spread", consolidation=False),
        line("QueueConfigured", 0, queue="q0", resources={"gpu": {"quota": 4, "limit": -1}}),
        line("QueueConfigured", 0, queue="q1", resources={"gpu": {"quota": 2, "limit": -1}}),
        line("NodeHeartbeat", 0, node="n0", capacity={"gpu": 4}),
        line("NodeHeartbeat", 0, node="n1", capacity={"gpu": 2}),
        line("JobSubmitted", 1, job="j1", queue="q1", resources={"gpu": 2}),
        # When q0 asks for a whole n0 as q1 asks for 2 GPUs more: q0's job is tried first,
        # fits nowhere and finds no victim (q1 within its share); then q1's goes to n1
        line("JobSubmitted", 4, job="j3", queue="q0", resources={"gpu": 4}),
        line("JobSubmitted", 4, job="j5", queue="q1", resources={"gpu": 2}),
    ]
    output = simulate(*lines)

    # Then, in that same cycle, the second look searches again and reclaims j1 for j3:
    # the dispatch took q1 above its share (j5, dispatched in the cycle, is no victim)
    commands = [(o["type"], o["job"], o["ts"]) for o in output if o["type"] != "Rejected"]
    assert ("Dispatch", "j5", 4) in commands
    assert ("Preempt", "j1", 4) in commands


def test_a_preemptor_started_by_the_later_look_is_passed_over_in_the_next_cycle() -> None:
    # Given the cluster above live: the later look reclaims j1 (on n0) for j3, whose victim
    # has not stopped yet, and j5 runs on n1
    cluster = Cluster()
    cluster.given(
        0,
        event("ClusterConfigured", placement="spread", consolidation=False),
        gpu_queue("q0", 4),
        gpu_queue("q1", 2),
        node("n0", gpu=4),
        node("n1", gpu=2),
    )
    cluster.given(1, job("j1", "q1", gpu=2))
    cluster.given(2, event("JobStarted", job="j1", node="n0", attempt=1))
    issued = cluster.given(4, job("j3", "q0", gpu=4), job("j5", "q1", gpu=2))
    assert [(c.type, c.job, c.node) for c in issued] == [
        ("Dispatch", "j5", "n1"),
        ("Preempt", "j1", "n0"),
    ]
    cluster.given(4, event("JobStarted", job="j5", node="n1", attempt=1))
    searched, counting = counting_placements()

    # When, in the next cycle, a job of q0 arrives that fits nowhere
    with counting:
        cluster.when(5, job("j6", "q0", gpu=4))

    # Then only j6 is searched for: j3 was parked when its preemption started
    assert searched == ["j6"]
    assert cluster.last == []
