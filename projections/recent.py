"""Recent preemptions (from the job timelines) and recent rejections (from quotaflow.rejected), newest first (pure, but for the reader at the end).

The dashboard's two "what just happened" tables. Rejections are not in the journal, so the
process keeps the newest `KEEP` it read in memory (never in a checkpoint: on a restart it
reads the topic's tail again).
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from typing import Any

import orjson
from aiokafka import AIOKafkaConsumer, TopicPartition

from projections.timelines import Timelines

KEEP = 200

log = logging.getLogger(__name__)


def recent_preemptions(timelines: Timelines, limit: int = 50) -> list[dict[str, Any]]:
    """The newest Preempt commands: job, node, reason, by whom, when."""
    found: list[dict[str, Any]] = []
    for job_id in sorted(timelines):
        for entry in timelines[job_id]:
            if entry.get("event") == "preempted":
                found.append(
                    {
                        "job": job_id,
                        "ts": entry["ts"],
                        "seq": entry["seq"],
                        "node": entry.get("node"),
                        "reason": entry.get("reason"),
                        "by": entry.get("by"),
                        "tasks": entry.get("tasks"),
                    }
                )
    found.sort(key=lambda e: (e["seq"], e["job"], e["node"] or ""), reverse=True)
    return found[:limit]


class Rejections:
    """The newest rejections read from quotaflow.rejected."""

    def __init__(self, keep: int = KEEP) -> None:
        self.keep = keep
        self.items: deque[dict[str, Any]] = deque(maxlen=keep)
        self.read = 0
        self.unreadable = 0

    def add(self, offset: int, value: bytes | None) -> None:
        self.read += 1
        try:
            wire = orjson.loads(value or b"")
        except orjson.JSONDecodeError:
            self.unreadable += 1
            return
        if not isinstance(wire, dict):
            self.unreadable += 1
            return
        self.items.append(
            {
                "ts": wire.get("ts"),
                "reason": wire.get("reason"),
                "input": str(wire.get("input", ""))[:300],
                "topic": wire.get("topic"),
                "offset": offset,
            }
        )

    def newest(self, limit: int = 50) -> list[dict[str, Any]]:
        return list(reversed(self.items))[:limit]


async def follow_rejections(
    bootstrap: str,
    topic: str,
    rejections: Rejections,
    stopping: asyncio.Event,
    kafka_options: dict[str, Any] | None = None,
) -> None:
    """Keeps the newest rejections: reads the topic's last KEEP records, then follows it."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=None,
        isolation_level="read_committed",
        enable_auto_commit=False,
        **(kafka_options or {}),
    )
    await consumer.start()
    try:
        while not stopping.is_set() and not consumer.partitions_for_topic(topic):
            await consumer._client.force_metadata_update()
            if not consumer.partitions_for_topic(topic):
                await asyncio.sleep(2)
        partitions = [
            TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or ())
        ]
        consumer.assign(partitions)
        ends = await consumer.end_offsets(partitions)
        for tp in partitions:
            consumer.seek(tp, max(0, ends[tp] - rejections.keep))
        while not stopping.is_set():
            batch = await consumer.getmany(timeout_ms=1000, max_records=500)
            for tp in sorted(batch):
                for record in batch[tp]:
                    rejections.add(record.offset, record.value)
    except Exception as exc:  # the page loses a table, never the view
        log.warning("projections: stopped reading %s: %r", topic, exc)
    finally:
        await consumer.stop()
