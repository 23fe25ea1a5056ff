"""The next due time read from a derived heap of live nodes' deadlines equals reading every
node, over generated heartbeats, losses, returns, timeouts and restores (pure)."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from domain.liveness import next_due_ts
from domain.snapshot import decode_state, encode_state
from domain.state import State
from tests.domain.harness import Cluster, event, node

NODES = ["n0", "n1", "n2", "n3"]


def every_node_read(state: State) -> int | None:
    """next_due_ts as it was: the earliest timer, or the earliest live node's deadline."""
    due = state.timers[0][0] if state.timers else None
    timeout_ms = state.cluster.heartbeat_timeout_s * 1000
    for item in state.nodes.values():
        if not item.lost and (due is None or item.last_heartbeat_ts + timeout_ms < due):
            due = item.last_heartbeat_ts + timeout_ms
    return due


steps = st.lists(
    st.tuples(
        st.sampled_from(["heartbeat", "alive", "tick", "timeout", "restore"]),
        st.integers(min_value=1, max_value=4000),  # ms later
        st.sets(st.sampled_from(NODES), min_size=1, max_size=4),
        st.booleans(),  # ask next_due_ts after this step
    ),
    max_size=30,
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps)
def test_the_next_due_time_is_the_earliest_live_deadline(script: list[Any]) -> None:
    cluster = Cluster()
    cluster.given(0, event("ClusterConfigured", heartbeat_timeout_s=5))
    ts = 0
    for kind, later, nodes, ask in script:
        ts += later
        if kind == "heartbeat":  # registers, refreshes or returns each node
            cluster.when(ts, *(node(name, gpu=1) for name in sorted(nodes)))
        elif kind == "alive":  # heard a little earlier; ignored for unknown or lost nodes
            cluster.when(ts, event("NodesAlive", seen={name: ts - later // 2 for name in nodes}))
        elif kind == "tick":  # nodes past their deadline are lost
            cluster.when(ts, event("Tick"))
        elif kind == "timeout":
            cluster.when(ts, event("ClusterConfigured", heartbeat_timeout_s=2 + later % 7))
        else:  # a restart from a snapshot: the derived heap is made again
            cluster.state = decode_state(encode_state(cluster.state))
        if ask:
            assert next_due_ts(cluster.state) == every_node_read(cluster.state)
    assert next_due_ts(cluster.state) == every_node_read(cluster.state)


def test_a_node_heard_again_moves_the_due_time_past_its_old_deadline() -> None:
    # Given two nodes heard at 0 and 1000, with a 5 s timeout
    cluster = Cluster()
    cluster.given(0, event("ClusterConfigured", heartbeat_timeout_s=5), node("n0"))
    cluster.given(1000, node("n1"))
    assert next_due_ts(cluster.state) == 5000

    # When n0 is heard again at 3000
    cluster.when(3000, event("NodesAlive", seen={"n0": 3000}))

    # Then the next due time is n1's deadline, not n0's old one
    assert next_due_ts(cluster.state) == 6000
