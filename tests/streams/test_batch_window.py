"""The scheduler's batch window against a real broker: under load, inputs share one transaction."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable

import orjson

from domain.events import JobSubmitted, JournalRecord
from streams.kafka_io import idempotent_producer
from streams.sequencer import Scheduler
from tests.streams.test_sequencer import (
    WAIT_S,
    job,
    journal_of,
    make_topics,
    produce,
    running_scheduler,
    seed_cluster,
    wait_journaled,
)


async def submitted_stamps(bootstrap: str, window_ms: int) -> dict[str, int]:
    """Submits job-1, then (once it is journaled) job-2 and, 300 ms later, job-3; returns
    each job's journal ts."""
    topics = await make_topics(bootstrap)
    cluster = "c-" + uuid.uuid4().hex[:6]
    scheduler = Scheduler(bootstrap, cluster, topics.prefix, batch_window_ms=window_ms)
    stop = asyncio.Event()
    task = asyncio.create_task(scheduler.run(stop))
    producer = idempotent_producer(bootstrap)
    await producer.start()
    try:
        await seed_cluster(bootstrap, topics, cluster)

        def journaled(job_id: str) -> Callable[[JournalRecord], bool]:
            return lambda r: isinstance(r.event, JobSubmitted) and r.event.job == job_id

        await producer.send_and_wait(topics.jobs, orjson.dumps(job("job-1")), key=b"job-1")
        await wait_journaled(bootstrap, topics, cluster, journaled("job-1"))
        await producer.send_and_wait(topics.jobs, orjson.dumps(job("job-2")), key=b"job-2")
        await asyncio.sleep(0.3)
        await producer.send_and_wait(topics.jobs, orjson.dumps(job("job-3")), key=b"job-3")
        await wait_journaled(bootstrap, topics, cluster, journaled("job-3"))
    finally:
        await producer.stop()
        stop.set()
        await asyncio.wait_for(task, WAIT_S)
    journal = await journal_of(bootstrap, topics, cluster)
    return {r.event.job: r.ts for r in journal if isinstance(r.event, JobSubmitted)}


async def test_inputs_arriving_within_the_window_share_one_transaction(
    kafka_bootstrap: str,
) -> None:
    # job-1's transaction opened the window; job-2 and job-3 arrive inside it.
    stamps = await submitted_stamps(kafka_bootstrap, window_ms=5000)
    assert stamps["job-2"] == stamps["job-3"] > stamps["job-1"]


async def test_without_a_window_each_arrival_has_its_own_transaction(
    kafka_bootstrap: str,
) -> None:
    stamps = await submitted_stamps(kafka_bootstrap, window_ms=0)
    assert stamps["job-1"] < stamps["job-2"] < stamps["job-3"]


async def test_a_scheduler_asked_to_stop_while_waiting_for_input_stops_within_a_slice(
    kafka_bootstrap: str,
) -> None:
    # With tick_ms at its largest and no timer due, the scheduler's wait for input lasts a
    # minute; asked to stop in it (SIGTERM), it stops within a slice of that wait.
    topics = await make_topics(kafka_bootstrap)
    cluster = "c-" + uuid.uuid4().hex[:6]
    config = {"type": "ClusterConfigured", "tick_ms": 60_000, "heartbeat_timeout_s": 3600}
    async with running_scheduler(kafka_bootstrap, topics, cluster):
        await produce(kafka_bootstrap, topics.admin, [config])
        await wait_journaled(
            kafka_bootstrap, topics, cluster, lambda r: r.event.type == "ClusterConfigured"
        )
        await asyncio.sleep(1)  # the scheduler is back in its wait for input
        began = time.monotonic()
    assert time.monotonic() - began < 20, "the stop waited for the end of tick_ms"
