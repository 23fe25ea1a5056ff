"""A transaction Kafka never finishes, against a real broker: the scheduler gives it up after
its bound, fences it with a new producer epoch, reads the journal back and carries on, with
nothing lost or sequenced twice (streams/bounded.py)."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaConnectionError

import streams.snapshots
import streams.transaction
from domain.decider import close_group
from domain.snapshot import encode_state
from streams.kafka_io import Topics, transactional_producer
from streams.metrics import SchedulerMonitor
from streams.replay import replay
from streams.replay_sources import read_snapshots
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
SNAPSHOTS = "quotaflow_snapshots_total"
JOBS = ["job-1", "job-2"]


@dataclass
class Seeded:
    bootstrap: str
    topics: Topics
    cluster: str
    scheduler: Scheduler
    monitor: SchedulerMonitor

    def recoveries(self, cause: str) -> float:
        return self.monitor.registry.get_sample_value(RECOVERIES, {"cause": cause}) or 0

    async def submit(self, jobs: list[str], what: str) -> None:
        """Submits the jobs and waits until each is dispatched."""
        await produce(self.bootstrap, self.topics.jobs, [job(j) for j in jobs])

        async def all_dispatched() -> bool:
            commands = [c for _, c in await commands_of(self.bootstrap, self.topics)]
            return {c["job"] for c in commands if c["type"] == "Dispatch"} == set(jobs)

        await wait_for(all_dispatched, what)


@contextlib.asynccontextmanager
async def seeded(bootstrap: str, tick_ms: int, jobs: list[str]) -> AsyncIterator[Seeded]:
    """A running scheduler with a queue and a node, its bound shortened and its metrics
    observed; after the block, every one of `jobs` was journaled and dispatched once, nothing
    was rejected, and replay reproduces every command."""
    topics = await make_topics(bootstrap)
    cluster = "c-" + uuid.uuid4().hex[:6]
    await produce(bootstrap, topics.admin, [{"type": "ClusterConfigured", "tick_ms": tick_ms}])
    async with running_scheduler(bootstrap, topics, cluster) as scheduler:
        scheduler.transaction_bound_s = BOUND_S
        monitor = SchedulerMonitor(cluster)  # as `--metrics-port` serves them
        scheduler.monitor = monitor
        monitor.attach(scheduler)
        await seed_cluster(bootstrap, topics, cluster)
        yield Seeded(bootstrap, topics, cluster, scheduler, monitor)
    commands = [c for _, c in await commands_of(bootstrap, topics)]
    assert sorted(c["job"] for c in commands if c["type"] == "Dispatch") == jobs
    journal = await journal_of(bootstrap, topics, cluster)
    assert sorted(r.event.job for r in journal if r.event.type == "JobSubmitted") == jobs
    assert [r.seq for r in journal] == list(range(1, len(journal) + 1))
    assert await read_raw(bootstrap, topics.rejected) == []
    report = await replay(bootstrap, topics.prefix, cluster)
    assert report.ok, report.summary()


def stall_once(client: Any, method: str, armed: Callable[[], bool] = lambda: True) -> list[int]:
    """The client's next call of `method` once `armed` never returns, as when aiokafka
    retries a request for as long as Kafka answers with a retriable error; the calls before
    and after it are the real ones. Returns the list that notes the stall."""
    real = getattr(client, method)
    stalled: list[int] = []

    async def stalls(*args: Any) -> Any:
        if armed() and not stalled:
            stalled.append(1)
            await asyncio.Event().wait()  # no answer, ever
        return await real(*args)

    setattr(client, method, stalls)
    return stalled


def stall_offsets_once(producer: AIOKafkaProducer) -> list[int]:
    """The producer's next AddOffsetsToTxn never returns (the broker answering
    CONCURRENT_TRANSACTIONS for ever)."""
    return stall_once(producer, "send_offsets_to_transaction")


def slowed(real: Callable[..., Any], calls: list[int]) -> Callable[..., Any]:
    """`real`, after holding the event loop 1.5 bounds long, as the core's own work does."""

    def slow(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        time.sleep(BOUND_S * 1.5)
        return real(*args, **kwargs)

    return slow


async def test_a_batch_whose_transaction_never_finishes_is_given_up_and_redone(
    kafka_bootstrap: str,
) -> None:
    # A long tick_ms: no idle epoch check comes between, so the batch's transaction stalls.
    async with seeded(kafka_bootstrap, 60_000, JOBS) as run:
        stalled_producer = run.scheduler._require_producer()
        stalled = stall_offsets_once(stalled_producer)
        await run.submit(JOBS, "both jobs dispatched after the stall")
        assert stalled, "the stall was never injected"
        assert run.scheduler._producer is not stalled_producer, "the stalled producer was kept"
        assert run.recoveries("stalled") == 1


async def test_an_idle_epoch_check_that_never_finishes_is_given_up(kafka_bootstrap: str) -> None:
    # A short tick_ms: an idle scheduler confirms its epoch every 300 ms.
    async with seeded(kafka_bootstrap, 300, ["job-1"]) as run:
        scheduler = run.scheduler
        stalled_producer = scheduler._require_producer()
        stalled = stall_offsets_once(stalled_producer)

        async def replaced() -> bool:
            return bool(stalled) and scheduler._producer not in (None, stalled_producer)

        await wait_for(replaced, "the stalled epoch check given up and its producer replaced")
        assert run.recoveries("stalled") == 1
        await run.submit(["job-1"], "job-1 dispatched after the stalled epoch check")


async def test_an_idle_epoch_check_whose_position_never_comes_is_given_up(
    kafka_bootstrap: str,
) -> None:
    # A short tick_ms: an idle scheduler confirms its epoch every 300 ms, and first asks the
    # consumer for its position, which aiokafka may wait for (an offset fetch it retries)
    async with seeded(kafka_bootstrap, 300, ["job-1"]) as run:
        stalled = stall_once(run.scheduler._require_consumer(), "position")

        async def given_up() -> bool:
            return bool(stalled) and run.recoveries("step_failed") >= 1

        await wait_for(given_up, "the epoch check's unanswered position given up")
        await run.submit(["job-1"], "job-1 dispatched after the unanswered position")


async def test_a_recovery_whose_offset_fetch_never_finishes_is_tried_again(
    kafka_bootstrap: str,
) -> None:
    async with seeded(kafka_bootstrap, 60_000, JOBS) as run:
        producer = run.scheduler._require_producer()
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
        producer.send_offsets_to_transaction = fails_once
        stalled = stall_once(run.scheduler._require_consumer(), "committed", lambda: bool(failed))
        await run.submit(JOBS, "both jobs dispatched after the stalled recovery")
        assert failed and stalled, "the failure or the stall was never injected"
        assert run.recoveries("kafka_error") == 1
        assert run.recoveries("step_failed") >= 1  # the recovery whose fetch stalled


async def test_a_producer_that_cannot_be_replaced_at_once_is_replaced_by_the_next_recovery(
    kafka_bootstrap: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with seeded(kafka_bootstrap, 60_000, JOBS) as run:
        stalled = stall_offsets_once(run.scheduler._require_producer())
        # The producer that replaces the stalled one cannot reach Kafka at first: the
        # scheduler is left without one until its next recovery starts another.
        make = transactional_producer
        refused: list[int] = []

        def unreachable_once(bootstrap: str, transactional_id: str) -> AIOKafkaProducer:
            producer = make(bootstrap, transactional_id)
            if not refused:
                refused.append(1)

                async def refuse() -> None:
                    raise KafkaConnectionError("Unable to bootstrap from the broker (injected)")

                producer.start = refuse
            return producer

        monkeypatch.setattr(streams.transaction, "transactional_producer", unreachable_once)
        await run.submit(JOBS, "both jobs dispatched after the producer came back")
        assert stalled and refused, "the stall or the refusal was never injected"
        assert run.recoveries("stalled") == 1
        assert run.recoveries("step_failed") >= 1  # the step whose restart failed


async def test_a_cycle_longer_than_the_bound_is_not_a_stall(
    kafka_bootstrap: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The first cycle over a large backlog may take a minute: only waiting on Kafka counts
    # against the bound, or such a batch would be given up and run again for ever.
    long: list[int] = []
    async with seeded(kafka_bootstrap, 60_000, ["job-1"]) as run:
        long_cycle = slowed(close_group, long)
        monkeypatch.setattr(streams.transaction, "close_group", long_cycle)
        await run.submit(["job-1"], "job-1 dispatched after its long cycle")
        assert long, "no cycle was made long"
        assert run.recoveries("stalled") == 0


async def test_a_snapshot_slower_to_encode_than_the_bound_is_written(
    kafka_bootstrap: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Encoding is the core's time too (12.6 s at 10,000 nodes and 100,000 pending jobs).
    slow: list[int] = []
    monkeypatch.setattr(streams.snapshots, "encode_state", slowed(encode_state, slow))
    async with seeded(kafka_bootstrap, 60_000, ["job-1"]) as run:
        run.scheduler.snapshots.every_records = 1  # one due after every batch that journals
        await run.submit(["job-1"], "job-1 dispatched")

        async def written() -> bool:
            return bool(await read_snapshots(kafka_bootstrap, run.topics.snapshots, run.cluster))

        await wait_for(written, "a snapshot written")
        assert slow, "no snapshot was encoded slowly"
        assert run.recoveries("stalled") == 0
        assert run.monitor.registry.get_sample_value(SNAPSHOTS, {"outcome": "refused"}) is None
