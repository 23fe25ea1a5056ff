"""Liveness on the compacted `quotaflow.status` topic: the scheduler and the projections publish, `read_status` reads (I/O shell).

Why a topic and not only an HTTP endpoint: whoever can reach Kafka can read it (the CLI only
knows the bootstrap address, never the scheduler's host), a scheduler that died leaves its
last word there with its time, and compaction keeps one record per component. The record is
a JSON object (see `Liveness.as_dict` and the projections' `liveness`), keyed by
`scheduler/<cluster>` or `projections/<host:port>`; `published_s` is the publisher's wall
clock. `verdict` turns a record into up / stale / stopped for the CLI (docs/operations.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import orjson
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import TopicAlreadyExistsError

from streams.kafka_io import security_options
from streams.metrics import SchedulerMonitor, serving, sleep_or_stop

STATUS = "quotaflow.status"
PUBLISH_S = 2.0  # how often a component publishes its liveness
STALE_AFTER_S = 15.0  # a record older than this means its publisher is down or stuck

log = logging.getLogger(__name__)


def status_topic(topic_prefix: str = "") -> str:
    return f"{topic_prefix}{STATUS}"


async def ensure_status_topic(bootstrap: str, topic: str, replication_factor: int = 1) -> None:
    """Creates the compacted status topic if it is missing (one partition: a handful of keys)."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, **security_options())
    await admin.start()
    try:
        with contextlib.suppress(TopicAlreadyExistsError):
            result = await admin.create_topics(
                [
                    NewTopic(
                        topic,
                        num_partitions=1,
                        replication_factor=replication_factor,
                        topic_configs={"cleanup.policy": "compact", "segment.ms": "600000"},
                    )
                ]
            )
            # aiokafka reports per-topic errors in the response instead of raising.
            for entry in getattr(result, "topic_errors", []) or []:
                code = entry[1]
                if code not in (0, 36):  # 36: the topic already exists
                    raise RuntimeError(f"cannot create {topic}: error code {code}")
        # Wait until the broker describes it, so the first send finds its leader at once.
        for _ in range(100):
            described = await admin.describe_topics([topic])
            if described and described[0]["error_code"] == 0 and described[0]["partitions"]:
                return
            await asyncio.sleep(0.2)
    finally:
        await admin.close()


async def publish_status(
    bootstrap: str,
    topic: str,
    key: str,
    liveness: Callable[[], dict[str, Any]],
    stop: asyncio.Event,
    interval_s: float = PUBLISH_S,
    replication_factor: int = 1,
    when: Callable[[], bool] | None = None,
) -> None:
    """Publishes `liveness()` every `interval_s` until `stop`, and once more when stopping.

    With `when`, only while it holds, plus once when it stops holding (a standby scheduler
    publishes only while active, so it never overwrites the active instance's record).
    """
    try:
        await ensure_status_topic(bootstrap, topic, replication_factor)
    except Exception as exc:
        log.warning("no liveness on %s: %r", topic, exc)
        return
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=0, **security_options())
    await producer.start()
    held = False
    try:
        while True:
            stopping = stop.is_set()
            holds = True if when is None else when()
            if holds or held:
                body = liveness() | {"published_s": time.time()}
                try:
                    await producer.send_and_wait(topic, orjson.dumps(body), key=key.encode())
                except Exception as exc:  # the broker is away: liveness is best effort
                    log.debug("liveness not published: %r", exc)
            held = holds
            if stopping:
                return
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), interval_s)
    finally:
        with contextlib.suppress(Exception):
            await producer.stop()


