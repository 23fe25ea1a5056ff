"""Integration tests of the local broker: topic creation and transactional visibility (real Kafka)."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient

from devtools.topics import create_topics
from streams.topics import INGRESS, TOPICS


class _AbortTransactionError(Exception):
    """Raised inside a transaction to make aiokafka abort it."""


def _unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


async def _read_values(
    bootstrap: str, topic: str, isolation_level: str, expected: int, timeout_s: float = 20
) -> list[bytes]:
    """Read partition 0 of ``topic`` from the beginning until ``expected`` values arrive."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        isolation_level=isolation_level,
        enable_auto_commit=False,
    )
    await consumer.start()
    try:
        partition = TopicPartition(topic, 0)
        consumer.assign([partition])
        await consumer.seek_to_beginning(partition)
        values: list[bytes] = []
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while len(values) < expected and loop.time() < deadline:
            batches = await consumer.getmany(partition, timeout_ms=500)
            values.extend(record.value for records in batches.values() for record in records)
        return values
    finally:
        await consumer.stop()


def _transactional_producer(bootstrap: str) -> AIOKafkaProducer:
    return AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id=_unique("test-tx"))


def test_topic_constants() -> None:
    assert set(INGRESS) <= set(TOPICS)
    assert len(set(TOPICS)) == len(TOPICS) == 8
    assert all(name.startswith("quotaflow.") for name in TOPICS)


@pytest.mark.kafka
async def test_create_topics_is_idempotent(kafka_bootstrap: str) -> None:
    await create_topics(kafka_bootstrap, dict.fromkeys(TOPICS, 1))
    await create_topics(
        kafka_bootstrap, dict.fromkeys(TOPICS, 1)
    )  # TopicAlreadyExists is not an error

    admin = AIOKafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    await admin.start()
    try:
        described = await admin.describe_topics(list(TOPICS))
    finally:
        await admin.close()
    assert {topic["topic"] for topic in described} == set(TOPICS)
    assert all(topic["error_code"] == 0 for topic in described)
    assert all(len(topic["partitions"]) == 1 for topic in described)


@pytest.mark.kafka
async def test_committed_transaction_is_read_committed(kafka_bootstrap: str) -> None:
    topic = _unique("test.committed")
    await create_topics(kafka_bootstrap, {topic: 1})
    producer = _transactional_producer(kafka_bootstrap)
    await producer.start()  # init_transactions: hangs on one broker without RF-1 txn log settings
    try:
        async with producer.transaction():
            await producer.send(topic, key=b"job-1", value=b"submitted")
            await producer.send(topic, key=b"job-1", value=b"admitted")
    finally:
        await producer.stop()

    values = await _read_values(kafka_bootstrap, topic, "read_committed", expected=2)
    assert values == [b"submitted", b"admitted"]


@pytest.mark.kafka
async def test_aborted_transaction_is_invisible_to_read_committed(kafka_bootstrap: str) -> None:
    topic = _unique("test.aborted")
    await create_topics(kafka_bootstrap, {topic: 1})
    producer = _transactional_producer(kafka_bootstrap)
    await producer.start()
    try:
        with pytest.raises(_AbortTransactionError):
            async with producer.transaction():
                await producer.send_and_wait(topic, b"aborted")  # really written to the log
                raise _AbortTransactionError
        async with producer.transaction():
            await producer.send(topic, b"committed")
    finally:
        await producer.stop()

    committed = await _read_values(kafka_bootstrap, topic, "read_committed", expected=1)
    assert committed == [b"committed"]
    uncommitted = await _read_values(kafka_bootstrap, topic, "read_uncommitted", expected=2)
    assert uncommitted == [b"aborted", b"committed"]
