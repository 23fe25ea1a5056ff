"""The projections' view: the core's State folded from the journal, with job timelines, usage series and the command check (pure).

The view is the scheduler's own state, rebuilt with `domain.decider.fold`, so queues, fair
shares and pending reasons are exactly what the scheduler saw. Commands come from the same
fold (deterministic, in journal order); commands read from quotaflow.commands are only
checked against them. The view remembers the last journal `seq` it folded: a record seen
twice (a consumer rebalance, a restart that re-reads) is skipped, so reprocessing is harmless
and the view depends only on the journal, never on how it was delivered.

A group of records with one `ts` gets its cycle when the next `ts` arrives (as in a replay),
so the view lags the scheduler by at most one group, normally one tick.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from domain.commands import NodeCommand
from domain.decider import close_group, fold, initial_state
from domain.events import JournalRecord
from domain.plugins import DEFAULT_PLUGINS, Plugins
from domain.resources import Resources
from domain.state import State
from projections.accounting import Ledger
from projections.command_check import CommandCheck
from projections.timelines import Timelines, record_command, record_event
from projections.usage import Series, may_change_usage, sample


@dataclass(slots=True)
class View:
    """Everything the projections serve, folded from journal records (and checked commands)."""

    plugins: Plugins = DEFAULT_PLUGINS
    state: State = field(default_factory=initial_state)
    records: int = 0  # journal records folded
    duplicates: int = 0  # records skipped because already folded (seq not beyond the last)
    offsets: dict[str, int] = field(default_factory=dict)  # "topic:partition" -> next offset
    timelines: Timelines = field(default_factory=dict)
    queue_usage: dict[str, Series] = field(default_factory=dict)
    node_usage: dict[str, Series] = field(default_factory=dict)
    cluster_usage: Series = field(default_factory=Series)
    preemptions: dict[str, int] = field(default_factory=dict)  # victim queue -> Preempt count
    check: CommandCheck = field(default_factory=CommandCheck)
    errors: list[str] = field(default_factory=list)
    ledger: Ledger = field(
        default_factory=Ledger
    )  # every job's account (projections/accounting.py)
    # How the serving process got this view (resumed from a checkpoint or rebuilt, its
    # checkpoints since): shown by /health, never saved in a checkpoint.
    process: dict[str, Any] = field(default_factory=dict)
    _usage_dirty: bool = True
    _sampled_capacity: Resources = field(default_factory=Resources)

    def apply(self, record: JournalRecord) -> list[NodeCommand]:
        """Folds one journal record; returns the commands its group boundary released."""
        if self.records and record.seq <= self.state.seq:
            self.duplicates += 1
            return []
        emitted: list[NodeCommand] = []
        if self.state.group_open and record.ts != self.state.ts:
            emitted = self._close()
        if not self._usage_dirty and may_change_usage(self.state, record):
            self._usage_dirty = True
        self.state, more = fold(self.state, record, self.plugins)
        emitted += more  # empty: the group was closed above, exactly as fold would have
        self.records += 1
        record_event(self.timelines, record)
        self.ledger.note(record)
        return emitted

    def finish(self) -> list[NodeCommand]:
        """Runs the open group's cycle (end of a file or of a replay up to a time)."""
        return self._close() if self.state.group_open else []

    def _close(self) -> list[NodeCommand]:
        self.state, commands = close_group(self.state, self.plugins)
        ts = self.state.ts
        for command in commands:
            record_command(self.timelines, self.preemptions, self.state, command)
            self.check.expect(command)
        # Series are piecewise constant and integrated lazily, so a group that changed no
        # allocation or capacity needs no sample (a lost node changes the cluster capacity).
        self.ledger.observe(self.state, commands)
        if commands or self._usage_dirty or self.state.capacity != self._sampled_capacity:
            sample(self.state, ts, self.queue_usage, self.node_usage, self.cluster_usage)
            self._usage_dirty = False
            self._sampled_capacity = self.state.capacity
        return commands

    def observe_command(self, raw: dict[str, Any]) -> None:
        """A command read from quotaflow.commands: matched against what the fold emitted."""
        self.check.observe(raw)

    def unmatched(self) -> tuple[int, int]:
        """(derived but not yet seen on the topic, seen on the topic but not derived)."""
        return self.check.unmatched()


def build(records: Iterable[JournalRecord], plugins: Plugins = DEFAULT_PLUGINS) -> View:
    """A view of a whole journal, its last group's cycle run (as a replay ends)."""
    view = View(plugins=plugins)
    for record in records:
        view.apply(record)
    view.finish()
    return view