async def read_status(
    bootstrap: str, topic_prefix: str = "", timeout_s: float = 10.0
) -> dict[str, dict[str, Any]]:
    """The newest liveness record per key (`scheduler/<cluster>`, `projections/<addr>`).

    Empty when the topic does not exist yet (no scheduler ever ran with liveness).
    """
    topic = status_topic(topic_prefix)
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, enable_auto_commit=False, **security_options()
    )
    await consumer.start()
    try:
        partitions = consumer.partitions_for_topic(topic)
        if partitions is None:
            await consumer._client.force_metadata_update()
            partitions = consumer.partitions_for_topic(topic)
        if not partitions:
            return {}
        tps = [TopicPartition(topic, p) for p in sorted(partitions)]
        consumer.assign(tps)
        ends = await consumer.end_offsets(tps)
        await consumer.seek_to_beginning(*tps)
        out: dict[str, dict[str, Any]] = {}
        remaining = {tp for tp in tps if ends[tp] > 0}
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while remaining and loop.time() < deadline:
            batch = await consumer.getmany(timeout_ms=500)
            for tp, records in batch.items():
                for record in records:
                    if record.key is not None:
                        if record.value is None:
                            out.pop(record.key.decode(), None)
                        else:
                            with contextlib.suppress(orjson.JSONDecodeError):
                                out[record.key.decode()] = orjson.loads(record.value)
                    if record.offset + 1 >= ends[tp]:
                        remaining.discard(tp)
        return dict(sorted(out.items()))
    finally:
        await consumer.stop()


def verdict(record: dict[str, Any], now_s: float, stale_after_s: float = STALE_AFTER_S) -> str:
    """`up`, `stale` (no word for stale_after_s: down or stuck) or `stopped` (said so)."""
    published = record.get("published_s")
    if not isinstance(published, int | float) or now_s - published > stale_after_s:
        return "stale"
    if record.get("active") is False:
        return "stopped"
    return "up"


class Runnable(Protocol):
    """What `observed` runs: streams.sequencer.Scheduler (not imported: no cycle)."""

    bootstrap: str
    cluster: str

    @property
    def topics(self) -> Any: ...

    async def run(self, stop: asyncio.Event | None = None) -> None: ...


async def observed(
    scheduler: Runnable,
    monitor: SchedulerMonitor,
    stop: asyncio.Event,
    *,
    metrics: tuple[str, int | None] = ("127.0.0.1", None),
    liveness: bool = True,
    replication_factor: int = 1,
) -> None:
    """Runs the scheduler with /metrics and /health on `metrics` (host, port; None: off) and
    its liveness on quotaflow.status; a last record says `active: false` when it stops."""
    await observing(
        scheduler.bootstrap,
        scheduler.topics,
        scheduler.cluster,
        monitor,
        scheduler.run,
        stop,
        metrics=metrics,
        liveness=liveness,
        replication_factor=replication_factor,
    )


async def observing(
    bootstrap: str,
    topics: Any,
    cluster: str,
    monitor: SchedulerMonitor,
    run: Callable[[asyncio.Event], Awaitable[None]],
    stop: asyncio.Event,
    *,
    metrics: tuple[str, int | None] = ("127.0.0.1", None),
    liveness: bool = True,
    replication_factor: int = 1,
    standby: bool = False,
) -> None:
    """`observed` for any run of a cluster's scheduler; with `standby` (leader election:
    streams/leadership.py) liveness is published only while this instance is active."""
    quiet = asyncio.Event()  # stops the publisher once the scheduler stopped

    async def refresh_lag() -> None:  # the lag is read from the consumer, in its loop
        while not quiet.is_set():
            await monitor.refresh_lag()
            if await sleep_or_stop(quiet, PUBLISH_S / 2):
                return

    host, port = metrics
    async with serving(host, port, monitor.registry, monitor.health, monitor.refresh_lag):
        tasks = []
        if liveness:
            topic = topics.name(STATUS)
            key = f"scheduler/{cluster}"
            tasks = [
                asyncio.create_task(refresh_lag()),
                asyncio.create_task(
                    publish_status(
                        bootstrap,
                        topic,
                        key,
                        monitor.health,
                        quiet,
                        replication_factor=replication_factor,
                        when=(lambda: monitor.liveness.active) if standby else None,
                    )
                ),
            ]
        try:
            await run(stop)
        finally:
            monitor.liveness.active = False
            quiet.set()
            if tasks:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 10)
