"""Kafka plumbing shared by the scheduler, the replay audit and tests: topic names, clients, JSON (I/O shell).

Every topic name can carry a prefix (``Topics.for_prefix("t1.")`` gives ``t1.quotaflow.jobs``
and so on), so several clusters or test runs can share one broker without seeing each
other's records. The prefix is plain concatenation: choose one that ends in a separator.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import orjson
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRecord, TopicPartition

from streams import topics as names

__all__ = [
    "Topics",
    "TopicsError",
    "create_topics",
    "dumps",
    "ensure_topics",
    "idempotent_producer",
    "loads",
    "now_ms",
    "read_committed_consumer",
    "read_to_end",
    "transactional_producer",
]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Topics:
    """The six QuotaFlow topic names under one prefix."""

    prefix: str = ""

    @classmethod
    def for_prefix(cls, prefix: str = "") -> Topics:
        return cls(prefix)

    def name(self, logical: str) -> str:
        """The real topic name for a contract name such as ``quotaflow.jobs``."""
        return f"{self.prefix}{logical}"

    def logical(self, actual: str) -> str:
        """The contract name for a real topic name (what the codec's topic rules are keyed by)."""
        if self.prefix and actual.startswith(self.prefix):
            return actual[len(self.prefix) :]
        return actual

    @property
    def jobs(self) -> str:
        return self.name(names.JOBS)

    @property
    def nodes(self) -> str:
        return self.name(names.NODES)

    @property
    def admin(self) -> str:
        return self.name(names.ADMIN)

    @property
    def journal(self) -> str:
        return self.name(names.JOURNAL)

    @property
    def commands(self) -> str:
        return self.name(names.COMMANDS)

    @property
    def rejected(self) -> str:
        return self.name(names.REJECTED)

    @property
    def ingress(self) -> tuple[str, ...]:
        return tuple(self.name(topic) for topic in names.INGRESS)

    @property
    def all(self) -> tuple[str, ...]:
        return tuple(self.name(topic) for topic in names.TOPICS)


def now_ms() -> int:
    """Wall-clock milliseconds since the Unix epoch: the only clock the scheduler reads."""
    return time.time_ns() // 1_000_000


def dumps(value: Any) -> bytes:
    return orjson.dumps(value)


def loads(raw: bytes | str) -> Any:
    return orjson.loads(raw)


async def ensure_topics(bootstrap: str, topics: Topics, partitions: int = 1) -> None:
    """Creates the prefixed QuotaFlow topics unless they exist (idempotent)."""
    await create_topics(bootstrap, dict.fromkeys(topics.all, partitions))


class TopicsError(RuntimeError):
    """Topics could not be created or got no leader in time."""


_NO_ERROR = 0
_TOPIC_ALREADY_EXISTS = 36


async def create_topics(
    bootstrap: str,
    topics: Mapping[str, int] | None = None,
    *,
    timeout_s: float = 30,
) -> None:
    """Create topics (name -> partitions, replication 1) unless they exist; wait for leaders.

    Defaults to every QuotaFlow topic (``streams.topics.TOPICS``) with one partition.
    """
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    wanted = dict(topics) if topics is not None else dict.fromkeys(names.TOPICS, 1)
    if not wanted:
        return
    deadline = time.monotonic() + timeout_s
    admin = AIOKafkaAdminClient(
        bootstrap_servers=bootstrap, request_timeout_ms=max(int(timeout_s * 1000), 1000)
    )
    await admin.start()
    try:
        response = await admin.create_topics(
            [NewTopic(name, partitions, 1) for name, partitions in wanted.items()]
        )
        # aiokafka reports per-topic errors in the response instead of raising them.
        failures = [
            f"{entry[0]}: error {entry[1]} {entry[2] if len(entry) > 2 else ''}".rstrip()
            for entry in response.topic_errors
            if entry[1] not in (_NO_ERROR, _TOPIC_ALREADY_EXISTS)
        ]
        if failures:
            raise TopicsError("could not create topics: " + "; ".join(failures))
        await _wait_for_leaders(admin, list(wanted), deadline)
    finally:
        await admin.close()


async def _wait_for_leaders(admin: Any, names: list[str], deadline: float) -> None:
    pending = names
    while True:
        described = await admin.describe_topics(names)
        pending = [
            topic["topic"]
            for topic in described
            if topic["error_code"] != _NO_ERROR
            or not topic["partitions"]
            or any(partition["leader"] < 0 for partition in topic["partitions"])
        ]
        if not pending and len(described) == len(names):
            return
        if time.monotonic() >= deadline:
            raise TopicsError(f"topics have no leader yet: {pending or names}")
        await asyncio.sleep(0.1)


def transactional_producer(bootstrap: str, transactional_id: str) -> AIOKafkaProducer:
    """A producer whose writes commit or vanish together; a newer one with the same id fences it."""
    return AIOKafkaProducer(
        bootstrap_servers=bootstrap,
        transactional_id=transactional_id,
        enable_idempotence=True,
        acks="all",
        linger_ms=5,
    )


def idempotent_producer(bootstrap: str) -> AIOKafkaProducer:
    """A plain producer for ingress writers (clients, agents, tests): no duplicates on retry."""
    return AIOKafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True, acks="all")


def read_committed_consumer(bootstrap: str, group_id: str | None = None) -> AIOKafkaConsumer:
    """A consumer that never sees aborted transactions and commits only when told to."""
    return AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=group_id,
        isolation_level="read_committed",
        enable_auto_commit=False,
        auto_offset_reset="earliest",
    )


async def partitions_of(bootstrap: str, topics: Iterable[str]) -> list[TopicPartition]:
    """Every partition of the topics, sorted; waits briefly for metadata of new topics."""
    from aiokafka.admin import AIOKafkaAdminClient

    wanted = list(topics)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 30
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        while True:
            described = await admin.describe_topics(wanted)
            found = {
                entry["topic"]: [p["partition"] for p in entry["partitions"]]
                for entry in described
                if entry["error_code"] == 0 and entry["partitions"]
            }
            missing = [topic for topic in wanted if topic not in found]
            if not missing:
                return sorted(
                    TopicPartition(topic, partition)
                    for topic in wanted
                    for partition in found[topic]
                )
            if loop.time() > deadline:
                raise RuntimeError(f"topics not found on the broker: {', '.join(missing)}")
            await asyncio.sleep(0.2)
    finally:
        await admin.close()


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
