"""A warm standby's state: the newest snapshot, then every journal record as it commits (I/O shell).

A standby scheduler folds the journal exactly as a restart would (the same pure ``fold``),
but continuously, so when it becomes active only the few records since its last read are
left to fold. It never closes a group itself: ``fold`` closes a group when the next ``ts``
arrives, and the scheduler closes the last one when it takes over, as a rebuild does.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass

from aiokafka import TopicPartition

from domain.codec import decode_journal
from domain.decider import close_group, fold, initial_state
from domain.events import JournalRecord
from domain.plugins import DEFAULT_PLUGINS, Plugins
from domain.state import State
from streams.kafka_io import Topics, read_committed_consumer
from streams.snapshot_reader import newest_first, read_journal_from

__all__ = ["Follower", "WarmStart", "continue_warm"]

log = logging.getLogger("quotaflow.standby")


@dataclass(frozen=True, slots=True)
class WarmStart:
    """A state folded up to the journal record at ``offset`` (whose seq is ``state.seq``)."""

    state: State
    offset: int


class Follower:
    """Follows one cluster's journal into a State until asked for it."""

    def __init__(
        self, bootstrap: str, topics: Topics, cluster: str, plugins: Plugins = DEFAULT_PLUGINS
    ) -> None:
        self.bootstrap = bootstrap
        self.topics = topics
        self.cluster = cluster
        self.plugins = plugins
        self.state: State = initial_state()
        self.offset: int | None = None  # the offset of the last record folded
        self._key = cluster.encode()
        self._expect: int | None = None  # the snapshot's own record, not folded again

    def warm(self) -> WarmStart | None:
        """What the scheduler starts from; None before the first record was read."""
        return None if self.offset is None else WarmStart(self.state, self.offset)

    async def run(self, stop: asyncio.Event) -> None:
        """Folds committed journal records until ``stop`` is set, through broker failures."""
        start = await self._start_point()
        while not stop.is_set():
            try:
                await self._follow(stop, start)
            except Exception as exc:  # a broker died under the consumer: carry on after a pause
                log.warning("standby could not read the journal (%r); retrying", exc)
                await asyncio.sleep(1)
            # Resume after the last record folded (or, before any, where this run began).
            start = start if self.offset is None else self.offset + 1

    async def _follow(self, stop: asyncio.Event, start: int) -> None:
        consumer = read_committed_consumer(self.bootstrap)
        await consumer.start()
        tp = TopicPartition(self.topics.journal, 0)
        try:
            consumer.assign([tp])
            consumer.seek(tp, start)
            while not stop.is_set():
                batch = await consumer.getmany(tp, timeout_ms=200, max_records=2000)
                for raw in batch.get(tp, []):
                    if raw.key != self._key or raw.value is None:
                        continue
                    if not self._take(decode_journal(raw.value), raw.offset):
                        log.warning("journal does not continue the standby's state; rereading it")
                        self.state, self.offset, self._expect = initial_state(), None, None
                        consumer.seek(tp, 0)
                        break
        finally:
            await consumer.stop()

    def _take(self, record: JournalRecord, offset: int) -> bool:
        if self._expect is not None:
            if record.seq != self._expect:
                return False
            self._expect = None
            self.offset = offset
            return True
        if record.seq != self.state.seq + 1:
            return False
        self.state, _ = fold(self.state, record, self.plugins)
        self.offset = offset
        return True

    async def _start_point(self) -> int:
        """The newest snapshot's journal offset (its record is checked, not folded), else 0."""
        try:
            snapshots = newest_first(self.bootstrap, self.topics.snapshots, self.cluster)
            async with contextlib.aclosing(snapshots):
                async for loaded in snapshots:
                    self.state = loaded.state
                    self._expect = loaded.manifest.seq
                    log.info("standby starts from the snapshot at seq %d", loaded.manifest.seq)
                    return loaded.manifest.journal_offset
        except Exception as exc:  # the journal alone is always enough
            log.warning("could not read snapshots (%r); following the whole journal", exc)
        self.state, self._expect = initial_state(), None
        return 0


async def continue_warm(
    bootstrap: str, topics: Topics, key: bytes, warm: WarmStart, plugins: Plugins
) -> State | None:
    """A standby's state folded on to the journal's end; None if the journal disagrees."""
    tail = await read_journal_from(bootstrap, topics.journal, warm.offset, key)
    seqs = [record.seq for record in tail]
    if not seqs or seqs != list(range(warm.state.seq, warm.state.seq + len(seqs))):
        log.warning("standby state passed over: the journal does not continue it")
        return None
    state = warm.state
    for record in tail[1:]:
        state, _ = fold(state, record, plugins)
    state, _ = close_group(state, plugins)
    log.info(
        "state from the standby at seq %d plus %d journal records", warm.state.seq, len(tail) - 1
    )
    return state
