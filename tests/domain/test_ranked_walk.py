"""A victim walk that needs more than the cheapest node's set asks for the cheapest few, then more: the same commands and reasons as when every node is costed at once."""

from __future__ import annotations

from typing import Any
from unittest import mock

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from domain.cycle import victims
from tests.domain.test_blocked_shapes import WatchedSimulator, simulate
from tests.domain.test_failed_plans import fragmenting_arrivals
from tests.domain.test_placed_room import shared_devices
from tests.domain.test_reclaim_properties import scenarios


@st.composite
def gangs_over_small_nodes(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Nodes of 2 GPUs; queue b runs gangs of one-GPU tasks spread over them, beyond its
    quota; queue a, below its quota, then asks for gangs of whole nodes: a walk needs many
    nodes' sets, and a victim taken for one node frees room on others too."""
    nodes = draw(st.integers(4, 9))
    quotas = {"a": draw(st.integers(4, 2 * nodes)), "b": draw(st.integers(0, 4))}
    lines = spread_cluster(quotas, nodes, gpus=2)
    for index in range(draw(st.integers(2, nodes))):
        lines.append(
            {
                "type": "JobSubmitted",
                "ts": 1000,
                "job": f"b{index}",
                "queue": "b",
                "priority": draw(st.integers(1, 9)),
                "tasks": draw(st.integers(1, 3)),
                "resources": {"gpu": 1},
            }
        )
    for index in range(draw(st.integers(1, 3))):
        lines.append(
            {
                "type": "JobSubmitted",
                "ts": 2000 + 1000 * index,
                "job": f"a{index}",
                "queue": "a",
                "tasks": draw(st.integers(2, nodes)),
                "resources": {"gpu": 2},
            }
        )
    return lines


def spread_cluster(quotas: dict[str, int], nodes: int, gpus: int) -> list[dict[str, Any]]:
    """A cluster that spreads tasks and never consolidates: queues of these GPU quotas (no
    limit), and `nodes` nodes of `gpus` GPUs each."""
    lines: list[dict[str, Any]] = [
        {"type": "ClusterConfigured", "ts": 0, "placement": "spread", "consolidation": False}
    ]
    for name, quota in quotas.items():
        lines.append(
            {
                "type": "QueueConfigured",
                "ts": 0,
                "queue": name,
                "resources": {"gpu": {"quota": quota, "limit": -1}},
            }
        )
    for index in range(nodes):
        lines.append(
            {"type": "NodeHeartbeat", "ts": 0, "node": f"n{index}", "capacity": {"gpu": gpus}}
        )
    return lines


def assert_as_when_every_node_is_costed_at_once(lines: list[dict[str, Any]]) -> None:
    with mock.patch.object(victims, "RANKED_FIRST", 1):  # one set, then 4, 16, ...
        bit_by_bit = simulate(lines, WatchedSimulator)
    with mock.patch.object(victims, "RANKED_FIRST", 1 << 30):  # every node at once
        at_once = simulate(lines, WatchedSimulator)
    assert bit_by_bit == at_once


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(scenarios(), shared_devices(), fragmenting_arrivals(), gangs_over_small_nodes()))
def test_a_walk_ranking_nodes_bit_by_bit_changes_no_command_or_reason(
    lines: list[dict[str, Any]],
) -> None:
    assert_as_when_every_node_is_costed_at_once(lines)
