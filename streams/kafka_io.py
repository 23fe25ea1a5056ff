"""Kafka plumbing shared by the scheduler, the replay audit and tests: topic names, clients, JSON (I/O shell).

Every topic name can carry a prefix (``Topics.for_prefix("t1.")`` gives ``t1.quotaflow.jobs``
and so on), so several clusters or test runs can share one broker without seeing each
other's records. The prefix is plain concatenation: choose one that ends in a separator.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import orjson
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRecord, TopicPartition
from aiokafka.errors import TopicAuthorizationFailedError

from streams import topics as names
from streams.kafka_security import (
    SECURITY_ENV,
    KafkaSecurity,
    current_security,
    security_options,
    use_security,
)

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
    "read_committed_consumer",
    "read_to_end",
    "security_options",
    "transactional_producer",
    "use_security",
]

log = logging.getLogger(__name__)
_NOT_AUTHORIZED = 29  # TOPIC_AUTHORIZATION_FAILED


@dataclass(frozen=True, slots=True)
class Topics:
    """The QuotaFlow topic names under one prefix."""

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

    def team_jobs(self, team: str) -> str:
        """A team's own job topic, ``quotaflow.jobs.<team>`` (docs/kafka.md, per-team topics)."""
        return f"{self.jobs}.{team}"

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
    def snapshots(self) -> str:
        return self.name(names.SNAPSHOTS)

    @property
    def ingress(self) -> tuple[str, ...]:
        return tuple(self.name(topic) for topic in names.INGRESS)

    @property
    def all(self) -> tuple[str, ...]:
        return tuple(self.name(topic) for topic in names.TOPICS)


def admin_client(bootstrap: str, security: KafkaSecurity | None = None, **options: Any) -> Any:
    """An aiokafka admin client with the process's security settings."""
    from aiokafka.admin import AIOKafkaAdminClient

    return AIOKafkaAdminClient(bootstrap_servers=bootstrap, **security_options(security), **options)


def now_ms() -> int:
    """Wall-clock milliseconds since the Unix epoch: the only clock the scheduler reads."""
    return time.time_ns() // 1_000_000


def dumps(value: Any) -> bytes:
    return orjson.dumps(value)


def loads(raw: bytes | str) -> Any:
    return orjson.loads(raw)


# -- topic configuration (docs/kafka.md, "Topic configuration") -------------------------------

DAY_MS = 24 * 3600 * 1000
UNLIMITED = {"retention.ms": "-1", "retention.bytes": "-1"}
# Per contract topic: what Kafka may delete. The journal is the source of truth and the
# audit compares the commands it explains, so neither may lose a record; the newest snapshot
# per key must stay; ingress is needed only until the scheduler has sequenced it, and
# rejections only until someone has looked.
TOPIC_CONFIGS: dict[str, dict[str, str]] = {
    names.JOBS: {"cleanup.policy": "delete", "retention.ms": str(7 * DAY_MS)},
    names.NODES: {"cleanup.policy": "delete", "retention.ms": str(7 * DAY_MS)},
    names.ADMIN: {"cleanup.policy": "delete", "retention.ms": str(7 * DAY_MS)},
    names.JOURNAL: {"cleanup.policy": "delete", **UNLIMITED},
    names.COMMANDS: {"cleanup.policy": "delete", **UNLIMITED},
    names.REJECTED: {"cleanup.policy": "delete", "retention.ms": str(30 * DAY_MS)},
    names.SNAPSHOTS: {"cleanup.policy": "compact", **UNLIMITED},
    # Jobs' output: for people, bounded by age and by size (per partition); the node keeps files.
    names.LOGS: {
        "cleanup.policy": "delete",
        "retention.ms": str(7 * DAY_MS),
        "retention.bytes": str(1 << 30),
    },
}


@dataclass(frozen=True, slots=True)
class TopicSettings:
    """How topics are created: 1 and 1 for a local single broker; 3 and 2 in production."""

    replication_factor: int = 1
    min_insync_replicas: int = 1
    command_partitions: int = 1  # agents read only the partition their node id hashes to

    def partitions(self, logical: str) -> int:
        return self.command_partitions if logical == names.COMMANDS else 1

    def config(self, logical: str) -> dict[str, str]:
        return {**TOPIC_CONFIGS[logical], "min.insync.replicas": str(self.min_insync_replicas)}


async def ensure_topics(
    bootstrap: str,
    topics: Topics,
    settings: TopicSettings | None = None,
    teams: Iterable[str] = (),
) -> None:
    """Creates the prefixed QuotaFlow topics, with their configuration, unless they exist
    (idempotent: an existing topic is left as it is; the scheduler checks what it needs).
    ``teams`` adds each team's job topic, configured as ``quotaflow.jobs``."""
    from aiokafka.admin import NewTopic

    settings = settings or TopicSettings()
    wanted = [
        NewTopic(
            topics.name(logical),
            settings.partitions(logical),
            settings.replication_factor,
            topic_configs=settings.config(logical),
        )
        for logical in names.TOPICS
    ] + [
        NewTopic(
            topics.team_jobs(team),
            1,
            settings.replication_factor,
            topic_configs=settings.config(names.JOBS),
        )
        for team in sorted(set(teams))
    ]
    admin = admin_client(bootstrap, request_timeout_ms=30_000)
    await admin.start()
    try:
        response = await admin.create_topics(wanted)
        # aiokafka reports per-topic errors in the response instead of raising them.
        failures = [
            f"{entry[0]}: error {entry[1]} {entry[2] if len(entry) > 2 else ''}".rstrip()
            for entry in response.topic_errors
            if entry[1] not in (0, 36)  # no error, TOPIC_ALREADY_EXISTS
        ]
        refused = sorted(entry[0] for entry in response.topic_errors if entry[1] == _NOT_AUTHORIZED)
        if refused:
            raise TopicAuthorizationFailedError(", ".join(refused))
        if failures:
            raise RuntimeError("could not create topics: " + "; ".join(failures))
    finally:
        await admin.close()
    await partitions_of(bootstrap, [topic.name for topic in wanted])  # waits for metadata


