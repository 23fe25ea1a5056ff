"""Batches that write nothing: quiet heartbeats, deferred offsets, the core's next due time (I/O shell).

Split from streams/transaction.py. A batch of heartbeats that change nothing the core sees
writes no record (domain/liveness.py); it needs a transaction only to commit its offsets,
and those may wait for the next transaction that writes, or for tick_ms. So while nothing is
due, such a batch is noted without entering aiokafka's transaction at all.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeAlias

from aiokafka import ConsumerRecord, TopicPartition
from aiokafka.structs import OffsetAndMetadata

from domain.liveness import LivenessTracker, next_due_ts
from domain.state import State
from streams.batch import BatchOutcome, InputKey, next_offsets
from streams.ingress import quiet_heartbeats
from streams.kafka_io import Topics

__all__ = ["QuietBatches"]

Record: TypeAlias = "ConsumerRecord[bytes, bytes]"


class QuietBatches:
    """What the batch transactions do for a batch that writes nothing (a mixin of theirs)."""

    topics: Topics
    clock: Callable[[], int]
    state: State
    liveness: LivenessTracker
    _last_commit_ms: int
    _due: tuple[State, int, int | None] | None = None  # the state, its seq, its next_due_ts
    _deferred: dict[TopicPartition, OffsetAndMetadata]  # read, not yet committed (writing nothing)

    def _note_quiet(
        self, inputs: Sequence[Record], poisoned: dict[InputKey, str]
    ) -> BatchOutcome | None:
        """A batch of heartbeats that change nothing the core sees, while nothing is due and
        the offsets may wait: `_transact` would write nothing and commit nothing for it, so
        the tracker notes them without one (about two thirds of the batches at 500 jobs/s
        with 1,000 nodes: docs/kafka.md, Scheduler settings). None: the batch needs one."""
        state = self.state
        if poisoned or state.group_open:
            return None
        if self.clock() - self._last_commit_ms >= state.cluster.tick_ms:
            return None  # its offsets are due, and the epoch's check with them
        heard = quiet_heartbeats(state, inputs, self.topics.nodes)
        if heard is None:
            return None
        ts = self._batch_ts()
        if self.liveness.due(state, ts, self._core_due()):
            return None  # what was heard goes into the journal first
        for event in heard:
            self.liveness.absorb(state, event, ts)
        self._offsets_to_commit(inputs, wrote=False)  # deferred to the next commit
        return BatchOutcome(ts=ts, heard=len(heard), last_seq=state.seq)

    def _batch_ts(self) -> int:
        """The ts a batch is stamped with: the clock, but never one already used (a later
        batch would otherwise join the previous group on replay)."""
        return max(self.clock(), self.state.ts + 1)

    def _offsets_to_commit(
        self, inputs: Sequence[Record], wrote: bool
    ) -> dict[TopicPartition, OffsetAndMetadata]:
        """The offsets this transaction commits: those of its inputs and of earlier batches
        that wrote nothing, or none when this one writes nothing either and the last commit
        is younger than tick_ms.

        A batch of heartbeats that change nothing the core sees writes no record, so a
        transaction of its own would only move the offsets past them (three requests to the
        broker). Deferring that to the next transaction that writes, or to tick_ms, loses
        nothing: re-read after a restart, such heartbeats are noted again, as if read late.
        A commit at least every tick_ms keeps a fenced scheduler finding out that soon."""
        for tp, offset in next_offsets(inputs).items():
            known = self._deferred.get(tp)
            if known is None or known.offset < offset.offset:
                self._deferred[tp] = offset
        if not wrote and self.clock() - self._last_commit_ms < self.state.cluster.tick_ms:
            return {}
        return dict(self._deferred)

    def _core_due(self) -> int | None:
        """`next_due_ts` of the state (it reads every node), computed once per state version:
        anything that changes the state changes its object or its seq, or closes a group."""
        state = self.state
        if self._due is None or self._due[0] is not state or self._due[1] != state.seq:
            self._due = (state, state.seq, next_due_ts(state))
        return self._due[2]
