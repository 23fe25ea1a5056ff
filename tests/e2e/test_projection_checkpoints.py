"""The projections' checkpoints on a real broker: one the journal does not continue is set aside, and
the worker writes them on its timer and once more when it stops."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaProducer

from domain.codec import encode_journal
from domain.events import JournalRecord, Tick
from projections.checkpoint import header
from streams.kafka_io import Topics, ensure_topics
from tests.e2e.projections_process import WAIT_S, Projections, free_port
from tests.streams.test_sequencer import wait_for

# -- a checkpoint of another journal under the same topic names -------------------------------------


async def write_ticks(bootstrap: str, topic: str, seqs: range, *, apart: bool) -> None:
    """Journal Ticks, committed in one transaction, or each in its own (`apart`)."""
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap, transactional_id=f"test-ticks-{uuid.uuid4().hex}"
    )
    await producer.start()
    try:
        for group in [[seq] for seq in seqs] if apart else [list(seqs)]:
            async with producer.transaction():
                for seq in group:
                    record = JournalRecord(seq=seq, ts=1_000 * seq, event=Tick())
                    await producer.send(topic, encode_journal(record), key=b"default")
    finally:
        await producer.stop()


async def recreate(bootstrap: str, topics: Topics) -> None:
    """Deletes the journal and commands topics, waits until they are gone, creates them again."""
    from aiokafka.admin import AIOKafkaAdminClient

    names = [topics.journal, topics.commands]
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.delete_topics(names)

        async def gone() -> bool:
            return not set(names) & set(await admin.list_topics())

        await wait_for(gone, "the topics to be deleted", timeout_s=WAIT_S)
    finally:
        await admin.close()
    await ensure_topics(bootstrap, topics)


async def restart_on_new_journal(
    bootstrap: str, topics: Topics, projections: Projections, seqs: range, *, apart: bool
) -> dict[str, Any]:
    """Recreates the topics with a journal of Ticks `seqs`, starts the projections on it and
    returns their health once they have read it to its end."""
    await recreate(bootstrap, topics)
    await write_ticks(bootstrap, topics.journal, seqs, apart=apart)
    projections.start()
    return await projections.caught_up(seqs[-1])


async def test_a_checkpoint_the_journal_does_not_continue_is_set_aside(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    topics = Topics.for_prefix(f"proj-{uuid.uuid4().hex[:8]}.")
    await ensure_topics(kafka_bootstrap, topics)
    projections = Projections(kafka_bootstrap, topics, free_port(), tmp_path / "projections.log")
    try:
        # Given a checkpoint at seq 5 (records at offsets 0-4)
        await write_ticks(kafka_bootstrap, topics.journal, range(1, 6), apart=False)
        projections.start()
        await projections.caught_up(5)
        await projections.checkpointed(5)
        projections.stop()

        # When the topics are recreated with a shorter journal (its end before the checkpoint's offset)
        health = await restart_on_new_journal(
            kafka_bootstrap, topics, projections, range(1, 3), apart=False
        )
        # Then the checkpoint is set aside and the view rebuilt from offset 0
        assert health["seq"] == 2 and health["resumed_from"] is None
        assert "beyond the end" in health["rebuilt_because"]
        assert health["read_since_start"]["journal"] == 2
        await projections.checkpointed(2)
        projections.stop()

        # When they are recreated again and the record at the checkpoint's offset is not seq 3
        health = await restart_on_new_journal(
            kafka_bootstrap, topics, projections, range(1, 7), apart=True
        )
        # Then it is set aside too, and the whole new journal folded
        assert health["seq"] == 6 and health["records"] == 6 and health["duplicates_skipped"] == 0
        assert "the checkpoint expects 3" in health["rebuilt_because"]
        assert health["errors"] == []
    finally:
        projections.stop()


# -- the faust worker's checkpoints: on its timer, and once more when it stops ----------------------


async def test_the_worker_checkpoints_on_its_timer_and_once_more_on_sigterm(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    topics = Topics.for_prefix(f"proj-{uuid.uuid4().hex[:8]}.")
    await ensure_topics(kafka_bootstrap, topics)
    log = tmp_path / "projections.log"
    port = free_port()
    # --checkpoint-records stays at 10,000: no checkpoint below comes from the record count.
    quiet = Projections(kafka_bootstrap, topics, port, log, interval_s=3600)
    timed = Projections(kafka_bootstrap, topics, port, log, interval_s=0.3)
    try:
        # Given a process whose interval is an hour, when it has read three records and is stopped
        await write_ticks(kafka_bootstrap, topics.journal, range(1, 4), apart=True)
        quiet.start()
        health = await quiet.caught_up(3)
        assert health["checkpoint"]["written"] == 0
        # Then it exits cleanly and its last act was a checkpoint at seq 3
        assert quiet.stop() == 0, log.read_text()
        assert header(quiet.checkpoint.read_bytes())["seq"] == 3

        # Given a process whose interval is 0.3 s, resumed from it
        timed.start()
        health = await timed.caught_up(3)
        assert health["resumed_from"]["seq"] == 3
        # When two more records come, then the App's timer checkpoints them while it runs
        await write_ticks(kafka_bootstrap, topics.journal, range(4, 6), apart=True)
        health = await timed.checkpointed(5)
        assert health["read_since_start"]["journal"] == 2
        assert header(timed.checkpoint.read_bytes())["seq"] == 5
        assert "Traceback" not in log.read_text()
    finally:
        quiet.stop()
        timed.stop()
