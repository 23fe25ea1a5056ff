"""The replay audit streams: lazy pulls of journal, commands and snapshots; little held (pure)."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import orjson

from domain.audit import Audit, audit, command_seq
from domain.events import JournalRecord
from tests.domain.test_snapshot_audit import commands_of, snapshot_after
from tests.domain.test_snapshot_properties import group_ends, simulated_journal

Wire = dict[str, Any]


def busy_journal(jobs: int = 60) -> list[JournalRecord]:
    """Two queues on three nodes and a stream of jobs that start, finish and preempt."""
    lines: list[dict[str, Any]] = [
        {"type": "QueueConfigured", "ts": 0, "queue": "a", "resources": {"gpu": {"quota": 8}}},
        {"type": "QueueConfigured", "ts": 0, "queue": "b", "resources": {"gpu": {"quota": 8}}},
    ]
    lines += [
        {"type": "NodeHeartbeat", "ts": 0, "node": f"n{n}", "capacity": {"gpu": 8}}
        for n in range(3)
    ]
    lines += [
        {
            "type": "JobSubmitted",
            "ts": 1000 * (i // 4 + 1),
            "job": f"j{i}",
            "queue": "ab"[i % 2],
            "tasks": 1 + i % 4,
            "resources": {"gpu": 2},
            "duration_s": 5 + i % 11,
        }
        for i in range(jobs)
    ]
    return simulated_journal(lines)


def test_the_audit_pulls_each_command_only_once_the_fold_has_reached_it() -> None:
    records = busy_journal()
    observed = commands_of(records)
    assert len(observed) > 50
    folded: list[int] = []
    lag: list[int] = []  # for each command pulled: how far the fold was past the one before
    pulled_at: list[int] = []  # records read when each command was pulled

    def journal() -> Iterator[JournalRecord]:
        for record in records:
            folded.append(record.seq)
            yield record

    def commands() -> Iterator[Wire]:
        previous = 0
        for command in observed:
            lag.append(folded[-1] - previous if folded else -1)
            pulled_at.append(len(folded))
            previous = command_seq(command)
            yield command

    report = audit(journal(), commands())
    assert report.ok, report.summary()
    assert report.reproduced == len(observed) and report.checks == ()
    # The audit looks one command ahead: it asks for the next only once the fold has
    # reached the seq of the one before, never for the whole topic up front.
    assert lag[0] == -1 and len(lag) == len(observed)
    assert all(step >= 0 for step in lag[1:])
    # ... and the journal streams alongside: half the commands are compared before the fold
    # has read half the journal's records (an audit that reads the journal first fails here).
    assert pulled_at[len(observed) // 2] < len(records) * 3 // 4


def test_fed_in_step_the_audit_holds_one_group_not_the_journal() -> None:
    records = busy_journal()
    observed = iter(commands_of(records))
    run = Audit()
    head = next(observed, None)
    most = 0
    for record in records:
        assert run.feed(record) == []
        while head is not None and command_seq(head) <= run.seq:
            assert run.observe(head) == []
            head = next(observed, None)
        most = max(most, run.waiting)
    report = run.finish([] if head is None else [head, *observed])
    assert report.ok, report.summary()
    assert report.expected == report.observed == report.reproduced > 50
    # What waits is at most the commands of one group being closed.
    assert most <= 8, most


def test_a_wrong_command_is_reported_when_it_is_paired_not_only_at_the_end() -> None:
    records = busy_journal()
    observed = commands_of(records)
    wrong_at = len(observed) // 2
    observed[wrong_at] = {**observed[wrong_at], "job": "somebody-else"}
    run = Audit()
    found: list[int] = []
    pending = iter(observed)
    head = next(pending, None)
    for record in records:
        if run.feed(record):
            found.append(record.seq)
        while head is not None and command_seq(head) <= run.seq:
            if run.observe(head):
                found.append(run.seq)
            head = next(pending, None)
    assert found and found[0] < records[-1].seq  # seen mid-journal
    report = run.finish([] if head is None else [head, *pending])
    assert not report.ok and report.reproduced == len(observed) - 1
    divergence = report.first_divergence
    assert divergence is not None and divergence.observed is not None
    assert divergence.observed["job"] == "somebody-else"
    assert [check.reproduced for check in report.checks] == [False]


def test_commands_observed_ahead_of_the_fold_are_judged_at_the_end() -> None:
    records = busy_journal(jobs=10)
    observed = commands_of(records)
    newer = {**observed[-1], "seq": records[-1].seq + 3}
    run = Audit()
    for command in [*observed, newer]:  # all up front: kept aside, not judged yet
        assert run.observe(command) == []
    for record in records:
        run.feed(record)
    report = run.finish()
    assert report.ok, report.summary()
    assert report.beyond_journal == 1 and report.observed == len(observed)


def test_snapshots_are_pulled_as_the_journal_reaches_them() -> None:
    records = busy_journal(jobs=20)
    cuts = group_ends(records)[::3]
    fed: list[int] = []
    asked: list[tuple[int, int]] = []  # (snapshot seq, records fed when it was asked for)

    def journal() -> Iterator[JournalRecord]:
        for record in records:
            fed.append(record.seq)
            yield record

    def snapshots() -> Iterator[tuple[int, bytes | None, str]]:
        for cut in cuts:
            snapshot = snapshot_after(records, cut)
            asked.append((snapshot[0], len(fed)))
            yield snapshot

    report = audit(journal(), commands_of(records), snapshots=snapshots())
    assert report.ok, report.summary()
    assert report.snapshots_reproduced == len(cuts) >= 3
    # Each snapshot is fetched only once the one before it was reached.
    for (previous, _), (_, when) in itertools.pairwise(asked):
        assert when >= previous


def test_the_audit_matches_the_wire_form_exactly() -> None:
    records = busy_journal(jobs=5)
    observed = [orjson.loads(orjson.dumps(c)) for c in commands_of(records)]
    observed[0] = {**observed[0], "ts": observed[0]["ts"] + 1}
    report = audit(iter(records), iter(observed))
    assert not report.ok and report.first_divergence is not None
    assert report.first_divergence.index == 0
