"""The free room of the nodes a selector matches, kept by the node index, equals summing
every node, whenever consolidation or reclaim with moves asks it: a property over generated
clusters whose nodes change labels, fail and return, with a snapshot restore (pure)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any
from unittest import mock

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from domain.actions import consolidate, reclaim_moves
from domain.resources import ZERO, Resources
from domain.simulation import Simulator
from domain.snapshot import decode_state, encode_state
from domain.state import Job, State
from tests.domain.harness import Cluster, job, node, queue

NODES = ["n0", "n1", "n2"]
ZONES = [{}, {"zone": "x"}, {"zone": "y"}, {"zone": "x", "disk": "ssd"}]


def every_node_summed(state: State, job: Job) -> Resources:
    """The free room as it was: each node read, its labels matched."""
    if not job.node_selector:
        return state.node_index.free_total
    total = ZERO
    for node_id in sorted(state.nodes):
        node = state.nodes[node_id]
        if not node.lost and node.matches(job.node_selector):
            total = total + node.free.clamp_at_zero()
    return total


asked: list[bool] = []  # one entry a check, True when the job had a selector
kept_free_room = consolidate.free_room  # the real one, before the checks wrap it


def checked_free_room(state: State, job: Job) -> Resources:
    kept = kept_free_room(state, job)
    assert kept == every_node_summed(state, job)
    asked.append(bool(job.node_selector))
    return kept


@contextmanager
def every_ask_checked() -> Iterator[None]:
    with (
        mock.patch.object(consolidate, "free_room", checked_free_room),
        mock.patch.object(reclaim_moves, "free_room", checked_free_room),
    ):
        yield


@st.composite
def scenarios(draw: st.DrawFn) -> list[dict[str, Any]]:
    lines: list[dict[str, Any]] = [
        {"type": "ClusterConfigured", "ts": 0, "heartbeat_timeout_s": 5},
        {"type": "QueueConfigured", "ts": 0, "queue": "a", "resources": {"gpu": {"quota": 4}}},
        {"type": "QueueConfigured", "ts": 0, "queue": "b", "resources": {"gpu": {"quota": 4}}},
    ]
    ts = 0
    for step in range(draw(st.integers(3, 25))):
        ts += draw(st.sampled_from([0, 500, 2000, 7000]))
        kind = draw(st.sampled_from(["job", "job", "job", "labels", "down"]))
        name = draw(st.sampled_from(NODES))
        if kind == "labels" or step < len(NODES):  # registers a node or changes its labels
            gpu = draw(st.sampled_from([2, 4, 8]))
            node = NODES[step] if step < len(NODES) else name
            labels = draw(st.sampled_from(ZONES))
            heartbeat = {"type": "NodeHeartbeat", "ts": ts, "node": node, "capacity": {"gpu": gpu}}
            lines.append(heartbeat | {"labels": labels})
        elif kind == "down":
            lines.append({"type": "NodeDown", "ts": ts, "node": name})
        else:
            body: dict[str, Any] = {
                "type": "JobSubmitted",
                "ts": ts,
                "job": f"j{step}",
                "queue": draw(st.sampled_from(["a", "b"])),
                "tasks": draw(st.integers(1, 3)),
                "resources": {"gpu": draw(st.sampled_from([1, 2, 4]))},
                "duration_s": draw(st.integers(1, 30)),
            }
            selector = draw(st.sampled_from([None, {"zone": "x"}, {"disk": "ssd"}]))
            if selector is not None:
                body["node_selector"] = selector
            lines.append(body)
    return lines


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_the_kept_free_room_of_a_selector_is_every_matching_nodes(
    lines: list[dict[str, Any]],
) -> None:
    simulator = Simulator()
    half = len(lines) // 2
    with every_ask_checked():
        list(simulator.run(orjson.dumps(line) for line in lines[:half]))
        # A restart from a snapshot: the index starts with no selector kept.
        simulator.state = decode_state(encode_state(simulator.state))
        list(simulator.run(orjson.dumps(line) for line in lines[half:]))


def test_an_overbooked_node_counts_as_no_free_room() -> None:
    # Given two zone-x nodes, one running 4 GPUs of work when it comes back with 2 GPUs,
    cluster = Cluster()
    x = {"zone": "x"}
    cluster.given(0, queue("q", gpu_quota=8), node("n1", gpu=4, labels=x), node("n2", gpu=4))
    cluster.given(1000, job("big", "q", gpu=4))
    assert cluster.job("big").placements == {"n1": 1}
    cluster.given(2000, node("n1", gpu=2, labels=x), node("n2", gpu=4, labels=x))
    # when a zone-x job asks what the nodes it may use have free,
    asking = replace(cluster.job("big"), node_selector=(("zone", "x"),))
    room = consolidate.free_room(cluster.state, asking)
    # then the overbooked node counts as none, not as less than none.
    assert room.gpu == 4000
