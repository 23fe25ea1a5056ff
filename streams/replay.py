"""Streams the journal, the commands and the snapshots through the replay audit (I/O shell)."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Iterator
from typing import Any

from aiokafka import TopicPartition

from domain.audit import AuditReport, audit
from domain.codec import decode_command, decode_journal
from domain.events import JournalRecord
from streams.journal_reader import end_offsets, iter_journal
from streams.kafka_io import Topics, partitions_of, read_to_end
from streams.replay_sources import CommandPages, SnapshotPages

__all__ = ["read_commands", "read_journal", "replay"]


async def read_journal(
    bootstrap: str, topic_prefix: str = "", cluster: str | None = None
) -> list[JournalRecord]:
    """Every committed journal record in order; only `cluster`'s (by key) when given.

    Holds the whole journal: for tests and tools on small journals (replay streams it)."""
    topics = Topics.for_prefix(topic_prefix)
    records = (await read_to_end(bootstrap, topics.journal))[topics.journal]
    return _journal_records(records, cluster)


async def read_commands(bootstrap: str, topic_prefix: str = "") -> list[dict[str, Any]]:
    """Every committed command, in topic order per partition (so per node); holds them all."""
    topics = Topics.for_prefix(topic_prefix)
    records = (await read_to_end(bootstrap, topics.commands))[topics.commands]
    return [decode_command(record.value) for record in records if record.value is not None]


async def replay(
    bootstrap: str,
    topic_prefix: str = "",
    cluster: str | None = None,
    snapshots: bool = True,
    until: int | None = None,
    journal_ends: dict[TopicPartition, int] | None = None,
) -> AuditReport:
    """Re-folds the journal and checks every command on quotaflow.commands against it,
    and every snapshot still on quotaflow.snapshots (unless `snapshots` is False); with
    `until`, only the journal records up to that time (and no snapshots). `journal_ends`:
    where the journal read stops (default: its end now).

    The journal's end is fixed before the commands' and the snapshots' ends, and each
    batch's journal records, commands and snapshot commit in one transaction, so every
    command and snapshot the journal read explains has been read too; newer ones are
    counted, not judged.

    Everything streams (domain/audit.py, streams/replay_sources.py): the journal page by
    page, the commands a page per partition as the fold reaches them, each snapshot when
    the fold reaches its seq. Memory is bounded by the state, not by the topics' length.
    """
    topics = Topics.for_prefix(topic_prefix)
    ends = journal_ends or await end_offsets(bootstrap, topics.journal)
    loop = asyncio.get_running_loop()
    commands = CommandPages(bootstrap, topics.commands)
    found = None
    try:
        await commands.start()
        if snapshots and until is None and await _exists(bootstrap, topics.snapshots):
            found = SnapshotPages(bootstrap, topics.snapshots, cluster)
            await found.start()
        journal: Iterator[JournalRecord] = iter_journal(bootstrap, topics.journal, cluster, ends)
        if until is not None:
            journal = itertools.takewhile(lambda record: record.ts <= until, journal)
        observed = commands.commands(loop)
        checked = None if found is None else found.snapshots(loop)
        # The fold runs in a worker thread; the iterators fetch through this loop.
        return await asyncio.to_thread(audit, journal, observed, snapshots=checked)
    finally:
        await commands.stop()
        if found is not None:
            await found.stop()


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
