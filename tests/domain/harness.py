"""Given / when / then over events and commands, for pure-core tests (pure)."""

from __future__ import annotations

from typing import Any

from domain.codec import decode_timed
from domain.commands import NodeCommand
from domain.decider import accept, close_group, fold, initial_state
from domain.events import Event, JournalRecord
from domain.pending import PendingEntry, pending_view
from domain.plugins import DEFAULT_PLUGINS, Plugins
from domain.read_models import (
    JobView,
    NodeView,
    QueueView,
    job_ids,
    job_view,
    node_view,
    queue_view,
)
from domain.reasons import Reason, ReasonKind
from domain.simulation import Simulator
from domain.state import Job, State


def event(kind: str, **fields: Any) -> Event:
    """An event from its wire form, validated exactly as the scheduler validates input."""
    import orjson

    _, parsed = decode_timed(orjson.dumps({"type": kind, "ts": 0, **fields}))
    return parsed


def queue(name: str, gpu_quota: float = 0, gpu_limit: float = -1, **fields: Any) -> Event:
    resources = fields.pop("resources", {"gpu": {"quota": gpu_quota, "limit": gpu_limit}})
    return event("QueueConfigured", queue=name, resources=resources, **fields)


def node(name: str, gpu: float = 8, cpu: int = 64000, memory: int = 512000, **fields: Any) -> Event:
    return event(
        "NodeHeartbeat", node=name, capacity={"gpu": gpu, "cpu": cpu, "memory": memory}, **fields
    )


def job(name: str, queue_name: str, gpu: float = 1, tasks: int = 1, **fields: Any) -> Event:
    resources = fields.pop("resources", {"gpu": gpu})
    return event(
        "JobSubmitted", job=name, queue=queue_name, tasks=tasks, resources=resources, **fields
    )


class Cluster:
    """A live core under test: `given` events at a time, `when` more, `then` look at commands.

    Each call to `at(ts, ...)` is one group: its events are folded, then its cycle runs.
    Agents are explicit: tests send JobStarted / JobPreempted / JobFinished themselves, or
    call `agents_obey()` to answer every command of the last group as an agent would.
    """

    def __init__(self, plugins: Plugins = DEFAULT_PLUGINS) -> None:
        self.plugins = plugins
        self.state: State = initial_state()
        self.seq = 0
        self.ts = 0
        self.commands: list[NodeCommand] = []  # everything emitted so far
        self.last: list[NodeCommand] = []  # emitted by the last group
        self.rejections: list[tuple[Event, str]] = []

    def at(self, ts: int, *events: Event) -> list[NodeCommand]:
        assert ts >= self.ts, "time does not run backwards"
        self.ts = ts
        emitted: list[NodeCommand] = []
        for item in events:
            # Ticks and NodesAlive come from the sequencer itself, so they skip admission.
            reason = (
                None
                if item.type in ("Tick", "NodesAlive")
                else accept(self.state, item, tuple(self.plugins.queue_policies))
            )
            if reason is not None:
                self.rejections.append((item, reason))
                continue
            self.seq += 1
            record = JournalRecord(seq=self.seq, ts=ts, event=item)
            self.state, commands = fold(self.state, record, self.plugins)
            emitted += commands
        self.state, commands = close_group(self.state, self.plugins)
        emitted += commands
        self.last = emitted
        self.commands += emitted
        return emitted

    def given(self, ts: int, *events: Event) -> list[NodeCommand]:
        """History: the events are folded and their cycle runs; what it emitted is returned
        (for setting up what follows) and kept in `commands`, but `last`, what the checks
        look at, is left to `when`."""
        emitted = self.at(ts, *events)
        self.last = []
        return emitted

    def when(self, ts: int, *events: Event) -> list[NodeCommand]:
        """The group under test: its commands are `last`."""
        return self.at(ts, *events)

    # -- then: commands, structured reasons, views -----------------------------------------

    def reason(self, job_id: str) -> Reason:
        """Why the pending job waits, as the pending view gives it."""
        queue_id = self.state.jobs[job_id].queue
        for entry in pending_view(self.state, queue_id, self.ts, self.plugins):
            if entry.job == job_id:
                return entry.reason
        raise AssertionError(f"{job_id} is not pending")

    def why(self, job_id: str) -> tuple[ReasonKind, dict[str, object]]:
        """The pending job's reason kind and facts."""
        found = self.reason(job_id)
        return found.kind, dict(found.facts)

    def pending(self, queue_id: str) -> list[PendingEntry]:
        return pending_view(self.state, queue_id, self.ts, self.plugins)

    def job_view(self, job_id: str) -> JobView:
        found = job_view(self.state, job_id)
        assert found is not None, f"no job {job_id}"
        return found

    def queue_view(self, queue_id: str) -> QueueView:
        found = queue_view(self.state, queue_id)
        assert found is not None, f"no queue {queue_id}"
        return found

    def node_view(self, node_id: str) -> NodeView:
        found = node_view(self.state, node_id)
        assert found is not None, f"no node {node_id}"
        return found

    def queue_ids(self) -> list[str]:
        return sorted(self.state.queues)

    def job_ids(self) -> list[str]:
        """Jobs not yet ended, sorted."""
        return job_ids(self.state)

    def agents_obey(self, ts: int | None = None) -> list[NodeCommand]:
        """Answers the last group's commands (JobStarted / JobPreempted) at `ts`."""
        answers: list[Event] = []
        for command in self.last:
            kind = "JobStarted" if command.type == "Dispatch" else "JobPreempted"
            answers.append(event(kind, job=command.job, node=command.node, attempt=command.attempt))
        return self.at(self.ts if ts is None else ts, *answers)

    def finish(self, ts: int, job_id: str, outcome: str = "succeeded") -> list[NodeCommand]:
        job_state = self.state.jobs[job_id]
        reports = [
            event(
                "JobFinished", job=job_id, node=node_id, attempt=job_state.attempt, outcome=outcome
            )
            for node_id in sorted(job_state.placements)
        ]
        return self.at(ts, *reports)

    def job(self, job_id: str) -> Job:
        return self.state.jobs[job_id]

    def dispatched(self, commands: list[NodeCommand] | None = None) -> list[str]:
        """Job ids dispatched by `commands` (default: the last group), in emission order."""
        return [
            c.job for c in (self.last if commands is None else commands) if c.type == "Dispatch"
        ]

    def preempted(self, commands: list[NodeCommand] | None = None) -> list[str]:
        return [c.job for c in (self.last if commands is None else commands) if c.type == "Preempt"]


def simulate(*lines: dict[str, Any]) -> list[dict[str, Any]]:
    """Runs the offline simulator over wire dicts; returns its output dicts."""
    import orjson

    return list(Simulator().run(orjson.dumps(line) for line in lines))
