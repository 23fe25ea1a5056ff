"""Allocate's walk over a queue whose jobs were all found blocked: only the first job of each shape is stepped again (pure).

Allocate steps every pending job of a queue whose policy skips blocked jobs (round robin).
In a long backlog most of those steps are look-alikes of a job already tried in the cycle:
the step gives the job its shape's verdict as its reason and skips it. This module walks
such a queue without taking the steps that would change nothing:

- A walk from the head to the end of the queue with no lasting change, that left every job
  blocked with its shape's verdict as its reason, is remembered as settled: the first job of
  each shape with its look-alikes, and each job always tried in full (one holding room,
  awaiting victims or displaced), in walk order (`_recorded`).
- While no job joins or leaves the queue (`PendingIndex.version`) and a statement changed
  none of its pending jobs but those first ones (`PendingIndex.touched`), the next walk
  steps only the first jobs (`_replayed`). If each is blocked again, or for one tried in
  full changes nothing lasting, every look-alike's step would give it its first job's
  verdict and skip it: where that verdict is another reason than the one the look-alikes
  hold, they are given it, and no look-alike is stepped.
- If a first job's step changes something lasting (it is placed, or starts a preemption), or
  leaves it not blocked, the look-alikes of the changed shapes are given their new reason,
  and every job after that first job is walked in full, as before.

The policy must skip every blocked job and order jobs without reading time
(`QueuePolicy.walk_settles`). The memo is derived: kept with the configuration (which it
reads: whether priority is part of a shape), never saved. See docs/policies.md, "Settled
walks".
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import cast

from domain.cycle.framework import Cycle, Outcome, QueuePolicy
from domain.cycle.ordering import pending_in_order
from domain.entities import ShapeKey
from domain.reasons import Reason
from domain.state import Job, Queue

SETTLED = "settled_walks"  # configuration memo: queue id -> SettledWalk
# A queue with fewer pending jobs is walked as it is: the few steps a settled walk would
# save cost less than noting what it needs (measured on replay's journal, stop 35).
SETTLE_FROM = 64


@dataclass(frozen=True, slots=True)
class LookAlikes:
    """A first job of its shape in a settled walk, and the later jobs of its shape; or a
    job always tried in full (`alone`: it holds room, awaits victims or was displaced),
    which is stepped every time and must change nothing lasting."""

    first: Job
    alone: bool
    reason: Reason | None  # what the look-alikes hold: the first job's verdict then
    jobs: tuple[Job, ...]  # its look-alikes (none when alone)


@dataclass(frozen=True, slots=True)
class SettledWalk:
    version: int  # the queue's pending version (who is pending) when the walk was settled
    shapes: tuple[LookAlikes, ...]  # in the walk order of their first jobs
    firsts: frozenset[str]  # the jobs stepped anyway: a change to one of them is allowed


def walk(cycle: Cycle, queue: Queue, policy: QueuePolicy) -> Iterator[Job]:
    """The jobs Allocate steps, in its order: every pending job, or, for a settled queue,
    the first of each shape until one of them no longer settles."""
    order = pending_in_order(queue, policy, cycle.ts)
    if not policy.walk_settles or len(queue.pending) < SETTLE_FROM:
        return order
    pending = queue.pending
    settled = _walks(cycle).pop(queue.id, None)
    touched, pending.touched = pending.touched, None
    if (
        settled is not None
        and settled.version == pending.version
        and touched is not None
        and touched <= settled.firsts
    ):
        return _replayed(cycle, queue, order, settled)
    return _recorded(cycle, queue, order)


def forget_idle(cycle: Cycle, waiting: list[str]) -> None:
    """Drops the settled walks of queues with no pending job: a walk holds its jobs, which
    must go when they end."""
    walks = cast(dict[str, SettledWalk] | None, cycle.state.configuration_memo.get(SETTLED))
    if walks:
        for queue_id in set(walks).difference(waiting):
            del walks[queue_id]
            queue = cycle.state.queues.get(queue_id)
            if queue is not None:
                queue.pending.touched = None


def _walks(cycle: Cycle) -> dict[str, SettledWalk]:
    memo = cycle.state.configuration_memo
    walks = memo.get(SETTLED)
    if walks is None:
        walks = memo[SETTLED] = {}
    return cast(dict[str, SettledWalk], walks)


def _recorded(cycle: Cycle, queue: Queue, order: Iterator[Job]) -> Iterator[Job]:
    """Every job in order; remembers the walk as settled if it is (see above)."""
    statement = cycle.statement
    lasting = statement.lasting
    firsts: list[tuple[Job, ShapeKey | None]] = []  # in walk order
    reasons: dict[ShapeKey, Reason | None] = {}
    jobs: dict[ShapeKey, list[Job]] = {}
    for job in order:
        yield job  # Allocate steps it; the checks below see what the step left
        key = cycle.look_alike_key(job)
        if statement.lasting != lasting:
            yield from order  # not settled: the rest is walked as it is
            return
        if key is None:
            firsts.append((job, None))
        elif key in reasons:
            # A look-alike, stepped at the same lasting changes as its first job: its
            # verdict was its first job's, so it holds that reason if it was given it.
            if reasons[key] is not job.pending_reason or job.blocked_since is None:
                yield from order
                return
            jobs[key].append(job)
        elif _settles(cycle, job, lasting):
            reasons[key] = job.pending_reason
            jobs[key] = []
            firsts.append((job, key))
        else:
            yield from order
            return
    shapes = tuple(
        LookAlikes(first, True, None, ())
        if key is None
        else LookAlikes(first, False, reasons[key], tuple(jobs[key]))
        for first, key in firsts
    )
    _keep(cycle, queue, shapes)


def _keep(cycle: Cycle, queue: Queue, shapes: tuple[LookAlikes, ...]) -> None:
    firsts = frozenset(shape.first.id for shape in shapes)
    _walks(cycle)[queue.id] = SettledWalk(queue.pending.version, shapes, firsts)
    queue.pending.touched = set()


def _replayed(
    cycle: Cycle, queue: Queue, order: Iterator[Job], settled: SettledWalk
) -> Iterator[Job]:
    """The first job of each shape; from the first that does not settle, every job after
    it in the full `order` (lazy: not read until then)."""
    statement = cycle.statement
    lasting = statement.lasting
    changed: list[LookAlikes] = []  # shapes whose verdict is another reason than before
    for shape in settled.shapes:
        first = shape.first
        yield first
        if statement.lasting != lasting or (
            not shape.alone and not _settles(cycle, first, lasting)
        ):
            # The look-alikes before it were stepped (changing nothing lasting); those of
            # the changed shapes get their first job's verdict, as their steps gave them.
            # Those after it get it too, and then are stepped in full, as in any walk.
            for done in changed:
                _give_reason(cycle, done)
            yield from _after(order, first)
            return
        if not shape.alone and first.pending_reason is not shape.reason:
            changed.append(shape)
    for done in changed:
        _give_reason(cycle, done)
    if changed:
        _keep(cycle, queue, tuple(_now(shape) for shape in settled.shapes))
    else:
        _walks(cycle)[queue.id] = settled
        queue.pending.touched = set()


def _now(shape: LookAlikes) -> LookAlikes:
    """The shape with the reason its look-alikes hold now: its first job's."""
    if shape.alone or shape.first.pending_reason is shape.reason:
        return shape
    return replace(shape, reason=shape.first.pending_reason)


def _give_reason(cycle: Cycle, shape: LookAlikes) -> None:
    """Gives the shape's look-alikes the reason its first job now holds, as each one's step
    would have. A look-alike stepped later in the walk gets what its own step gives it
    (another reason, or none once placed), so only the reasons of those not stepped
    matter: the same whichever of them are given it first."""
    first = shape.first
    queue = cycle.state.queues[first.queue]
    cycle.statement.set_view(queue, shape.jobs, "pending_reason", first.pending_reason)


def _settles(cycle: Cycle, job: Job, lasting: int) -> bool:
    """Whether the stepped job, and every look-alike of it stepped later in the walk, is
    blocked for the very reason the job now holds, with nothing lasting changed."""
    if cycle.statement.lasting != lasting or job.blocked_since is None:
        return False
    known = cycle.known_verdict(job)
    return known is not None and known[0] is Outcome.BLOCKED and known[1] is job.pending_reason


def _after(order: Iterator[Job], job: Job) -> Iterator[Job]:
    for walked in order:
        if walked is job:
            break
    return order
