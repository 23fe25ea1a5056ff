"""Topic administration: creating QuotaFlow's topics with their configuration, checking retention, listing partitions (I/O shell).

Split from streams/kafka_io.py along the admin seam; docs/kafka.md ("Topic configuration")
says why each topic is configured as it is.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from aiokafka import TopicPartition
from aiokafka.errors import TopicAuthorizationFailedError

from streams import topics as names
from streams.kafka_security import KafkaSecurity, security_options
from streams.topics import Topics

__all__ = [
    "TOPIC_CONFIGS",
    "TopicConfigError",
    "TopicSettings",
    "admin_client",
    "check_retention",
    "ensure_topics",
    "partitions_of",
    "retention_problems",
    "topic_configs",
]

_NOT_AUTHORIZED = 29  # TOPIC_AUTHORIZATION_FAILED


def admin_client(bootstrap: str, security: KafkaSecurity | None = None, **options: Any) -> Any:
    """An aiokafka admin client with the process's security settings."""
    from aiokafka.admin import AIOKafkaAdminClient

    return AIOKafkaAdminClient(bootstrap_servers=bootstrap, **security_options(security), **options)


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


async def topic_configs(
    bootstrap: str, topic_names: Iterable[str], wait_s: float = 0.0
) -> dict[str, dict[str, str]]:
    """The effective configuration of each existing topic (missing topics are left out).

    With ``wait_s``, asks again for up to that long while some are missing: on a cluster,
    the broker asked may not know a topic another broker has just created.
    """
    wanted = list(topic_names)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait_s
    while True:
        found = await _describe_configs(bootstrap, wanted)
        if len(found) == len(set(wanted)) or loop.time() >= deadline:
            return found
        await asyncio.sleep(0.5)


async def _describe_configs(bootstrap: str, wanted: list[str]) -> dict[str, dict[str, str]]:
    from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

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
    # The topics were just ensured: a broker that does not know them yet is asked again.
    found = await topic_configs(bootstrap, [topics.journal, topics.snapshots], wait_s=30)
    problems = retention_problems(found.get(topics.journal), found.get(topics.snapshots))
    if problems:
        raise TopicConfigError(
            f"refusing to run: Kafka may delete records the scheduler needs: "
            f"{'; '.join(problems)} (fix with kafka-configs.sh --alter --entity-type topics "
            f"--entity-name {topics.journal} --add-config "
            "cleanup.policy=delete,retention.ms=-1,retention.bytes=-1; see docs/kafka.md)"
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
