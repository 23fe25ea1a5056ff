"""The replay audit's verdicts: command and snapshot checks, first divergence, report (pure)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson

__all__ = [
    "KEPT_FAILURES",
    "AuditReport",
    "CommandCheck",
    "Divergence",
    "SnapshotCheck",
    "Wire",
]

Wire = dict[str, Any]
KEPT_FAILURES = 1_000  # failed checks a report keeps (the first divergence is always exact)


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
    # The checks that failed, in (node, index) order, up to KEPT_FAILURES: reproduced
    # commands are counted, not kept, so the report's size does not grow with the journal.
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
