"""Each node's configuration in a local cluster, and the standby's journal following, without a broker (pure seams)."""

from __future__ import annotations

from pathlib import Path

from devtools.cluster import NodeLayout, broker_properties
from domain.events import JournalRecord, NodeHeartbeat, Tick
from domain.wire_types import ResourcesIn
from streams.kafka_io import Topics
from streams.standby import Follower


def _parse(text: str) -> dict[str, str]:
    lines = [line for line in text.splitlines() if line and not line.startswith("#")]
    return dict(line.split("=", 1) for line in lines)


def _nodes(count: int) -> list[NodeLayout]:
    return [
        NodeLayout(i, 9000 + i, 9100 + i, Path(f"/data/broker-{i}")) for i in range(1, count + 1)
    ]


def test_three_nodes_share_one_quorum_and_replicate_internal_topics_three_times() -> None:
    nodes = _nodes(3)
    configs = [_parse(broker_properties(node, nodes)) for node in nodes]
    voters = "1@127.0.0.1:9101,2@127.0.0.1:9102,3@127.0.0.1:9103"
    assert {c["controller.quorum.voters"] for c in configs} == {voters}
    assert [c["node.id"] for c in configs] == ["1", "2", "3"]
    assert [c["advertised.listeners"] for c in configs] == [
        f"PLAINTEXT://127.0.0.1:{9000 + i}" for i in (1, 2, 3)
    ]
    assert [c["log.dirs"] for c in configs] == [f"/data/broker-{i}/kraft-logs" for i in (1, 2, 3)]
    for config in configs:
        assert config["transaction.state.log.replication.factor"] == "3"
        assert config["transaction.state.log.min.isr"] == "2"
        assert config["offsets.topic.replication.factor"] == "3"
        assert config["min.insync.replicas"] == "2"
        assert config["unclean.leader.election.enable"] == "false"


def test_extra_settings_override_and_extend_one_node_only() -> None:
    nodes = _nodes(3)
    extra = {"listeners": "SASL_SSL://127.0.0.1:9001", "ssl.client.auth": "required"}
    config = _parse(broker_properties(nodes[0], nodes, extra))
    assert config["listeners"] == "SASL_SSL://127.0.0.1:9001"
    assert config["ssl.client.auth"] == "required"
    assert _parse(broker_properties(nodes[1], nodes))["listeners"].startswith("PLAINTEXT://")


def test_a_single_node_cluster_keeps_replication_at_one() -> None:
    (node,) = _nodes(1)
    config = _parse(broker_properties(node, [node]))
    assert config["transaction.state.log.replication.factor"] == "1"
    assert config["min.insync.replicas"] == "1"


def _record(seq: int, ts: int) -> JournalRecord:
    event = NodeHeartbeat(node="n1", capacity=ResourcesIn(gpu=8)) if seq == 1 else Tick()
    return JournalRecord(seq=seq, ts=ts, event=event)


def test_the_follower_folds_in_seq_order_and_refuses_a_gap() -> None:
    follower = Follower("unused:9092", Topics(), "c")
    assert follower.warm() is None
    assert follower._take(_record(1, 10), offset=0)
    assert follower._take(_record(2, 11), offset=1)
    warm = follower.warm()
    assert warm is not None and warm.offset == 1 and warm.state.seq == 2
    assert not follower._take(_record(4, 12), offset=3)  # seq 3 is missing


def test_the_follower_checks_the_snapshot_record_instead_of_folding_it_again() -> None:
    follower = Follower("unused:9092", Topics(), "c")
    follower._take(_record(1, 10), offset=0)
    follower._expect = 1  # as if the state came from a snapshot taken at seq 1
    assert follower._take(_record(1, 10), offset=5)
    assert follower.warm() is not None and follower.warm().offset == 5  # type: ignore[union-attr]
    assert follower.state.seq == 1
