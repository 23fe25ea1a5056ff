"""A transaction Kafka never finishes, against a real broker: the scheduler gives it up after
its bound, fences it with a new producer epoch, reads the journal back and carries on, with
nothing lost or sequenced twice (streams/bounded.py)."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer

from streams.metrics import SchedulerMonitor
from streams.replay import replay
from streams.sequencer import Scheduler
from tests.streams.test_sequencer import (
    commands_of,
    job,
    journal_of,
    make_topics,
    produce,
    read_raw,
    running_scheduler,
    seed_cluster,
    wait_for,
)

BOUND_S = 2.0  # the scheduler's bound on a transaction, shortened for the test
RECOVERIES = "quotaflow_scheduler_recoveries_total"


def observed(scheduler: Scheduler, cluster: str) -> SchedulerMonitor:
    """The scheduler's metrics from here on, as `--metrics-port` serves them."""
    monitor = SchedulerMonitor(cluster)
    scheduler.monitor = monitor
    monitor.attach(scheduler)
    return monitor


def recoveries(monitor: SchedulerMonitor, cause: str) -> float:
    return monitor.registry.get_sample_value(RECOVERIES, {"cause": cause}) or 0


def stall_offsets_once(producer: AIOKafkaProducer) -> list[int]:
    """The producer's next AddOffsetsToTxn never returns, as when aiokafka retries it for as
    long as the broker answers CONCURRENT_TRANSACTIONS; later calls are the real ones."""
    real = producer.send_offsets_to_transaction
    stalled: list[int] = []

    async def stalls(offsets: Any, group_id: str) -> None:
        if not stalled:
            stalled.append(1)
            await asyncio.Event().wait()  # no answer, ever
        await real(offsets, group_id)

    producer.send_offsets_to_transaction = stalls  # type: ignore[method-assign]
    return stalled


def dispatched(jobs: set[str], bootstrap: str, topics: Any) -> Any:
    async def probe() -> list[dict[str, Any]] | None:
        commands = [c for _, c in await commands_of(bootstrap, topics)]
        found = {c["job"] for c in commands if c["type"] == "Dispatch"}
        return commands if found == jobs else None

    return probe


async def assert_nothing_lost(bootstrap: str, topics: Any, cluster: str, jobs: list[str]) -> None:
    commands = [c for _, c in await commands_of(bootstrap, topics)]
    assert sorted(c["job"] for c in commands if c["type"] == "Dispatch") == jobs
    journal = await journal_of(bootstrap, topics, cluster)
    assert sorted(r.event.job for r in journal if r.event.type == "JobSubmitted") == jobs  # type: ignore[union-attr]
    assert [r.seq for r in journal] == list(range(1, len(journal) + 1))
    assert await read_raw(bootstrap, topics.rejected) == []
    report = await replay(bootstrap, topics.prefix, cluster)
    assert report.ok, report.summary()


async def test_a_batch_whose_transaction_never_finishes_is_given_up_and_redone(
    kafka_bootstrap: str,
) -> None:
    topics = await make_topics(kafka_bootstrap)
    cluster = "c-" + uuid.uuid4().hex[:6]
    # A long tick_ms: no idle epoch check comes between, so the batch's transaction stalls.
    await produce(kafka_bootstrap, topics.admin, [{"type": "ClusterConfigured", "tick_ms": 60_000}])
    async with running_scheduler(kafka_bootstrap, topics, cluster) as scheduler:
        scheduler.transaction_bound_s = BOUND_S
        monitor = observed(scheduler, cluster)
        await seed_cluster(kafka_bootstrap, topics, cluster)
        stalled_producer = scheduler._require_producer()
        stalled = stall_offsets_once(stalled_producer)
        await produce(kafka_bootstrap, topics.jobs, [job("job-1"), job("job-2")])
        probe = dispatched({"job-1", "job-2"}, kafka_bootstrap, topics)
        await wait_for(probe, "both jobs dispatched after the stall")
        assert stalled, "the stall was never injected"
        assert scheduler._producer is not stalled_producer, "the stalled producer was kept"
        assert recoveries(monitor, "stalled") == 1
    await assert_nothing_lost(kafka_bootstrap, topics, cluster, ["job-1", "job-2"])


