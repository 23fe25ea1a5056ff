"""Reads the journal and the commands topic and runs the replay audit over them (I/O shell)."""

from __future__ import annotations

from typing import Any

from domain.audit import AuditReport, audit
from domain.codec import decode_command, decode_journal
from domain.events import JournalRecord
from streams.kafka_io import Topics, read_to_end

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


async def replay(bootstrap: str, topic_prefix: str = "", cluster: str | None = None) -> AuditReport:
    """Re-folds the journal and checks every command on quotaflow.commands against it.

    The journal's end is fixed before the commands' end, and each batch's journal records
    and commands commit in one transaction, so every command the journal read explains has
    been read too; commands newer than the journal read are counted, not judged.
    """
    topics = Topics.for_prefix(topic_prefix)
    read = await read_to_end(bootstrap, [topics.journal, topics.commands])
    journal = _journal_records(read[topics.journal], cluster)
    commands = [decode_command(r.value) for r in read[topics.commands] if r.value is not None]
    return audit(journal, commands)


def _journal_records(records: list[Any], cluster: str | None) -> list[JournalRecord]:
    wanted = None if cluster is None else cluster.encode()
    return [
        decode_journal(record.value)
        for record in records
        if record.value is not None and (wanted is None or record.key == wanted)
    ]
