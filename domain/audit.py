"""The replay audit: re-fold the journal and check every observed command against it (pure).

Kafka orders records only within a partition, and commands are keyed by node, so the audit
compares per node: the k-th command observed for a node must equal the k-th command the
fold emits for that node. Commands are compared as JSON values (the wire form), so a
difference in any field, including `seq` and `ts`, is a divergence.

Snapshots are audited the same way: the state the fold reaches at a snapshot's `seq` (its
group closed, as the scheduler closes a batch's group before it snapshots) must encode to
the snapshot's bytes exactly.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from domain.commands import NodeCommand
from domain.decider import close_group, fold, initial_state
from domain.events import JournalRecord
from domain.plugins import DEFAULT_PLUGINS, Plugins
from domain.snapshot import encode_state
from domain.state import State

__all__ = [
    "AuditReport",
    "CommandCheck",
    "Divergence",
    "SnapshotCheck",
    "audit",
    "expected_commands",
]

Wire = dict[str, Any]
# A snapshot as read: (seq it covers, canonical bytes or None, why it could not be read).
SnapshotInput = tuple[int, bytes | None, str]


@dataclass(frozen=True, slots=True)
class SnapshotCheck:
    """One snapshot compared with the state the journal folds to at its seq."""

    seq: int
    problem: str | None  # None: reproduced byte for byte

    @property
    def reproduced(self) -> bool:
        return self.problem is None


@dataclass(frozen=True, slots=True)
class CommandCheck:
    """One position in one node's command stream: what replay expects and what was observed."""

    node: str
    index: int  # position among this node's commands, from 0
    expected: Wire | None  # None: observed a command the journal does not explain
    observed: Wire | None  # None: replay expects a command that was never written

    @property
    def reproduced(self) -> bool:
        return self.expected is not None and self.expected == self.observed

    @property
    def seq(self) -> int:
        """The journal position the command claims (expected first, else observed)."""
        for side in (self.expected, self.observed):
            if side is not None and isinstance(side.get("seq"), int):
                return int(side["seq"])
        return -1


@dataclass(frozen=True, slots=True)
class Divergence:
    """The first place where replay and the commands topic disagree."""

    seq: int
    node: str
    index: int
    expected: Wire | None
    observed: Wire | None

    def describe(self) -> str:
        def show(side: Wire | None) -> str:
            return "nothing" if side is None else orjson.dumps(side).decode()

        return (
            f"seq {self.seq}, node {self.node} (command #{self.index}): "
            f"expected {show(self.expected)}, observed {show(self.observed)}"
        )


@dataclass(frozen=True, slots=True)
class AuditReport:
    """The outcome of replaying a journal against the commands it produced."""

    journal_records: int
    last_seq: int
    expected: int
    observed: int
    reproduced: int
    beyond_journal: int  # observed commands newer than the journal read (still being written)
    checks: tuple[CommandCheck, ...] = field(repr=False)
    first_divergence: Divergence | None
    snapshot_checks: tuple[SnapshotCheck, ...] | None = None  # None: snapshots not audited
    snapshots_beyond: int = 0  # snapshots newer than the journal read

    @property
    def ok(self) -> bool:
        return self.first_divergence is None and self.first_snapshot_problem is None

    @property
    def snapshots_reproduced(self) -> int:
        return sum(1 for check in self.snapshot_checks or () if check.reproduced)

    @property
    def first_snapshot_problem(self) -> SnapshotCheck | None:
        return next((c for c in self.snapshot_checks or () if not c.reproduced), None)

    def summary(self) -> str:
        head = (
            f"journal records {self.journal_records} (last seq {self.last_seq}), "
            f"commands expected {self.expected}, observed {self.observed}, "
            f"reproduced {self.reproduced}"
        )
        if self.beyond_journal:
            head += f", {self.beyond_journal} newer than the journal read (not audited)"
        if self.first_divergence is None:
            head += ": every command reproduced"
        else:
            head += f"; first divergence at {self.first_divergence.describe()}"
        return head + self._snapshot_summary()

    def _snapshot_summary(self) -> str:
        if self.snapshot_checks is None:
            return ""
        checks = self.snapshot_checks
        text = f"; snapshots {len(checks)}, {self.snapshots_reproduced} snapshots reproduced"
        if self.snapshots_beyond:
            text += f", {self.snapshots_beyond} newer than the journal read (not audited)"
        problem = self.first_snapshot_problem
        if problem is None:
            return text + (": every snapshot reproduced" if checks else "")
        return text + f"; snapshot at seq {problem.seq} not reproduced: {problem.problem}"


def expected_commands(
    records: Iterable[JournalRecord], plugins: Plugins = DEFAULT_PLUGINS
) -> tuple[list[NodeCommand], int, int]:
    """Every command the fold emits for the journal, with the record count and last seq."""
    emitted, count, last_seq, _ = refold(records, plugins)
    return emitted, count, last_seq


