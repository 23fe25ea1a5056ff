"""Kafka plumbing shared by the scheduler, the replay audit and tests: clients, their settings, JSON, reading to the end (I/O shell).

Every topic name can carry a prefix (``Topics.for_prefix("t1.")`` gives ``t1.quotaflow.jobs``
and so on), so several clusters or test runs can share one broker without seeing each
other's records. The prefix is plain concatenation: choose one that ends in a separator.
Topic names live in streams/topics.py and topic administration in streams/topic_admin.py;
both are re-exported here, where most callers look for them.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Iterable, Mapping
from typing import Any

import orjson
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRecord, TopicPartition

from streams.kafka_security import (
    SECURITY_ENV,
    KafkaSecurity,
    current_security,
    security_options,
    use_security,
)
from streams.topic_admin import (
    TOPIC_CONFIGS,
    TopicConfigError,
    TopicSettings,
    admin_client,
    check_retention,
    ensure_topics,
    partitions_of,
    retention_problems,
    topic_configs,
)
from streams.topics import Topics

__all__ = [
    "SECURITY_ENV",
    "TOPIC_CONFIGS",
    "KafkaSecurity",
    "TopicConfigError",
    "TopicSettings",
    "Topics",
    "admin_client",
    "check_retention",
    "current_security",
    "dumps",
    "ensure_topics",
    "idempotent_producer",
    "loads",
    "now_ms",
    "partitions_of",
    "read_committed_consumer",
    "read_to_end",
    "retention_problems",
    "security_options",
    "topic_configs",
    "transactional_producer",
    "use_security",
]

log = logging.getLogger(__name__)


def now_ms() -> int:
    """Wall-clock milliseconds since the Unix epoch: the only clock the scheduler reads."""
    return time.time_ns() // 1_000_000


def dumps(value: Any) -> bytes:
    return orjson.dumps(value)


def loads(raw: bytes | str) -> Any:
    return orjson.loads(raw)


# Chosen for latency and throughput; measurements in docs/kafka.md (Scheduler settings).
# Every send of a transaction is awaited before it commits, so lingering only delays the
# commit: the batch is as large as what one transaction writes, up to PRODUCER_BATCH_BYTES.
PRODUCER_LINGER_MS = int(os.environ.get("QUOTAFLOW_PRODUCER_LINGER_MS", "0"))
PRODUCER_BATCH_BYTES = int(os.environ.get("QUOTAFLOW_PRODUCER_BATCH_BYTES", str(256 * 1024)))
# The scheduler's fetch long-poll: the broker answers a fetch after this long even with no
# data, so it bounds how long a new input waits when the consumer is idle (aiokafka: 500).
# Each fetch costs aiokafka's Python protocol code: 30 rather than 10 took the idle
# scheduler from about 6.5% to 3% of a core and CPU per input at 500 jobs/s from about 96
# to 78 µs, for about 10 ms more at the p50 (docs/kafka.md, "Fetch wait").
SCHEDULER_FETCH_WAIT_MS = int(os.environ.get("QUOTAFLOW_FETCH_WAIT_MS", "30"))
# ... and the broker answers sooner only once this much data is there: with 1 byte (Kafka's
# default) every heartbeat that arrives ends a fetch, so an idle cluster of 1,000 nodes cost
# 200 fetches a second; with more, at most one fetch per SCHEDULER_FETCH_WAIT_MS.
SCHEDULER_FETCH_MIN_BYTES = int(os.environ.get("QUOTAFLOW_FETCH_MIN_BYTES", str(64 * 1024)))
# Under load a transaction begins no sooner than this long after the previous one that wrote
# began: the inputs arriving meanwhile share its fixed cost (its requests, 2-3 ms of CPU). A
# scheduler that wrote nothing for longer answers a new input at once. Shorter than the
# fetch wait, so each fetch's inputs go as it returns (the fetches already gather them); it
# paces transactions only when fetches come back sooner, at high rates. docs/kafka.md,
# "Batch window".
SCHEDULER_BATCH_WINDOW_MS = int(os.environ.get("QUOTAFLOW_BATCH_WINDOW_MS", "25"))
# Broker failures (docs/kafka.md, "Failover"): producers wait for every in-sync replica and
# are idempotent; a send retries through a leader election until REQUEST_TIMEOUT_MS, then the
# scheduler aborts the batch and rebuilds from the journal. A dead scheduler's open
# transaction is aborted after TRANSACTION_TIMEOUT_MS, or when its successor starts.
REQUEST_TIMEOUT_MS = 30_000
RETRY_BACKOFF_MS = 200
# The transactional producer retries sooner: a transaction that starts while the broker still
# writes the previous one's commit markers is answered CONCURRENT_TRANSACTIONS (KAFKA-5477),
# and aiokafka retries AddOffsetsToTxn after retry_backoff_ms; at 200 ms that wait was most
# of the p99 submit -> Dispatch (docs/kafka.md, Scheduler settings).
TRANSACTION_RETRY_BACKOFF_MS = int(os.environ.get("QUOTAFLOW_TRANSACTION_RETRY_BACKOFF_MS", "10"))
TRANSACTION_TIMEOUT_MS = 60_000


def transactional_producer(
    bootstrap: str, transactional_id: str, security: KafkaSecurity | None = None
) -> AIOKafkaProducer:
    """A producer whose writes commit or vanish together; a newer one with the same id fences it."""
    return AIOKafkaProducer(
        bootstrap_servers=bootstrap,
        **security_options(security),
        transactional_id=transactional_id,
        enable_idempotence=True,
        acks="all",
        linger_ms=PRODUCER_LINGER_MS,
        max_batch_size=PRODUCER_BATCH_BYTES,
        request_timeout_ms=REQUEST_TIMEOUT_MS,
        retry_backoff_ms=TRANSACTION_RETRY_BACKOFF_MS,
        transaction_timeout_ms=TRANSACTION_TIMEOUT_MS,
    )


def idempotent_producer(
    bootstrap: str, security: KafkaSecurity | None = None, **options: Any
) -> AIOKafkaProducer:
    """A plain producer for ingress writers (clients, agents, tests): no duplicates on retry."""
    return AIOKafkaProducer(
        bootstrap_servers=bootstrap,
        enable_idempotence=True,
        acks="all",
        **security_options(security),
        **{
            "request_timeout_ms": REQUEST_TIMEOUT_MS,
            "retry_backoff_ms": RETRY_BACKOFF_MS,
            **options,
        },
    )


def read_committed_consumer(
    bootstrap: str,
    group_id: str | None = None,
    security: KafkaSecurity | None = None,
    *,
    fetch_max_wait_ms: int = 500,
    fetch_min_bytes: int = 1,
) -> AIOKafkaConsumer:
    """A consumer that never sees aborted transactions and commits only when told to
    (after a broker failure it finds the new leader and reconnects by itself)."""
    return AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        **security_options(security),
        group_id=group_id,
        isolation_level="read_committed",
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        fetch_max_wait_ms=fetch_max_wait_ms,
        fetch_min_bytes=fetch_min_bytes,
        request_timeout_ms=REQUEST_TIMEOUT_MS + 10_000,  # above the brokers' fetch wait
        retry_backoff_ms=RETRY_BACKOFF_MS,
    )


async def read_to_end(
    bootstrap: str,
    topics: str | Iterable[str],
    *,
    timeout_s: float = 60,
) -> dict[str, list[ConsumerRecord[bytes, bytes]]]:
    """Every committed record of the topics, from offset 0 to the end seen when reading starts.

    The end of each partition is its last stable offset (read_committed), so a transaction
    still open is neither read nor waited for. Records come back per topic, in partition
    then offset order. Topics are ended in the order given: read the journal before the
    commands and the commands cover at least every journal record read.
    """
    wanted = [topics] if isinstance(topics, str) else list(topics)
    consumer = read_committed_consumer(bootstrap)
    await consumer.start()
    try:
        partitions = await partitions_of(bootstrap, wanted)
        consumer.assign(partitions)
        ends: dict[TopicPartition, int] = {}
        for topic in wanted:
            topic_parts = [tp for tp in partitions if tp.topic == topic]
            ends.update(await consumer.end_offsets(topic_parts))
        await consumer.seek_to_beginning(*partitions)
        out: dict[str, list[ConsumerRecord[bytes, bytes]]] = {topic: [] for topic in wanted}
        by_partition: dict[TopicPartition, list[ConsumerRecord[bytes, bytes]]] = {
            tp: [] for tp in partitions
        }
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        remaining = {tp for tp in partitions if ends[tp] > 0}
        while remaining:
            if loop.time() > deadline:
                positions = {str(tp): await consumer.position(tp) for tp in remaining}
                raise TimeoutError(f"could not read to the end: positions {positions}, ends {ends}")
            batch = await consumer.getmany(*remaining, timeout_ms=200)
            for tp, records in batch.items():
                by_partition[tp].extend(r for r in records if r.offset < ends[tp])
            for tp in list(remaining):
                # Position passes control markers too, so it reaches the end offset exactly.
                if await consumer.position(tp) >= ends[tp]:
                    remaining.discard(tp)
        for tp in partitions:
            out[tp.topic].extend(by_partition[tp])
        return out
    finally:
        await consumer.stop()


def committed_offsets(
    records: Mapping[TopicPartition, list[ConsumerRecord[bytes, bytes]]],
) -> dict[TopicPartition, int]:
    """The offsets to commit after these records: one past the last of each partition."""
    return {tp: recs[-1].offset + 1 for tp, recs in records.items() if recs}
