"""The replay audit: re-fold the journal and check every observed command against it (pure).

Kafka orders records only within a partition, and commands are keyed by node, so the audit
compares per node: the k-th command observed for a node must equal the k-th command the
fold emits for that node. Commands are compared as JSON values (the wire form), so a
difference in any field, including `seq` and `ts`, is a divergence.
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

__all__ = ["AuditReport", "CommandCheck", "Divergence", "audit", "expected_commands"]

Wire = dict[str, Any]


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

    @property
    def ok(self) -> bool:
        return self.first_divergence is None

    def summary(self) -> str:
        head = (
            f"journal records {self.journal_records} (last seq {self.last_seq}), "
            f"commands expected {self.expected}, observed {self.observed}, "
            f"reproduced {self.reproduced}"
        )
        if self.beyond_journal:
            head += f", {self.beyond_journal} newer than the journal read (not audited)"
        if self.first_divergence is None:
            return head + ": every command reproduced"
        return head + f"; first divergence at {self.first_divergence.describe()}"


def expected_commands(
    records: Iterable[JournalRecord], plugins: Plugins = DEFAULT_PLUGINS
) -> tuple[list[NodeCommand], int, int]:
    """Every command the fold emits for the journal, with the record count and last seq."""
    state = initial_state()
    emitted: list[NodeCommand] = []
    count = 0
    for record in records:
        state, commands = fold(state, record, plugins)
        emitted.extend(commands)
        count += 1
    state, commands = close_group(state, plugins)
    emitted.extend(commands)
    return emitted, count, state.seq


def _by_node(commands: Iterable[Wire]) -> dict[str, list[Wire]]:
    grouped: dict[str, list[Wire]] = {}
    for command in commands:
        grouped.setdefault(str(command.get("node")), []).append(command)
    return grouped


def audit(
    records: Iterable[JournalRecord],
    observed: Iterable[Wire] | Mapping[str, Sequence[Wire]],
    plugins: Plugins = DEFAULT_PLUGINS,
) -> AuditReport:
    """Re-folds `records` (in journal order) and checks `observed` commands, per node.

    `observed` is either the commands in topic order (grouped here by their `node`, which
    is their key) or a mapping node -> commands in that node's topic order. Observed
    commands whose `seq` lies beyond the last journal record are left out: they belong to
    transactions committed after the journal was read.
    """
    emitted, count, last_seq = expected_commands(records, plugins)
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
    )
