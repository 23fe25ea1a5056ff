"""The replay audit: re-fold the journal, check commands and snapshots as they stream (pure).

Kafka orders records only within a partition, and commands are keyed by node, so the audit
compares per node: the k-th command observed for a node must equal the k-th command the
fold emits for that node. Commands are compared as JSON values (the wire form), so a
difference in any field, including `seq` and `ts`, is a divergence.

Snapshots are audited the same way: the state the fold reaches at a snapshot's `seq` (its
group closed, as the scheduler closes a batch's group before it snapshots) must encode to
the snapshot's bytes exactly.

Memory is bounded by the state, not by the journal: `Audit` folds one record at a time and
pairs each command the fold emits with the node's next observed command as soon as both
are there; a pair that agrees is counted and dropped. What it holds besides the state is a
counter per node, the commands not yet paired (in a correct run, those of the group being
closed) and the failed checks (up to KEPT_FAILURES). Fed the observed commands in journal
order (`audit` pulls them only as far as the fold has reached), nothing else accumulates.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator, Mapping, Sequence
from itertools import chain

import orjson

from domain.audit_report import (
    KEPT_FAILURES,
    AuditReport,
    CommandCheck,
    Divergence,
    SnapshotCheck,
    Wire,
)
from domain.commands import NodeCommand
from domain.decider import close_group, fold, initial_state
from domain.events import JournalRecord
from domain.plugins import DEFAULT_PLUGINS, Plugins
from domain.snapshot import encode_state
from domain.state import State

__all__ = [
    "Audit",
    "AuditReport",
    "CommandCheck",
    "Divergence",
    "SnapshotCheck",
    "audit",
    "expected_commands",
]

# A snapshot as read: (seq it covers, canonical bytes or None, why it could not be read).
SnapshotInput = tuple[int, bytes | None, str]


def command_seq(command: Wire) -> int:
    """The journal position an observed command claims (-1 when it has none)."""
    seq = command.get("seq")
    return seq if isinstance(seq, int) else -1


class Audit:
    """The audit fed incrementally: `feed` each journal record in order, `observe` each observed
    command (in its node's topic order) once the fold has reached its seq, then `finish`.

    `feed` and `observe` return the checks that failed on the way; `finish` judges what is
    left (commands expected but never observed, observed but never explained) and reports.
    `snapshots`, in seq order, are pulled one at a time as the journal reaches their seq,
    checked, and dropped; None: snapshots not audited.
    """

    def __init__(
        self, plugins: Plugins = DEFAULT_PLUGINS, snapshots: Iterable[SnapshotInput] | None = None
    ) -> None:
        self.plugins = plugins
        self.state: State = initial_state()
        self.records = 0
        self.expected = 0
        self.observed = 0
        self.reproduced = 0
        self._snapshots: Iterator[SnapshotInput] | None = None
        if snapshots is not None:
            self._snapshots = iter(snapshots)
        self._peeked: SnapshotInput | None = None
        self._due: list[SnapshotInput] = []  # snapshots of the last record, checked at group end
        self._snapshot_checks: list[SnapshotCheck] = []
        self._unmatched: list[SnapshotInput] = []  # seqs the journal passed without a record
        self._waiting_expected: dict[str, deque[Wire]] = {}
        self._waiting_observed: dict[str, deque[Wire]] = {}
        self._paired: dict[str, int] = {}  # node -> checks made (the next one's index)
        self._ahead: list[Wire] = []  # observed beyond the fold's position: judged at finish
        self._ahead_nodes: set[str] = set()
        self._failures: list[CommandCheck] = []
        self._first: CommandCheck | None = None

    @property
    def seq(self) -> int:
        """The journal position folded so far."""
        return self.state.seq

    @property
    def waiting(self) -> int:
        """Commands held for pairing (expected or observed): what the audit holds beyond the state."""
        held = chain(self._waiting_expected.values(), self._waiting_observed.values())
        return sum(len(queue) for queue in held) + len(self._ahead)

    def feed(self, record: JournalRecord) -> list[CommandCheck]:
        """Folds one journal record (closing the previous group when its ts moves on)."""
        failed: list[CommandCheck] = []
        state = self.state
        if self._due and record.ts != state.ts:
            state, commands = close_group(state, self.plugins)  # what this fold is about to do
            failed += self._expect(commands)
        self._check_due(state)
        state, commands = fold(state, record, self.plugins)
        self.state = state
        failed += self._expect(commands)
        self._due = self._snapshots_at(record.seq)
        self.records += 1
        return failed

    def observe(self, command: Wire) -> list[CommandCheck]:
        """Pairs one observed command with its node's next expected one, if emitted already."""
        node = str(command.get("node"))
        if node in self._ahead_nodes or command_seq(command) > self.state.seq:
            # Maybe beyond the journal read: known only at finish. The node's later
            # commands wait behind it, so its order is kept.
            self._ahead_nodes.add(node)
            self._ahead.append(command)
            return []
        check = self._observe(node, command)
        return [] if check is None else [check]

    def finish(self, rest: Iterable[Wire] = ()) -> AuditReport:
        """Closes the last group and judges `rest` (observed commands not yet given: those
        beyond the last journal record are counted, not judged) and whatever is unpaired."""
        state, commands = close_group(self.state, self.plugins)
        self.state = state
        self._expect(commands)
        self._check_due(state)
        last = state.seq
        beyond = 0
        for command in chain(self._ahead, rest):
            if command_seq(command) > last:
                beyond += 1
            else:
                self._observe(str(command.get("node")), command)
        self._ahead = []
        for node in sorted(set(self._waiting_expected) | set(self._waiting_observed)):
            for expected in self._waiting_expected.pop(node, ()):
                self._judge(node, expected, None)
            for observed in self._waiting_observed.pop(node, ()):
                self._judge(node, None, observed)
        snapshots_beyond = 0
        remaining = [] if self._peeked is None else [self._peeked]
        for item in chain(remaining, self._snapshots or ()):
            if item[0] > last:
                snapshots_beyond += 1
            else:
                self._unmatched.append(item)
        self._snapshot_checks += [
            SnapshotCheck(item[0], item[2] or "the journal has no record with its seq")
            for item in self._unmatched
        ]
        first = self._first
        return AuditReport(
            journal_records=self.records,
            last_seq=last,
            expected=self.expected,
            observed=self.observed,
            reproduced=self.reproduced,
            beyond_journal=beyond,
            checks=tuple(sorted(self._failures, key=lambda c: (c.node, c.index))),
            first_divergence=None
            if first is None
            else Divergence(first.seq, first.node, first.index, first.expected, first.observed),
            snapshot_checks=None if self._snapshots is None else tuple(self._snapshot_checks),
            snapshots_beyond=snapshots_beyond,
        )

    def _expect(self, commands: list[NodeCommand]) -> list[CommandCheck]:
        failed: list[CommandCheck] = []
        for command in commands:
            wire: Wire = orjson.loads(orjson.dumps(command.to_wire()))
            node = str(wire.get("node"))
            self.expected += 1
            waiting = self._waiting_observed.get(node)
            if waiting:
                observed = waiting.popleft()
                if not waiting:
                    del self._waiting_observed[node]
                check = self._judge(node, wire, observed)
                if check is not None:
                    failed.append(check)
            else:
                self._waiting_expected.setdefault(node, deque()).append(wire)
        return failed

    def _observe(self, node: str, command: Wire) -> CommandCheck | None:
        self.observed += 1
        waiting = self._waiting_expected.get(node)
        if not waiting:
            self._waiting_observed.setdefault(node, deque()).append(command)
            return None
        expected = waiting.popleft()
        if not waiting:
            del self._waiting_expected[node]
        return self._judge(node, expected, command)

    def _judge(
        self, node: str, expected: Wire | None, observed: Wire | None
    ) -> CommandCheck | None:
        index = self._paired.get(node, 0)
        self._paired[node] = index + 1
        if expected is not None and expected == observed:
            self.reproduced += 1
            return None
        check = CommandCheck(node=node, index=index, expected=expected, observed=observed)
        if len(self._failures) < KEPT_FAILURES:
            self._failures.append(check)
        first = self._first
        if first is None or (check.seq, node, index) < (first.seq, first.node, first.index):
            self._first = check
        return check

    def _snapshots_at(self, seq: int) -> list[SnapshotInput]:
        """The snapshots at `seq`; those before it match no record (judged at finish)."""
        if self._snapshots is None:
            return []
        due: list[SnapshotInput] = []
        while True:
            item = self._peeked if self._peeked is not None else next(self._snapshots, None)
            self._peeked = None
            if item is None:
                return due
            if item[0] > seq:
                self._peeked = item
                return due
            (due if item[0] == seq else self._unmatched).append(item)

    def _check_due(self, state: State) -> None:
        if not self._due:
            return
        body = encode_state(state)
        for seq, snapshot, problem in self._due:
            if snapshot is None:
                self._snapshot_checks.append(SnapshotCheck(seq, problem or "unreadable"))
            elif snapshot != body:
                self._snapshot_checks.append(SnapshotCheck(seq, _difference(body, snapshot)))
            else:
                self._snapshot_checks.append(SnapshotCheck(seq, None))
        self._due = []


def _difference(expected: bytes, observed: bytes) -> str:
    """Which parts of the state differ, so a person knows where to look."""
    try:
        want = orjson.loads(expected)["state"]
        got = orjson.loads(observed)["state"]
        parts = sorted(key for key in set(want) | set(got) if want.get(key) != got.get(key))
    except (orjson.JSONDecodeError, KeyError, TypeError):
        return "the snapshot is not a state this code encodes"
    return "state differs in " + (", ".join(parts) or "its encoding")


def expected_commands(
    records: Iterable[JournalRecord], plugins: Plugins = DEFAULT_PLUGINS
) -> tuple[list[NodeCommand], int, int]:
    """Every command the fold emits for the journal, with the record count and last seq."""
    state = initial_state()
    emitted: list[NodeCommand] = []
    count = 0
    for record in records:
        state, commands = fold(state, record, plugins)
        emitted += commands
        count += 1
    state, commands = close_group(state, plugins)
    return emitted + commands, count, state.seq


def audit(
    records: Iterable[JournalRecord],
    observed: Iterable[Wire] | Mapping[str, Sequence[Wire]],
    plugins: Plugins = DEFAULT_PLUGINS,
    snapshots: Iterable[SnapshotInput] | None = None,
) -> AuditReport:
    """Re-folds `records` (in journal order) and checks `observed` commands, per node.

    `observed` is either the commands in topic order (grouped here by their `node`, which
    is their key) or a mapping node -> commands in that node's topic order. Observed
    commands whose `seq` lies beyond the last journal record are left out: they belong to
    transactions committed after the journal was read. `snapshots` (seq, bytes, problem)
    are checked against the fold at their seq; those beyond the journal read are counted.

    Both streams are consumed lazily: an observed command is pulled only once the fold has
    reached its seq, so with commands in seq order (each partition of the commands topic,
    merged by seq) the audit holds the state and one group's commands, however long the
    journal. A snapshot iterator must give them in seq order; a sequence is sorted here.
    """
    if snapshots is not None and not isinstance(snapshots, Iterator):
        snapshots = sorted(snapshots, key=lambda item: item[0])
    run = Audit(plugins, snapshots)
    commands: Iterator[Wire]
    if isinstance(observed, Mapping):
        commands = chain.from_iterable(observed.values())
    else:
        commands = iter(observed)
    head = next(commands, None)
    for record in records:
        run.feed(record)
        while head is not None and command_seq(head) <= run.seq:
            run.observe(head)
            head = next(commands, None)
    return run.finish(commands if head is None else chain((head,), commands))