def refold(
    records: Iterable[JournalRecord],
    plugins: Plugins = DEFAULT_PLUGINS,
    snapshots: Sequence[SnapshotInput] = (),
) -> tuple[list[NodeCommand], int, int, list[SnapshotCheck]]:
    """`expected_commands`, plus the verdict on each snapshot whose seq the journal reaches."""
    wanted: dict[int, list[SnapshotInput]] = {}
    for snapshot in snapshots:
        wanted.setdefault(snapshot[0], []).append(snapshot)
    state = initial_state()
    emitted: list[NodeCommand] = []
    checks: list[SnapshotCheck] = []
    due: list[SnapshotInput] = []  # snapshots of the last record folded, checked at group end
    count = 0
    for record in records:
        if due and record.ts != state.ts:
            state, commands = close_group(state, plugins)  # what this fold is about to do
            emitted.extend(commands)
        checks += _check_snapshots(state, due)
        state, commands = fold(state, record, plugins)
        emitted.extend(commands)
        due = wanted.pop(record.seq, [])
        count += 1
    state, commands = close_group(state, plugins)
    emitted.extend(commands)
    checks += _check_snapshots(state, due)
    for seq, items in sorted(wanted.items()):
        if seq <= state.seq:
            checks += [
                SnapshotCheck(seq, item[2] or "the journal has no record with its seq")
                for item in items
            ]
    return emitted, count, state.seq, checks


def _check_snapshots(state: State, snapshots: list[SnapshotInput]) -> list[SnapshotCheck]:
    if not snapshots:
        return []
    body = encode_state(state)
    checks = []
    for seq, snapshot, problem in snapshots:
        if snapshot is None:
            checks.append(SnapshotCheck(seq, problem or "unreadable"))
        elif snapshot != body:
            checks.append(SnapshotCheck(seq, _difference(body, snapshot)))
        else:
            checks.append(SnapshotCheck(seq, None))
    return checks


def _difference(expected: bytes, observed: bytes) -> str:
    """Which parts of the state differ, so a person knows where to look."""
    try:
        want = orjson.loads(expected)["state"]
        got = orjson.loads(observed)["state"]
        parts = sorted(key for key in set(want) | set(got) if want.get(key) != got.get(key))
    except (orjson.JSONDecodeError, KeyError, TypeError):
        return "the snapshot is not a state this code encodes"
    return "state differs in " + (", ".join(parts) or "its encoding")


def _by_node(commands: Iterable[Wire]) -> dict[str, list[Wire]]:
    grouped: dict[str, list[Wire]] = {}
    for command in commands:
        grouped.setdefault(str(command.get("node")), []).append(command)
    return grouped


def audit(
    records: Iterable[JournalRecord],
    observed: Iterable[Wire] | Mapping[str, Sequence[Wire]],
    plugins: Plugins = DEFAULT_PLUGINS,
    snapshots: Sequence[SnapshotInput] | None = None,
) -> AuditReport:
    """Re-folds `records` (in journal order) and checks `observed` commands, per node.

    `observed` is either the commands in topic order (grouped here by their `node`, which
    is their key) or a mapping node -> commands in that node's topic order. Observed
    commands whose `seq` lies beyond the last journal record are left out: they belong to
    transactions committed after the journal was read. `snapshots` (seq, bytes, problem)
    are checked against the fold at their seq; those beyond the journal read are counted.
    """
    snapshot_list = list(snapshots or ())
    emitted, count, last_seq, snapshot_checks = refold(records, plugins, snapshot_list)
    expected = _by_node(orjson.loads(orjson.dumps(c.to_wire())) for c in emitted)
    if isinstance(observed, Mapping):
        raw_observed = {str(node): list(commands) for node, commands in observed.items()}
    else:
        raw_observed = _by_node(observed)

    beyond = 0
    seen: dict[str, list[Wire]] = {}
    for node, commands in raw_observed.items():
        kept = []
        for command in commands:
            seq = command.get("seq")
            if isinstance(seq, int) and seq > last_seq:
                beyond += 1
            else:
                kept.append(command)
        seen[node] = kept

    checks: list[CommandCheck] = []
    for node in sorted(set(expected) | set(seen)):
        want, got = expected.get(node, []), seen.get(node, [])
        for index in range(max(len(want), len(got))):
            checks.append(
                CommandCheck(
                    node=node,
                    index=index,
                    expected=want[index] if index < len(want) else None,
                    observed=got[index] if index < len(got) else None,
                )
            )

    first: CommandCheck | None = None
    for check in checks:
        if not check.reproduced and (
            first is None
            or (check.seq, check.node, check.index) < (first.seq, first.node, first.index)
        ):
            first = check
    divergence = (
        None
        if first is None
        else Divergence(first.seq, first.node, first.index, first.expected, first.observed)
    )
    return AuditReport(
        journal_records=count,
        last_seq=last_seq,
        expected=sum(len(v) for v in expected.values()),
        observed=sum(len(v) for v in seen.values()),
        reproduced=sum(1 for check in checks if check.reproduced),
        beyond_journal=beyond,
        checks=tuple(checks),
        first_divergence=divergence,
        snapshot_checks=None if snapshots is None else tuple(snapshot_checks),
        snapshots_beyond=sum(1 for item in snapshot_list if item[0] > last_seq),
    )
