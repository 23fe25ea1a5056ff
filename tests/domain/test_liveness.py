"""Node liveness without a journal record per heartbeat: NodesAlive and the next due time (pure)."""

from __future__ import annotations

from typing import Any

import pytest

from domain.codec import DecodeError, decode_ingress
from domain.events import NodeHeartbeat
from domain.liveness import changes_view, next_due_ts
from tests.domain.harness import Cluster, event, job, node, queue


def given_a_running_job() -> Cluster:
    cluster = Cluster()
    cluster.given(0, event("ClusterConfigured", heartbeat_timeout_s=10), queue("a", gpu_quota=8))
    cluster.given(0, node("n1", gpu=1))
    cluster.when(1000, job("j", "a"))
    assert cluster.dispatched() == ["j"]
    return cluster


def test_a_node_heard_keeps_its_jobs_past_its_journaled_heartbeats_timeout() -> None:
    cluster = given_a_running_job()
    cluster.when(9000, event("NodesAlive", seen={"n1": 8000}))
    cluster.when(17_000, event("Tick"))
    assert cluster.job("j").status.value == "running"
    assert cluster.last == []


def test_a_node_is_lost_timeout_after_it_was_heard_not_after_the_record() -> None:
    cluster = given_a_running_job()
    # Journaled late (at the node's expiry) but heard at 5000: lost at 15000, not at 25000.
    cluster.when(10_000, event("NodesAlive", seen={"n1": 5000}))
    assert cluster.job("j").status.value == "running"
    cluster.when(15_000, event("Tick"))
    assert cluster.job("j").status.value == "pending"


def test_nodes_alive_neither_registers_nor_returns_a_node() -> None:
    cluster = given_a_running_job()
    cluster.when(10_000, event("Tick"))  # n1 lost
    cluster.when(10_001, event("NodesAlive", seen={"n1": 10_001, "ghost": 10_001}))
    assert cluster.job("j").status.value == "pending"
    assert next_due_ts(cluster.state) is None  # no live node, no timer
    cluster.when(10_002, node("n1", gpu=1))  # a full heartbeat returns it
    assert cluster.dispatched() == ["j"]


def test_next_due_ts_is_the_earliest_live_nodes_expiry() -> None:
    cluster = Cluster()
    assert next_due_ts(cluster.state) is None
    cluster.given(0, event("ClusterConfigured", heartbeat_timeout_s=10), node("n1"), node("n2"))
    assert next_due_ts(cluster.state) == 10_000
    cluster.when(4000, event("NodesAlive", seen={"n1": 4000, "n2": 3000}))
    assert next_due_ts(cluster.state) == 13_000


def test_only_heartbeats_that_change_the_cores_view_need_a_record() -> None:
    cluster = Cluster()
    cluster.given(0, node("n1", gpu=8, labels={"zone": "a"}))

    def heartbeat(**fields: Any) -> NodeHeartbeat:
        beat = node("n1", gpu=8, labels={"zone": "a"}, **fields)
        assert isinstance(beat, NodeHeartbeat)
        return beat

    assert not changes_view(cluster.state, heartbeat())
    assert changes_view(cluster.state, node("n1", gpu=4, labels={"zone": "a"}))  # type: ignore[arg-type]
    assert changes_view(cluster.state, node("n1", gpu=8, labels={"zone": "b"}))  # type: ignore[arg-type]
    assert changes_view(cluster.state, heartbeat(instance="agent-1", incarnation=1))
    assert changes_view(cluster.state, node("n2"))  # type: ignore[arg-type]


def test_producers_cannot_send_nodes_alive() -> None:
    with pytest.raises(DecodeError):
        decode_ingress("quotaflow.nodes", b'{"type": "NodesAlive", "seen": {"n1": 1}}')
    cluster = Cluster()
    from domain.decider import accept

    reason = accept(cluster.state, event("NodesAlive", seen={"n1": 1}))
    assert reason == "NodesAlive records are appended by the scheduler only"
