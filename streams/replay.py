"""Reads the journal and the commands topic and runs the replay audit over them (I/O shell)."""

from __future__ import annotations

import asyncio
from typing import Any

from domain.audit import AuditReport, audit
from domain.codec import decode_command, decode_journal
from domain.events import JournalRecord
from streams.journal_reader import end_offsets, iter_journal
from streams.kafka_io import Topics, partitions_of, read_to_end
from streams.snapshot_reader import read_snapshots

__all__ = ["read_commands", "read_journal", "replay"]


async def read_journal(
    bootstrap: str, topic_prefix: str = "", cluster: str | None = None
) -> list[JournalRecord]:
    """Every committed journal record in order; only `cluster`'s (by key) when given."""
    topics = Topics.for_prefix(topic_prefix)
    records = (await read_to_end(bootstrap, topics.journal))[topics.journal]
    return _journal_records(records, cluster)


async def read_commands(bootstrap: str, topic_prefix: str = "") -> list[dict[str, Any]]:
    """Every committed command, in topic order per partition (so per node)."""
    topics = Topics.for_prefix(topic_prefix)
    records = (await read_to_end(bootstrap, topics.commands))[topics.commands]
    return [decode_command(record.value) for record in records if record.value is not None]


async def replay(
    bootstrap: str, topic_prefix: str = "", cluster: str | None = None, snapshots: bool = True
) -> AuditReport:
    """Re-folds the journal and checks every command on quotaflow.commands against it,
    and every snapshot still on quotaflow.snapshots (unless `snapshots` is False).

    The journal's end is fixed before the commands' and the snapshots' ends, and each
    batch's journal records, commands and snapshot commit in one transaction, so every
    command and snapshot the journal read explains has been read too; newer ones are
    counted, not judged.
    """
    topics = Topics.for_prefix(topic_prefix)
    ends = await end_offsets(bootstrap, topics.journal)
    commands = await read_commands(bootstrap, topic_prefix)
    found = None
    if snapshots and await _exists(bootstrap, topics.snapshots):
        found = await read_snapshots(bootstrap, topics.snapshots, cluster)
    # The journal streams through the fold in a worker thread (memory bounded by the state).
    journal = iter_journal(bootstrap, topics.journal, cluster, ends)
    return await asyncio.to_thread(audit, journal, commands, snapshots=found)


async def _exists(bootstrap: str, topic: str) -> bool:
    """Whether the topic exists (a journal written before snapshots has none)."""
    from streams.kafka_io import admin_client

    admin = admin_client(bootstrap)
    await admin.start()
    try:
        described = await admin.describe_topics([topic])
    finally:
        await admin.close()
    if not any(entry["error_code"] == 0 and entry["partitions"] for entry in described):
        return False
    await partitions_of(bootstrap, [topic])
    return True


def _journal_records(records: list[Any], cluster: str | None) -> list[JournalRecord]:
    wanted = None if cluster is None else cluster.encode()
    return [
        decode_journal(record.value)
        for record in records
        if record.value is not None and (wanted is None or record.key == wanted)
    ]
