"""Journal acceptance: whether an input event is accepted, given the state; a refusal is a reason (pure)."""

from __future__ import annotations

from collections.abc import Callable, Collection
from functools import singledispatch

from domain.devices import WHOLE
from domain.events import (
    ClusterConfigured,
    Event,
    JobCancelled,
    JobFinished,
    JobPreempted,
    JobStarted,
    JobSubmitted,
    NodeHeartbeat,
    NodesAlive,
    QueueConfigured,
    QueueDeleted,
    Tick,
)
from domain.nodes import heartbeat_refusal
from domain.plugins import QUEUE_POLICIES
from domain.quota import UNLIMITED, QuotaSpec
from domain.resources import RESOURCE_NAMES
from domain.state import State

DEFAULT_POLICY_KINDS = tuple(QUEUE_POLICIES)


def accept(
    state: State, event: Event, policy_kinds: Collection[str] = DEFAULT_POLICY_KINDS
) -> str | None:
    """None when the event is accepted into the journal, else the reason it is refused.

    `policy_kinds` are the registered queue policies (the codec has checked them already;
    this keeps an unregistered one out of the journal whatever built the event)."""
    if isinstance(event, QueueConfigured) and event.policy.kind not in policy_kinds:
        known = ", ".join(policy_kinds)
        return (
            f"policy.kind: {event.policy.kind!r} is not a registered queue policy (known: {known})"
        )
    kind = type(event)
    check = _CHECKS.get(kind)
    if check is None:
        check = _CHECKS[kind] = _accept.dispatch(kind)  # once per type (see domain/evolve.py)
    return check(event, state)


_CHECKS: dict[type, Callable[[Event, State], str | None]] = {}


@singledispatch
def _accept(event: Event, state: State) -> str | None:
    return None


@_accept.register
def _(event: Tick, state: State) -> str | None:
    return "Tick records are appended by the scheduler only"


@_accept.register
def _(event: NodesAlive, state: State) -> str | None:
    return "NodesAlive records are appended by the scheduler only"


@_accept.register
def _(event: QueueConfigured, state: State) -> str | None:
    if event.parent is not None:
        if event.parent not in state.queues:
            return f"parent queue {event.parent!r} does not exist; configure it first"
        ancestor: str | None = event.parent
        while ancestor is not None:
            if ancestor == event.queue:
                return f"parent {event.parent!r} is below queue {event.queue!r}: that would make a cycle"
            ancestor = state.queues[ancestor].parent
    spec = QuotaSpec.from_config(event)
    if event.parent is not None:
        parent = state.queues[event.parent]
        siblings = [state.queues[c] for c in parent.children if c != event.queue]
        reason = _children_fit(
            parent.id, parent.quota, [(event.queue, spec)] + [(s.id, s.quota) for s in siblings]
        )
        if reason:
            return reason
    existing = state.queues.get(event.queue)
    if existing is not None and existing.children:
        children = [(c, state.queues[c].quota) for c in existing.children]
        reason = _children_fit(event.queue, spec, children)
        if reason:
            return reason
    return None


def _children_fit(
    parent: str, parent_spec: QuotaSpec, children: list[tuple[str, QuotaSpec]]
) -> str | None:
    """A child's quota may not exceed what its parent can guarantee."""
    for index, name in enumerate(RESOURCE_NAMES):
        guaranteed = parent_spec.quota[index]
        if guaranteed == UNLIMITED:
            continue
        parts = sorted((child, spec.quota[index]) for child, spec in children)
        if any(amount == UNLIMITED for _, amount in parts):
            return f"{name}: a child of {parent!r} has unlimited quota but {parent!r} guarantees only {_show(index, guaranteed)}"
        total = sum(amount for _, amount in parts)
        if total > guaranteed:
            listed = " + ".join(
                f"{child} {_show(index, amount)}" for child, amount in parts if amount
            )
            return (
                f"{name}: children's quotas ({listed} = {_show(index, total)}) exceed parent "
                f"{parent!r} quota {_show(index, guaranteed)}"
            )
    return None


def _show(index: int, amount: int) -> str:
    if index == 0:
        whole, rest = divmod(amount, 1000)
        return str(whole) if rest == 0 else str(amount / 1000)
    return str(amount)


@_accept.register
def _(event: QueueDeleted, state: State) -> str | None:
    queue = state.queues.get(event.queue)
    if queue is None:
        return f"queue {event.queue!r} does not exist"
    if queue.children:
        return f"queue {event.queue!r} still has child queues: {', '.join(queue.children)}; delete them first"
    if queue.jobs:
        return f"queue {event.queue!r} still has {queue.jobs} job(s) pending or running; cancel them or wait"
    return None


@_accept.register
def _(event: ClusterConfigured, state: State) -> str | None:
    return None


@_accept.register
def _(event: JobSubmitted, state: State) -> str | None:
    if event.queue not in state.queues:
        return f"queue {event.queue!r} does not exist"
    if event.job in state.jobs or event.job in state.ended_jobs:
        return f"job {event.job!r} already exists; job ids are unique"
    gpu = event.resources.to_resources().gpu
    if gpu > WHOLE and gpu % WHOLE:
        # A task shares one device (a fraction below 1) or takes whole devices, as in KAI
        # and Run:AI: there is no device to put the part beyond a whole number on.
        return (
            f"resources.gpu: {event.resources.gpu} per task: ask for a fraction of one device "
            f"(below 1) or whole devices ({gpu // WHOLE} or {gpu // WHOLE + 1})"
        )
    for dep in event.after_ok or ():
        # A job may wait only for jobs submitted before it, so no dependency cycle can form.
        ended = state.ended_jobs.get(dep)
        if dep not in state.jobs and ended is None:
            return (
                f"after_ok: job {dep!r} does not exist; submit it first "
                "(a job waits only for jobs submitted before it, so no cycle can form)"
            )
        if ended is not None and ended.value != "finished":
            return (
                f"after_ok: job {dep!r} has already ended {ended.value}; this job could never start"
            )
    return None


@_accept.register
def _(event: JobCancelled, state: State) -> str | None:
    if event.job in state.ended_jobs:
        return f"job {event.job!r} has already ended ({state.ended_jobs[event.job].value})"
    if event.job not in state.jobs:
        return f"job {event.job!r} does not exist"
    return None


@_accept.register
def _(event: NodeHeartbeat, state: State) -> str | None:
    return heartbeat_refusal(state, event)


def _node_report(job: str, node: str, state: State) -> str | None:
    if job not in state.jobs and job not in state.ended_jobs:
        return f"job {job!r} does not exist"
    if node not in state.nodes:
        return f"node {node!r} has never sent a heartbeat"
    return None


@_accept.register
def _(event: JobStarted, state: State) -> str | None:
    return _node_report(event.job, event.node, state)


@_accept.register
def _(event: JobFinished, state: State) -> str | None:
    return _node_report(event.job, event.node, state)


@_accept.register
def _(event: JobPreempted, state: State) -> str | None:
    return _node_report(event.job, event.node, state)