class TopicConfigError(RuntimeError):
    """A topic is configured so that Kafka may delete records the scheduler still needs."""


async def topic_configs(bootstrap: str, topic_names: Iterable[str]) -> dict[str, dict[str, str]]:
    """The effective configuration of each existing topic (missing topics are left out)."""
    from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

    wanted = list(topic_names)
    admin = admin_client(bootstrap)
    await admin.start()
    try:
        responses = await admin.describe_configs(
            [ConfigResource(ConfigResourceType.TOPIC, name) for name in wanted]
        )
    finally:
        await admin.close()
    found: dict[str, dict[str, str]] = {}
    for response in responses:
        for error_code, _message, _type, name, entries in response.resources:
            if error_code == 0:
                found[name] = {entry[0]: entry[1] for entry in entries}
    return found


def retention_problems(
    journal: dict[str, str] | None, snapshots: dict[str, str] | None
) -> list[str]:
    """What lets Kafka delete records the scheduler needs, one phrase each (empty: none)."""
    problems = []
    if journal is None:
        problems.append("the journal topic does not exist")
    else:
        if journal.get("cleanup.policy") != "delete":
            problems.append(
                f"journal cleanup.policy is {journal.get('cleanup.policy')} (compaction would "
                "keep only the last record per cluster id); it must be delete"
            )
        for key in ("retention.ms", "retention.bytes"):
            if journal.get(key) != "-1":
                problems.append(f"journal {key} is {journal.get(key)}; it must be -1")
    if snapshots is not None and snapshots.get("cleanup.policy") != "compact":
        problems.append(
            f"snapshots cleanup.policy is {snapshots.get('cleanup.policy')}; it must be compact"
        )
    return problems


async def check_retention(bootstrap: str, topics: Topics) -> None:
    """Raises TopicConfigError (one line, with the fix) if Kafka may delete journal records."""
    found = await topic_configs(bootstrap, [topics.journal, topics.snapshots])
    problems = retention_problems(found.get(topics.journal), found.get(topics.snapshots))
    if problems:
        raise TopicConfigError(
            f"refusing to run: Kafka may delete records the scheduler needs: "
            f"{'; '.join(problems)} (fix with kafka-configs.sh --alter --entity-type topics "
            f"--entity-name {topics.journal} --add-config "
            "cleanup.policy=delete,retention.ms=-1,retention.bytes=-1; see docs/kafka.md)"
        )


# Chosen for latency and throughput; measurements in docs/kafka.md (Scheduler settings).
# Every send of a transaction is awaited before it commits, so lingering only delays the
# commit: the batch is as large as what one transaction writes, up to PRODUCER_BATCH_BYTES.
PRODUCER_LINGER_MS = int(os.environ.get("QUOTAFLOW_PRODUCER_LINGER_MS", "0"))
PRODUCER_BATCH_BYTES = int(os.environ.get("QUOTAFLOW_PRODUCER_BATCH_BYTES", str(256 * 1024)))
# The scheduler's fetch long-poll: the broker answers a fetch after this long even with no
# data, so it bounds how long a new input waits when the consumer is idle (aiokafka: 500).
SCHEDULER_FETCH_WAIT_MS = int(os.environ.get("QUOTAFLOW_FETCH_WAIT_MS", "10"))
# Broker failures (docs/kafka.md, "Failover"): producers wait for every in-sync replica and
# are idempotent; a send retries through a leader election until REQUEST_TIMEOUT_MS, then the
# scheduler aborts the batch and rebuilds from the journal. A dead scheduler's open
# transaction is aborted after TRANSACTION_TIMEOUT_MS, or when its successor starts.
REQUEST_TIMEOUT_MS = 30_000
RETRY_BACKOFF_MS = 200
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
        retry_backoff_ms=RETRY_BACKOFF_MS,
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
        request_timeout_ms=REQUEST_TIMEOUT_MS + 10_000,  # above the brokers' fetch wait
        retry_backoff_ms=RETRY_BACKOFF_MS,
    )


async def partitions_of(bootstrap: str, topics: Iterable[str]) -> list[TopicPartition]:
    """Every partition of the topics, sorted; waits briefly for metadata of new topics."""
    wanted = list(topics)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 30
    admin = admin_client(bootstrap)
    await admin.start()
    try:
        while True:
            described = await admin.describe_topics(wanted)
            found = {
                entry["topic"]: [p["partition"] for p in entry["partitions"]]
                for entry in described
                if entry["error_code"] == 0 and entry["partitions"]
            }
            refused = [e["topic"] for e in described if e["error_code"] == _NOT_AUTHORIZED]
            if refused:
                raise TopicAuthorizationFailedError(", ".join(sorted(refused)))
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
