"""Journal hygiene against a real broker: quiet heartbeats are not journaled, a silent node is
still lost within heartbeat_timeout_s, no Tick without a due timer, and replay stays exact."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from streams.replay import replay
from tests.streams.test_sequencer import (
    commands_of,
    job,
    journal_of,
    make_topics,
    produce,
    running_scheduler,
    wait_for,
    wait_journaled,
)

TIMEOUT_S = 4  # heartbeat_timeout_s: long enough that a loaded machine never misses a beat


def beat(node: str) -> dict[str, Any]:
    return {
        "type": "NodeHeartbeat",
        "node": node,
        "capacity": {"gpu": 8, "cpu": 64000, "memory": 256000},
    }


async def test_a_silent_node_is_lost_though_quiet_heartbeats_are_not_journaled(
    kafka_bootstrap: str,
) -> None:
    topics = await make_topics(kafka_bootstrap)
    cluster = "c-" + uuid.uuid4().hex[:6]
    config = {"type": "ClusterConfigured", "heartbeat_timeout_s": TIMEOUT_S, "tick_ms": 200}
    queue = {"type": "QueueConfigured", "queue": "research", "resources": {"gpu": {"quota": 8}}}
    await produce(kafka_bootstrap, topics.admin, [config, queue])
    async with running_scheduler(kafka_bootstrap, topics, cluster):
        await produce(kafka_bootstrap, topics.nodes, [beat("node-b")], key="node-b")
        await wait_journaled(
            kafka_bootstrap, topics, cluster, lambda r: r.event.type == "NodeHeartbeat"
        )
        await produce(kafka_bootstrap, topics.jobs, [job("job-1", gpu=8)], key="job-1")

        async def dispatches() -> list[dict[str, Any]] | None:
            found = [
                c for _, c in await commands_of(kafka_bootstrap, topics) if c["type"] == "Dispatch"
            ]
            return found or None

        first = await wait_for(dispatches, "job-1 dispatched to node-b")
        assert first[0]["node"] == "node-b"

        # node-a heartbeats on, node-b falls silent: job-1 must move to node-a.
        async def moved() -> list[dict[str, Any]] | None:
            found = await dispatches() or []
            return found if any(c["node"] == "node-a" for c in found) else None

        loop = asyncio.get_running_loop()
        deadline = loop.time() + 60
        found = None
        while found is None and loop.time() < deadline:
            await produce(kafka_bootstrap, topics.nodes, [beat("node-a")] * 1, key="node-a")
            await asyncio.sleep(0.5)
            found = await moved()
        assert found is not None, "job-1 never moved to node-a"
        # A few more beats of node-a after the move, to see them absorbed.
        for _ in range(3):
            await produce(kafka_bootstrap, topics.nodes, [beat("node-a")], key="node-a")
            await asyncio.sleep(0.3)
        await asyncio.sleep(1)

    journal = await journal_of(kafka_bootstrap, topics, cluster)
    heartbeats = [r for r in journal if r.event.type == "NodeHeartbeat"]
    # Only registrations are journaled as heartbeats: one per node, however many were sent.
    assert sorted(r.event.node for r in heartbeats) == ["node-a", "node-b"]  # type: ignore[union-attr]
    b_heard = next(r.ts for r in heartbeats if r.event.node == "node-b")  # type: ignore[union-attr]
    redispatch = next(c for c in found if c["node"] == "node-a")
    assert redispatch["job"] == "job-1" and redispatch["attempt"] == 2
    # Lost no earlier than heartbeat_timeout_s after it was last heard (and node-a never was).
    assert redispatch["ts"] >= b_heard + TIMEOUT_S * 1000
    report = await replay(kafka_bootstrap, topics.prefix, cluster)
    assert report.ok, report.summary()
    assert report.reproduced == report.observed == report.expected >= 2


async def test_no_tick_is_journaled_while_no_timer_is_due(kafka_bootstrap: str) -> None:
    topics = await make_topics(kafka_bootstrap)
    cluster = "c-" + uuid.uuid4().hex[:6]
    config = {"type": "ClusterConfigured", "tick_ms": 50}
    queue = {"type": "QueueConfigured", "queue": "research", "resources": {"gpu": {"quota": 8}}}
    await produce(kafka_bootstrap, topics.admin, [config, queue])
    async with running_scheduler(kafka_bootstrap, topics, cluster):
        await wait_journaled(
            kafka_bootstrap, topics, cluster, lambda r: r.event.type == "QueueConfigured"
        )
        await asyncio.sleep(2)  # forty tick_ms: the old scheduler journaled a Tick each
    journal = await journal_of(kafka_bootstrap, topics, cluster)
    assert [r.event.type for r in journal] == ["ClusterConfigured", "QueueConfigured"]
    report = await replay(kafka_bootstrap, topics.prefix, cluster)
    assert report.ok, report.summary()


async def test_quiet_heartbeats_take_no_transaction_and_their_offsets_ride_the_next(
    kafka_bootstrap: str,
) -> None:
    topics = await make_topics(kafka_bootstrap)
    cluster = "c-" + uuid.uuid4().hex[:6]
    # A long tick_ms: the offsets of inputs that write nothing may wait that long.
    config = {"type": "ClusterConfigured", "tick_ms": 60_000, "heartbeat_timeout_s": 600}
    queue = {"type": "QueueConfigured", "queue": "research", "resources": {"gpu": {"quota": 8}}}
    await produce(kafka_bootstrap, topics.admin, [config, queue])
    async with running_scheduler(kafka_bootstrap, topics, cluster) as scheduler:
        await produce(kafka_bootstrap, topics.nodes, [beat("node-a")], key="node-a")
        await wait_journaled(
            kafka_bootstrap, topics, cluster, lambda r: r.event.type == "NodeHeartbeat"
        )
        # A spy on the real producer: every transaction the scheduler begins from here on.
        producer = scheduler._require_producer()
        begin = producer.begin_transaction
        began: list[int] = []

        async def counted() -> Any:
            began.append(scheduler.state.seq)
            return await begin()

        producer.begin_transaction = counted
        await produce(kafka_bootstrap, topics.nodes, [beat("node-a")] * 3, key="node-a")

        async def heard() -> bool:
            return "node-a" in scheduler.liveness.heard

        await wait_for(heard, "the quiet heartbeats noted")
        await asyncio.sleep(1)  # and any of the three read in a later batch
        assert began == [], "quiet heartbeats began a transaction"

        await produce(kafka_bootstrap, topics.jobs, [job("job-1", gpu=1)], key="job-1")
        await wait_journaled(
            kafka_bootstrap, topics, cluster, lambda r: r.event.type == "JobSubmitted"
        )
        assert began, "the job's batch began no transaction"
        consumer, partitions = scheduler.ingress_reader()
        assert consumer is not None
        nodes = [tp for tp in partitions if tp.topic == topics.nodes]
        committed = {tp: await consumer.committed(tp) for tp in nodes}
        # The job's transaction committed the heartbeats' offsets too: all four were read.
        assert sum(offset or 0 for offset in committed.values()) == 4

    journal = await journal_of(kafka_bootstrap, topics, cluster)
    assert [r.event.type for r in journal].count("NodeHeartbeat") == 1
    report = await replay(kafka_bootstrap, topics.prefix, cluster)
    assert report.ok, report.summary()
