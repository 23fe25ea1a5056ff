"""Plain topics on the local broker, for tests of the broker itself (developer tool, I/O).

QuotaFlow's own topics, with their configuration, are created by
``streams.kafka_io.ensure_topics`` (``quotaflow kafka topics``); this creates bare topics
(name -> partitions, replication 1, the broker's defaults) and waits for their leaders.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from typing import Any

from devtools.kafka_home import BrokerError

_NO_ERROR = 0
_TOPIC_ALREADY_EXISTS = 36


async def create_topics(
    bootstrap: str,
    topics: Mapping[str, int],
    *,
    timeout_s: float = 30,
) -> None:
    """Create topics (name -> partitions, replication 1) unless they exist; wait for leaders."""
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    wanted = dict(topics)
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
            raise BrokerError("could not create topics: " + "; ".join(failures))
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
            raise BrokerError(f"topics have no leader yet: {pending or names}")
        await asyncio.sleep(0.1)
