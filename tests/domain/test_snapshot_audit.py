"""The replay audit checks snapshots against the journal: reproduced, differing, unreadable (pure)."""

from __future__ import annotations

import orjson

from domain.audit import audit
from domain.decider import close_group, fold, initial_state
from domain.events import JournalRecord
from domain.snapshot import encode_state
from tests.domain.test_snapshot_properties import group_ends, simulated_journal

LINES = [
    {"type": "QueueConfigured", "ts": 0, "queue": "a", "resources": {"gpu": {"quota": 4}}},
    {"type": "QueueConfigured", "ts": 0, "queue": "b", "resources": {"gpu": {"quota": 4}}},
    {"type": "NodeHeartbeat", "ts": 0, "node": "n1", "capacity": {"gpu": 8}},
    {"type": "JobSubmitted", "ts": 1000, "job": "b1", "queue": "b", "tasks": 8, "duration_s": 30},
    {"type": "JobSubmitted", "ts": 2000, "job": "a1", "queue": "a", "tasks": 4, "duration_s": 5},
    {"type": "JobSubmitted", "ts": 3000, "job": "a2", "queue": "a", "duration_s": 5},
]


def journal() -> list[JournalRecord]:
    return simulated_journal(LINES)


def snapshot_after(records: list[JournalRecord], count: int) -> tuple[int, bytes, str]:
    """What the scheduler writes after the batch ending with record `count`."""
    state = initial_state()
    for record in records[:count]:
        state, _ = fold(state, record)
    state, _ = close_group(state)
    return (state.seq, encode_state(state), "")


def commands_of(records: list[JournalRecord]) -> list[dict[str, object]]:
    state, emitted = initial_state(), []
    for record in records:
        state, commands = fold(state, record)
        emitted += commands
    state, commands = close_group(state)
    return [orjson.loads(orjson.dumps(c.to_wire())) for c in emitted + commands]


def test_snapshots_at_batch_ends_are_reproduced() -> None:
    records = journal()
    cuts = group_ends(records)
    assert len(cuts) >= 4  # the story has several groups: preemption, stops, restarts
    snapshots = [snapshot_after(records, cut) for cut in cuts]
    report = audit(records, commands_of(records), snapshots=snapshots)
    assert report.ok, report.summary()
    assert report.snapshots_reproduced == len(cuts)
    assert report.summary().endswith(f"{len(cuts)} snapshots reproduced: every snapshot reproduced")


def test_a_snapshot_that_disagrees_with_the_journal_fails_the_audit_and_says_where() -> None:
    records = journal()
    cut = group_ends(records)[2]
    seq, body, _ = snapshot_after(records, cut)
    document = orjson.loads(body)
    document["state"]["freed"] += 1
    tampered = orjson.dumps(document, option=orjson.OPT_SORT_KEYS)
    report = audit(records, commands_of(records), snapshots=[(seq, tampered, "")])
    assert not report.ok
    assert report.first_divergence is None  # the commands themselves are all reproduced
    assert f"snapshot at seq {seq} not reproduced: state differs in freed" in report.summary()


def test_an_unreadable_snapshot_fails_and_a_newer_one_is_only_counted() -> None:
    records = journal()
    last = records[-1].seq
    snapshots = [(3, None, "sha256 of the chunks does not match the manifest"), (last + 5, b"", "")]
    report = audit(records, commands_of(records), snapshots=snapshots)
    assert not report.ok
    assert report.snapshots_beyond == 1
    assert "snapshot at seq 3 not reproduced: sha256 of the chunks" in report.summary()


def test_without_snapshots_the_summary_is_the_commands_alone() -> None:
    records = journal()
    report = audit(records, commands_of(records))
    assert report.ok
    assert report.summary().endswith("every command reproduced")
