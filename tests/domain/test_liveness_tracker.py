"""The sequencer's liveness tracker over a pure state: what it journals, and when (no broker)."""

from __future__ import annotations

from domain.events import NodeHeartbeat
from domain.liveness import LivenessTracker
from tests.domain.harness import Cluster, event, node


def beat(name: str) -> NodeHeartbeat:
    heartbeat = node(name, gpu=8)
    assert isinstance(heartbeat, NodeHeartbeat)
    return heartbeat


def given_two_nodes() -> Cluster:
    cluster = Cluster()
    cluster.given(0, event("ClusterConfigured", heartbeat_timeout_s=10))
    cluster.given(0, node("n1", gpu=8), node("n2", gpu=8))
    return cluster


def test_a_quiet_heartbeat_is_noted_and_a_changed_one_is_not() -> None:
    cluster = given_two_nodes()
    tracker = LivenessTracker()
    assert tracker.absorb(cluster.state, beat("n1"), 1000)
    assert not tracker.absorb(cluster.state, node("n1", gpu=4), 1500)  # type: ignore[arg-type]
    assert tracker.heard == {}  # the journaled heartbeat supersedes what was noted


def test_what_was_heard_is_journaled_when_half_the_lease_is_gone() -> None:
    cluster = given_two_nodes()
    tracker = LivenessTracker()
    tracker.absorb(cluster.state, beat("n1"), 1000)
    assert tracker.refresh_at() == 5000  # lease 0 + 10 s, half of it left
    assert tracker.due(cluster.state, 4999) == []
    [record] = tracker.due(cluster.state, 5000)
    assert record.seen == {"n1": 1000}
    cluster.when(5000, record)
    tracker.committed(cluster.state, [record])
    assert tracker.heard == {} and tracker.refresh_at() is None


def test_what_was_heard_is_journaled_before_the_core_acts_on_a_due_expiry() -> None:
    cluster = given_two_nodes()
    cluster.when(8000, event("NodesAlive", seen={"n1": 8000}))  # n2 expires first, at 10 s
    tracker = LivenessTracker()
    tracker.absorb(cluster.state, beat("n1"), 9000)
    assert tracker.refresh_at() == 13_000  # n1's own lease is far from half gone
    assert tracker.due(cluster.state, 9999) == []
    [record] = tracker.due(cluster.state, 10_000)  # but the core acts on n2 at 10 s
    assert record.seen == {"n1": 9000}


def test_a_node_heard_again_after_the_record_was_taken_stays_noted() -> None:
    cluster = given_two_nodes()
    tracker = LivenessTracker()
    tracker.absorb(cluster.state, beat("n1"), 1000)
    records = tracker.due(cluster.state, 6000)
    tracker.absorb(cluster.state, beat("n1"), 6001)  # heard while the batch was written
    cluster.when(6000, *records)
    tracker.committed(cluster.state, records)
    assert tracker.heard == {"n1": 6001}
    assert tracker.refresh_at() == 1000 + 5000
