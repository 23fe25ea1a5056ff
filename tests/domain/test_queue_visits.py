"""A cycle visits only the queues with a pending job or a stop to clear, and still clears
every stop and serves every queue: given / when / then, and a property over generated
submissions, finishes, cancellations, deletions and restores (pure)."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from domain.snapshot import decode_state, encode_state
from domain.state import State
from tests.domain.harness import Cluster, event, job, node, queue

S = 1000  # ms per second
PATIENT = event("ClusterConfigured", heartbeat_timeout_s=1_000_000)


def fifo_queue(name: str) -> Any:
    return queue(name, gpu_quota=2, policy={"kind": "fifo"})


def stopped_at_its_head() -> Cluster:
    """Queue `q` (fifo) is stopped at `head`, which waits for the GPUs that `filler`, of
    another queue and not preemptible, holds."""
    cluster = Cluster()
    cluster.given(0, PATIENT, fifo_queue("q"), queue("other", gpu_quota=2), node("n1", gpu=2))
    cluster.given(1 * S, job("filler", "other", gpu=2, preemptible=False))
    cluster.given(2 * S, job("head", "q", gpu=1))
    assert cluster.queue_view("q").stopped_by == "head"
    return cluster


def test_a_stop_is_cleared_once_its_queue_has_nothing_pending() -> None:
    cluster = stopped_at_its_head()
    cluster.when(3 * S, event("JobCancelled", job="head"))
    assert cluster.queue_view("q").stopped_by is None
    assert cluster.pending("q") == []


def test_a_restored_stop_is_cleared_in_the_first_cycle_after_the_restore() -> None:
    cluster = stopped_at_its_head()
    cluster.state = decode_state(encode_state(cluster.state))
    assert cluster.queue_view("q").stopped_by == "head"
    cluster.when(3 * S, event("JobCancelled", job="head"))
    assert cluster.queue_view("q").stopped_by is None


def test_a_queue_emptied_and_filled_again_is_served() -> None:
    cluster = stopped_at_its_head()
    cluster.given(3 * S, event("JobCancelled", job="head"))
    cluster.finish(4 * S, "filler")
    cluster.when(5 * S, job("again", "q", gpu=1), job("elsewhere", "other", gpu=1))
    assert sorted(cluster.dispatched()) == ["again", "elsewhere"]


# -- the visited queues against their definition --------------------------------------------

QUEUES = ["a", "b", "c"]

steps = st.lists(
    st.tuples(
        st.sampled_from(["submit", "finish", "cancel", "delete", "configure", "restore"]),
        st.sampled_from(QUEUES),
        st.integers(min_value=1, max_value=3),  # GPUs asked
    ),
    max_size=25,
)


def check_visits(state: State) -> None:
    with_pending = {queue_id for queue_id, item in state.queues.items() if len(item.pending)}
    stopped = {
        queue_id
        for queue_id, item in state.queues.items()
        if item.stopped_by is not None or item.stopped_policy is not None
    }
    assert state.pending_queues == with_pending
    assert stopped <= state.stopped_queues


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps)
def test_the_visited_queues_are_those_with_pending_work_or_a_stop(script: list[Any]) -> None:
    cluster = Cluster()
    cluster.given(0, PATIENT, *(fifo_queue(name) for name in QUEUES), node("n1", gpu=4))
    ts, submitted = 0, 0
    for kind, queue_id, gpu in script:
        ts += S
        live = sorted(
            job_id for job_id, item in cluster.state.jobs.items() if item.queue == queue_id
        )
        if kind == "submit":
            submitted += 1
            if queue_id in cluster.state.queues:
                cluster.when(ts, job(f"j{submitted}", queue_id, gpu=gpu))
        elif kind == "finish":
            running = [job_id for job_id in live if cluster.state.jobs[job_id].placements]
            if running:
                cluster.finish(ts, running[0])
        elif kind == "cancel" and live:
            cluster.when(ts, event("JobCancelled", job=live[-1]))
        elif kind == "delete":  # refused while the queue has jobs: the core keeps it
            cluster.when(ts, event("QueueDeleted", queue=queue_id))
        elif kind == "configure":  # back after a deletion, or its quota changed
            cluster.when(ts, queue(queue_id, gpu_quota=gpu, policy={"kind": "fifo"}))
        elif kind == "restore":
            cluster.state = decode_state(encode_state(cluster.state))
        check_visits(cluster.state)


def test_a_stopped_queue_can_be_deleted_with_its_last_job() -> None:
    cluster = stopped_at_its_head()
    cluster.when(3 * S, event("JobCancelled", job="head"), event("QueueDeleted", queue="q"))
    assert cluster.rejections == []
    assert "q" not in cluster.queue_ids()
