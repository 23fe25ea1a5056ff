"""Job timelines: what happened to each job and why, from journal records and the commands the fold emits (pure)."""

from __future__ import annotations

from typing import Any

from domain.commands import Dispatch, NodeCommand, Preempt
from domain.events import (
    JobCancelled,
    JobFinished,
    JobPreempted,
    JobStarted,
    JobSubmitted,
    JournalRecord,
)
from domain.state import State
from projections.amounts import queue_numbers

Timelines = dict[str, list[dict[str, Any]]]  # job -> entries in journal order


def _entry(timelines: Timelines, job: str, entry: dict[str, Any]) -> None:
    timelines.setdefault(job, []).append(entry)


def record_event(timelines: Timelines, record: JournalRecord) -> None:
    """Adds the journal record's entry to its job's timeline (if it concerns a job)."""
    event = record.event
    base = {"ts": record.ts, "seq": record.seq}
    if isinstance(event, JobSubmitted):
        _entry(
            timelines,
            event.job,
            base
            | {
                "event": "submitted",
                "queue": event.queue,
                "priority": event.priority,
                "tasks": event.tasks,
                "resources": event.resources.to_resources().to_wire(),
                "interactive": event.interactive,
                "preemptible": event.is_preemptible,
            },
        )
    elif isinstance(event, JobStarted):
        _entry(
            timelines,
            event.job,
            base | {"event": "started", "node": event.node, "attempt": event.attempt},
        )
    elif isinstance(event, JobFinished):
        _entry(
            timelines,
            event.job,
            base
            | {
                "event": "finished",
                "node": event.node,
                "attempt": event.attempt,
                "outcome": event.outcome,
            }
            | _exit(event),
        )
    elif isinstance(event, JobPreempted):
        _entry(
            timelines,
            event.job,
            base | {"event": "stopped", "node": event.node, "attempt": event.attempt},
        )
    elif isinstance(event, JobCancelled):
        _entry(timelines, event.job, base | {"event": "cancel_requested"})


def record_command(
    timelines: Timelines, preemptions: dict[str, int], state: State, command: NodeCommand
) -> None:
    """Adds a command's entries (the preemptor's too) and counts preemptions per victim queue."""
    base = {
        "ts": command.ts,
        "seq": command.seq,
        "node": command.node,
        "attempt": command.attempt,
    }
    if isinstance(command, Dispatch):
        _entry(
            timelines,
            command.job,
            base | {"event": "dispatched", "tasks": command.tasks, "reason": command.reason},
        )
    elif isinstance(command, Preempt):
        victim = state.jobs.get(command.job)
        victim_queue = victim.queue if victim is not None else queue_of(timelines, command.job)
        context = preemption_context(state, victim_queue, command.by)
        _entry(
            timelines,
            command.job,
            base
            | {
                "event": "preempted",
                "tasks": command.tasks,
                "reason": command.reason,
                "by": command.by,
                "context": context,
            },
        )
        if command.by is not None:
            _entry(
                timelines,
                command.by,
                {
                    "ts": command.ts,
                    "seq": command.seq,
                    "event": "preempting",
                    "victim": command.job,
                    "node": command.node,
                    "reason": command.reason,
                },
            )
        if victim_queue is not None:
            preemptions[victim_queue] = preemptions.get(victim_queue, 0) + 1


def preemption_context(state: State, victim_queue: str | None, by: str | None) -> dict[str, Any]:
    """The numbers a person checks a preemption against, as they were in that cycle."""
    context: dict[str, Any] = {}
    if victim_queue is not None and victim_queue in state.queues:
        context["victim_queue"] = queue_numbers(state.queues[victim_queue])
    preemptor = state.jobs.get(by) if by is not None else None
    if preemptor is not None and preemptor.queue in state.queues:
        queue = state.queues[preemptor.queue]
        context["preemptor_queue"] = queue_numbers(queue)
        context["preemptor_priority"] = preemptor.priority
        context["preemptor_module"] = preemptor.module
        context["preemptor_interactive"] = preemptor.interactive
        rules = queue.preemption.model_dump(mode="json", exclude_defaults=True)
        if rules:
            context["preemptor_queue_rules"] = rules
        if queue.parent is not None and queue.parent in state.queues:
            parent_rules = state.queues[queue.parent].preemption.model_dump(
                mode="json", exclude_defaults=True
            )
            if parent_rules:
                context["parent_rules"] = {queue.parent: parent_rules}
    return context


def queue_of(timelines: Timelines, job_id: str) -> str | None:
    """The queue a job was submitted to, as its timeline says (it may have ended long ago)."""
    for entry in timelines.get(job_id, ()):
        if entry["event"] == "submitted":
            return str(entry["queue"])
    return None


def _exit(event: JobFinished) -> dict[str, Any]:
    """The exit code and its reason (a signal), when the agent reported them (--exec)."""
    found = {key: getattr(event, key, None) for key in ("exit_code", "reason")}
    return {key: value for key, value in found.items() if value is not None}
