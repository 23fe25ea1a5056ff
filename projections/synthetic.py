"""A journal written in memory as the sequencer would write it, with obedient node agents (pure).

For benchmarks and trace replays: timed inputs (queues, nodes, jobs with `duration_s`) go
in; out comes a journal that a replay reproduces exactly. Unlike the offline simulator,
whose agent answers at the same ts (so its records are not a sequencer journal), each
group of records here has its own ts and its cycle runs once, as the sequencer does; agents
answer a command `answer_ms` later, finish a job `duration_s` after it started, and
heartbeat every node every `heartbeat_ms` while anything is left to happen. As the sequencer
does (docs/scheduler.md, Liveness), a heartbeat is journaled only when it changes the core's
view of its node; the others are noted by a `LivenessTracker` and journaled as `NodesAlive`
at the head of a group when the core has something due or a lease is half gone. A Tick is
appended when a policy timer (e.g. a balance timeout) falls due and no `NodesAlive` is owed,
as the sequencer's ticks would wake the scheduler.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Iterator

from domain.commands import Dispatch, Preempt
from domain.decider import accept, close_group, fold, initial_state
from domain.events import (
    Event,
    JobFinished,
    JobPreempted,
    JobStarted,
    JobSubmitted,
    JournalRecord,
    NodeHeartbeat,
    NodesAlive,
    Tick,
)
from domain.liveness import LivenessTracker

NEVER = 1 << 62


class _Agenda:
    """Events due at future times, in (ts, arrival) order; some can be called off."""

    def __init__(self) -> None:
        self.heap: list[tuple[int, int, Event]] = []
        self.count = 0
        self.cancelled: set[int] = set()
        self.work = 0  # due events other than heartbeats and ticks

    def push(self, ts: int, event: Event) -> int:
        self.count += 1
        heapq.heappush(self.heap, (ts, self.count, event))
        if not isinstance(event, NodeHeartbeat | Tick):
            self.work += 1
        return self.count

    def next_ts(self) -> int:
        return self.heap[0][0] if self.heap else NEVER

    def pop_until(self, ts: int) -> list[Event]:
        out = []
        while self.heap and self.heap[0][0] <= ts:
            _, number, event = heapq.heappop(self.heap)
            if number in self.cancelled:  # its work was taken off when it was called off
                self.cancelled.discard(number)
                continue
            if not isinstance(event, NodeHeartbeat | Tick):
                self.work -= 1
            out.append(event)
        return out


def journal(
    inputs: Iterable[tuple[int, Event]],
    answer_ms: int = 1,
    heartbeat_ms: int = 10_000,
    limit: int | None = None,
) -> Iterator[JournalRecord]:
    """Yields journal records (at most `limit`) for time-ordered inputs and the agents' answers."""
    state = initial_state()
    agenda = _Agenda()
    seq = 0
    last_ts = -1
    durations: dict[str, float | None] = {}
    finishes: dict[tuple[str, str, int], int] = {}  # (job, node, attempt) -> agenda number
    beating: set[str] = set()  # nodes with a heartbeat on the agenda
    liveness = LivenessTracker()  # heartbeats heard but not journaled
    tick_at = NEVER
    source = iter(inputs)
    upcoming = next(source, None)

    while upcoming is not None or agenda.work > 0 or tick_at < NEVER:
        ts = min(upcoming[0] if upcoming is not None else NEVER, agenda.next_ts(), tick_at)
        ts = max(ts, last_ts + 1)  # a closed group's ts is never reused
        group: list[Event] = []
        while upcoming is not None and upcoming[0] <= ts:
            group.append(upcoming[1])
            upcoming = next(source, None)
        group += agenda.pop_until(ts)
        alive = liveness.due(state, ts)  # owed at the head of the group, before its inputs
        if tick_at <= ts:
            tick_at = NEVER
            if not group and not alive:
                group.append(Tick())
        for event in [*alive, *group]:
            if isinstance(event, NodeHeartbeat):
                beating.discard(event.node)
            if not isinstance(event, Tick | NodesAlive) and accept(state, event) is not None:
                continue
            if isinstance(event, NodeHeartbeat) and liveness.absorb(state, event, ts):
                _beat_again(agenda, beating, event, ts + heartbeat_ms)
                continue
            if isinstance(event, JobSubmitted):
                durations[event.job] = event.duration_s
            seq += 1
            record = JournalRecord(seq=seq, ts=ts, event=event)
            state, _ = fold(state, record)
            yield record
            if limit is not None and seq >= limit:
                return
            if isinstance(event, NodeHeartbeat):
                _beat_again(agenda, beating, event, ts + heartbeat_ms)
        liveness.committed(state, alive)
        last_ts = ts
        state, commands = close_group(state)
        for command in commands:
            key = (command.job, command.node, command.attempt)
            if isinstance(command, Dispatch):
                agenda.push(
                    ts + answer_ms,
                    JobStarted(job=command.job, node=command.node, attempt=command.attempt),
                )
                duration = durations.get(command.job)
                if duration is not None:
                    finish = JobFinished(
                        job=command.job,
                        node=command.node,
                        attempt=command.attempt,
                        outcome="succeeded",
                    )
                    finishes[key] = agenda.push(ts + answer_ms + round(duration * 1000), finish)
            elif isinstance(command, Preempt):
                number = finishes.pop(key, None)
                if number is not None:
                    agenda.cancelled.add(number)
                    agenda.work -= 1  # a finish that will never be reported
                agenda.push(
                    ts + answer_ms,
                    JobPreempted(job=command.job, node=command.node, attempt=command.attempt),
                )
        if state.timers:
            tick_at = min(tick_at, max(state.timers[0][0], ts + 1))


def _beat_again(agenda: _Agenda, beating: set[str], heartbeat: NodeHeartbeat, ts: int) -> None:
    """The node's agent heartbeats again at `ts`, unless it already has one on the agenda."""
    if heartbeat.node not in beating:
        agenda.push(ts, heartbeat)
        beating.add(heartbeat.node)