async def test_an_idle_epoch_check_that_never_finishes_is_given_up(kafka_bootstrap: str) -> None:
    topics = await make_topics(kafka_bootstrap)
    cluster = "c-" + uuid.uuid4().hex[:6]
    # A short tick_ms: an idle scheduler confirms its epoch every 300 ms.
    config = {"type": "ClusterConfigured", "tick_ms": 300}
    await produce(kafka_bootstrap, topics.admin, [config])
    async with running_scheduler(kafka_bootstrap, topics, cluster) as scheduler:
        scheduler.transaction_bound_s = BOUND_S
        monitor = observed(scheduler, cluster)
        await seed_cluster(kafka_bootstrap, topics, cluster)
        stalled_producer = scheduler._require_producer()
        stalled = stall_offsets_once(stalled_producer)

        async def replaced() -> bool:
            return bool(stalled) and scheduler._producer not in (None, stalled_producer)

        await wait_for(replaced, "the stalled epoch check given up and its producer replaced")
        assert recoveries(monitor, "stalled") == 1
        await produce(kafka_bootstrap, topics.jobs, [job("job-1")])
        probe = dispatched({"job-1"}, kafka_bootstrap, topics)
        await wait_for(probe, "job-1 dispatched after the stalled epoch check")
    await assert_nothing_lost(kafka_bootstrap, topics, cluster, ["job-1"])


async def test_a_recovery_whose_offset_fetch_never_finishes_is_tried_again(
    kafka_bootstrap: str,
) -> None:
    from aiokafka.errors import KafkaConnectionError

    topics = await make_topics(kafka_bootstrap)
    cluster = "c-" + uuid.uuid4().hex[:6]
    await produce(kafka_bootstrap, topics.admin, [{"type": "ClusterConfigured", "tick_ms": 60_000}])
    async with running_scheduler(kafka_bootstrap, topics, cluster) as scheduler:
        scheduler.transaction_bound_s = BOUND_S
        monitor = observed(scheduler, cluster)
        await seed_cluster(kafka_bootstrap, topics, cluster)
        producer = scheduler._require_producer()
        real_offsets = producer.send_offsets_to_transaction
        failed: list[int] = []

        async def fails_once(offsets: Any, group_id: str) -> None:
            if not failed:
                failed.append(1)
                raise KafkaConnectionError("broker went away (injected)")
            await real_offsets(offsets, group_id)

        # The batch's transaction fails; the recovery that follows finds its first fetch of
        # the committed offsets unanswered, as while the coordinator keeps answering retriable
        # errors, and must give it up and recover again.
        producer.send_offsets_to_transaction = fails_once  # type: ignore[method-assign]
        consumer = scheduler._require_consumer()
        real_committed = consumer.committed
        stalled: list[int] = []

        async def stalls_once(tp: Any) -> Any:
            if failed and not stalled:
                stalled.append(1)
                await asyncio.Event().wait()  # no answer, ever
            return await real_committed(tp)

        consumer.committed = stalls_once  # type: ignore[method-assign]
        await produce(kafka_bootstrap, topics.jobs, [job("job-1"), job("job-2")])
        probe = dispatched({"job-1", "job-2"}, kafka_bootstrap, topics)
        await wait_for(probe, "both jobs dispatched after the stalled recovery")
        assert failed and stalled, "the failure or the stall was never injected"
        assert recoveries(monitor, "kafka_error") == 1
        assert recoveries(monitor, "step_failed") >= 1  # the recovery whose fetch stalled
    await assert_nothing_lost(kafka_bootstrap, topics, cluster, ["job-1", "job-2"])


async def test_a_producer_that_cannot_be_replaced_at_once_is_replaced_by_the_next_recovery(
    kafka_bootstrap: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from aiokafka.errors import KafkaConnectionError

    import streams.transaction

    topics = await make_topics(kafka_bootstrap)
    cluster = "c-" + uuid.uuid4().hex[:6]
    await produce(kafka_bootstrap, topics.admin, [{"type": "ClusterConfigured", "tick_ms": 60_000}])
    async with running_scheduler(kafka_bootstrap, topics, cluster) as scheduler:
        scheduler.transaction_bound_s = BOUND_S
        monitor = observed(scheduler, cluster)
        await seed_cluster(kafka_bootstrap, topics, cluster)
        stalled = stall_offsets_once(scheduler._require_producer())
        # The producer that replaces the stalled one cannot reach Kafka at first: the
        # scheduler is left without one until its next recovery starts another.
        make = streams.transaction.transactional_producer
        refused: list[int] = []

        def unreachable_once(bootstrap: str, transactional_id: str) -> AIOKafkaProducer:
            producer = make(bootstrap, transactional_id)
            if not refused:
                refused.append(1)

                async def refuse() -> None:
                    raise KafkaConnectionError("Unable to bootstrap from the broker (injected)")

                producer.start = refuse  # type: ignore[method-assign]
            return producer

        monkeypatch.setattr(streams.transaction, "transactional_producer", unreachable_once)
        await produce(kafka_bootstrap, topics.jobs, [job("job-1"), job("job-2")])
        probe = dispatched({"job-1", "job-2"}, kafka_bootstrap, topics)
        await wait_for(probe, "both jobs dispatched after the producer came back")
        assert stalled and refused, "the stall or the refusal was never injected"
        assert recoveries(monitor, "stalled") == 1
        assert recoveries(monitor, "step_failed") >= 1  # the step whose restart failed
    await assert_nothing_lost(kafka_bootstrap, topics, cluster, ["job-1", "job-2"])
