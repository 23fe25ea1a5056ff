"""Snapshots fold on exactly as the state they captured: same commands, same bytes (hypothesis)."""

from __future__ import annotations

import dataclasses
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from domain.commands import NodeCommand
from domain.decider import close_group, fold, initial_state
from domain.events import Event, JournalRecord
from domain.snapshot import (
    DERIVED_JOB,
    DERIVED_NODE,
    DERIVED_QUEUE,
    DERIVED_STATE,
    FORMAT_VERSION,
    SnapshotError,
    decode_state,
    encode_state,
    state_to_dict,
)
from domain.state import Job, Node, Queue, State
from tests.domain import test_policy_properties as policy_props
from tests.domain import test_preemption_properties as preemption_props
from tests.domain.harness import event

SETTINGS = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])


class RecordingSimulator(preemption_props.CheckedSimulator):
    """The checked simulator, keeping every record it journals (its agent answers every
    command); a scenario that takes a job back and forth fails instead of never ending."""

    def __init__(self) -> None:
        super().__init__()
        self.records: list[JournalRecord] = []

    def _append(self, ts: int, event: Event) -> None:
        super()._append(ts, event)
        self.records.append(JournalRecord(seq=self.seq, ts=ts, event=event))


def simulated_journal(lines: list[dict[str, Any]]) -> list[JournalRecord]:
    simulator = RecordingSimulator()
    for _ in simulator.run(orjson.dumps(line) for line in lines):
        pass
    return simulator.records


def wire(commands: list[NodeCommand]) -> list[bytes]:
    return [orjson.dumps(command.to_wire()) for command in commands]


def fold_records(state: State, records: list[JournalRecord]) -> tuple[State, list[NodeCommand]]:
    commands: list[NodeCommand] = []
    for record in records:
        state, emitted = fold(state, record)
        commands += emitted
    return state, commands


def check_snapshot_at(records: list[JournalRecord], cut: int, closed: bool) -> None:
    """Given a journal, when the state at `cut` is snapshotted, loaded and folded on,
    then it emits what the whole fold emits and ends with the same snapshot bytes."""
    whole, expected = fold_records(initial_state(), records)
    whole, last = close_group(whole)
    expected += last

    prefix, observed = fold_records(initial_state(), records[:cut])
    if closed:
        # The live scheduler snapshots after a batch's cycle, and never reuses that ts.
        prefix, emitted = close_group(prefix)
        observed += emitted
    body = encode_state(prefix)
    restored = decode_state(body)
    assert encode_state(restored) == body
    restored, emitted = fold_records(restored, records[cut:])
    observed += emitted
    restored, last = close_group(restored)
    observed += last

    assert wire(observed) == wire(expected)
    assert encode_state(restored) == encode_state(whole)


def group_ends(records: list[JournalRecord]) -> list[int]:
    """Cut points where the next record starts a new group (where a live snapshot is taken)."""
    return [
        i
        for i in range(1, len(records) + 1)
        if i == len(records) or records[i].ts != records[i - 1].ts
    ]


@SETTINGS
@given(preemption_props.scenarios(), st.data())
def test_a_snapshot_anywhere_in_a_preemption_journal_folds_on_identically(
    lines: list[dict[str, Any]], data: st.DataObject
) -> None:
    records = simulated_journal(lines)
    cut = data.draw(st.integers(0, len(records)), label="cut")
    check_snapshot_at(records, cut, closed=False)


@SETTINGS
@given(preemption_props.scenarios(), st.data())
def test_a_snapshot_after_a_closed_group_folds_on_identically(
    lines: list[dict[str, Any]], data: st.DataObject
) -> None:
    records = simulated_journal(lines)
    cut = data.draw(st.sampled_from(group_ends(records)), label="cut")
    check_snapshot_at(records, cut, closed=True)


@SETTINGS
@given(policies=policy_props.queues, ops=policy_props.operations, data=st.data())
def test_a_snapshot_in_a_policy_journal_keeps_timers_and_pending_order(
    policies: list[tuple[str, int, int]], ops: list[Any], data: st.DataObject
) -> None:
    records = policy_props.run(policies, ops).records
    cut = data.draw(st.integers(0, len(records)), label="cut")
    check_snapshot_at(records, cut, closed=False)


def test_every_field_of_the_state_is_written_or_rebuilt() -> None:
    # Given a state with one of everything, when it is encoded,
    # then each dataclass field is in the snapshot or is one the loader rebuilds.
    records = simulated_journal(
        [
            {"type": "QueueConfigured", "ts": 0, "queue": "q", "resources": {"gpu": {"quota": 2}}},
            {"type": "NodeHeartbeat", "ts": 0, "node": "n", "capacity": {"gpu": 2}},
            {"type": "JobSubmitted", "ts": 0, "job": "j", "queue": "q"},
        ]
    )
    state, _ = fold_records(initial_state(), records)
    encoded = state_to_dict(state)
    names = {f.name for f in dataclasses.fields(State)}
    assert names - DERIVED_STATE == set(encoded) - {"node_index_version"}
    queue = dict(encoded["queues"])["q"]
    assert {f.name for f in dataclasses.fields(Queue)} - DERIVED_QUEUE == set(queue)
    assert {f.name for f in dataclasses.fields(Node)} - DERIVED_NODE == set(
        dict(encoded["nodes"])["n"]
    )
    assert {f.name for f in dataclasses.fields(Job)} - DERIVED_JOB == set(
        dict(encoded["jobs"])["j"]
    )


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b"\x00garbage", "not valid JSON"),
        (b'{"format": "something else"}', "not a quotaflow state snapshot"),
        (b'{"format": "quotaflow.state", "version": 99}', "format version 99"),
        (b'{"format": "quotaflow.state", "version": 3, "state": {}}', "does not decode"),
        (b'{"format": "quotaflow.state", "version": 2, "state": {}}', "this code reads 3"),
    ],
)
def test_a_snapshot_that_cannot_be_trusted_is_refused_with_the_reason(
    body: bytes, reason: str
) -> None:
    assert FORMAT_VERSION == 3  # 3: devices; a version 2 snapshot is refused (journal replay)
    with pytest.raises(SnapshotError, match=reason):
        decode_state(body)


def test_a_snapshot_between_an_agent_restart_and_its_cycle_keeps_the_reconcile_request() -> None:
    # Given a job running on n1, when n1's agent restarts running nothing and the state is
    # snapshotted before the cycle that reconciles it, then the restored state still requeues
    # the job and dispatches it again, exactly as the whole fold does.
    beat = {"node": "n1", "capacity": {"gpu": 8}, "instance": "agent-a"}
    timed = [
        (0, event("QueueConfigured", queue="team", resources={"gpu": {"quota": 8}})),
        (0, event("NodeHeartbeat", **beat, incarnation=1, running=[])),
        (1000, event("JobSubmitted", job="train", queue="team", resources={"gpu": 8})),
        (1500, event("JobStarted", job="train", node="n1", attempt=1)),
        (2000, event("NodeHeartbeat", **beat, incarnation=2, running=[])),
        (3000, event("Tick")),
    ]
    records = [JournalRecord(seq=i, ts=ts, event=e) for i, (ts, e) in enumerate(timed, start=1)]
    restarted, _ = fold_records(initial_state(), records[:5])
    assert restarted.reconcile_requests and restarted.nodes["n1"].incarnation == 2
    for cut in range(len(records) + 1):
        check_snapshot_at(records, cut, closed=False)
    for cut in group_ends(records):
        check_snapshot_at(records, cut, closed=True)
