"""Ordering: which queue is served first and in what order a queue's pending jobs are tried (pure)."""

from __future__ import annotations

import heapq
from collections.abc import Iterator
from itertools import chain
from operator import itemgetter

from domain.cycle.framework import QueuePolicy
from domain.fairshare import OWN
from domain.indexes import PendingEntry
from domain.state import Job, Queue, State

QueueKey = tuple[tuple[float, int, str], ...]


def deprivation(allocated: tuple[int, int, int], share: tuple[float, float, float]) -> float:
    """Allocation relative to fair share, by the most used resource (dominant share).

    A queue with no fair share at all (no entitlement now) ranks after every entitled one,
    even while it uses nothing: serving it first would hand it idle capacity that an
    entitled queue then has to reclaim, churn for nothing."""
    if not any(fair > 0 for fair in share):
        return float("inf")
    worst = 0.0
    for used, fair in zip(allocated, share, strict=True):
        if used <= 0:
            continue
        if fair <= 0:
            return float("inf")
        worst = max(worst, used / fair)
    return worst


def queue_key(state: State, queue_id: str) -> QueueKey:
    """Hierarchical order: most deprived top-level queue first, then down its tree; the
    queue's own jobs compete with its children as one more child. Made afresh (an action
    that keys many queues keeps a `QueueKeys`)."""
    return QueueKeys(state).key(queue_id, 0)


class QueueKeys:
    """`queue_key` for one action, each level's entry made once per allocation epoch: a level
    reads only its queue's allocation, fair share and priority, so queues under one parent
    share its entry, and a queue's path is looked up once. Fair shares do not change within
    an action once read (the first key runs any recompute the cycle deferred)."""

    def __init__(self, state: State) -> None:
        self._state = state
        self._epoch = -1
        self._levels: dict[str, tuple[float, int, str]] = {}
        self._paths: dict[str, tuple[Queue, ...]] = {}

    def key(self, queue_id: str, epoch: int) -> QueueKey:
        """`queue_key(state, queue_id)`, with allocations as at the statement's `epoch`."""
        state = self._state
        state.update_fair_shares()
        if epoch != self._epoch:
            self._epoch = epoch
            self._levels.clear()
        path = self._paths.get(queue_id)
        if path is None:
            path = self._paths[queue_id] = tuple(reversed(list(state.ancestors(queue_id))))
        levels = self._levels
        key: list[tuple[float, int, str]] = []
        for queue in path:
            level = levels.get(queue.id)
            if level is None:
                ratio = deprivation(queue.subtree_allocated.as_tuple(), queue.fair_share)
                level = levels[queue.id] = (ratio, -queue.priority, queue.id)
            key.append(level)
        own = path[-1]
        key.append((deprivation(own.allocated.as_tuple(), own.own_fair_share), 0, OWN))
        return tuple(key)


def pending_in_order(queue: Queue, policy: QueuePolicy, now: int) -> Iterator[Job]:
    """The queue's pending jobs in the order they are tried: interactive first, then higher
    effective priority, then submission order (a requeued job keeps its submission order).

    Lazy: a cycle that stops at the head of a long queue looks at little more than the head.
    Each (interactive, priority) list is in submission order and a policy's effective priority
    never rises along it, so a list's keys run from its first job's to its last job's. Lists
    whose key ranges do not overlap simply follow one another (always so without aging); only
    overlapping ones are merged job by job. A list that follows on is walked by C iterators
    over entries that hold their jobs (no Python frame and no table lookup per job: a cycle
    may walk every job of a long skipping queue). Without aging (`QueuePolicy.ages`) each
    list's keys are its own priority, so the lists follow one another in the order of their
    (interactive, priority) alone, and no key is worked out.
    """
    if not policy.ages:
        # The lists sort by (interactive, priority): reversed, interactive and higher first.
        lists = reversed(queue.pending.lists())
        return chain.from_iterable(map(_JOB, entries) for _, entries in lists)
    return chain.from_iterable(_groups(queue, policy, now))


def _groups(queue: Queue, policy: QueuePolicy, now: int) -> Iterator[Iterator[Job]]:
    """One iterator per run of lists whose key ranges overlap, in the order they are tried."""
    spans: list[tuple[tuple[int, int], tuple[int, int], bool, list[PendingEntry]]] = []
    for (interactive, _priority), entries in queue.pending.lists():
        if entries:
            rank = 0 if interactive else 1
            first = policy.effective_priority(entries[0][2], queue, now)
            last = policy.effective_priority(entries[-1][2], queue, now)
            spans.append(((rank, -first), (rank, -last), interactive, entries))
    spans.sort(key=lambda span: (span[0], span[1]))
    group: list[tuple[bool, list[PendingEntry]]] = []
    group_end = (0, 0)
    for start, end, interactive, entries in spans:
        if group and start > group_end:
            yield _merged(queue, policy, now, group)
            group = []
        group_end = max(group_end, end) if group else end
        group.append((interactive, entries))
    if group:
        yield _merged(queue, policy, now, group)


def _merged(
    queue: Queue,
    policy: QueuePolicy,
    now: int,
    group: list[tuple[bool, list[PendingEntry]]],
) -> Iterator[Job]:
    if len(group) == 1:
        return map(_JOB, group[0][1])
    streams = []
    for interactive, entries in group:

        def keyed(
            entries: list[PendingEntry] = entries, interactive: bool = interactive
        ) -> Iterator[tuple[tuple[int, int, int], str, Job]]:
            for order, job_id, job in entries:
                rank = policy.effective_priority(job, queue, now)
                yield (0 if interactive else 1, -rank, order), job_id, job

        streams.append(keyed())
    return map(_JOB, heapq.merge(*streams))


_JOB = itemgetter(2)  # (order, job id, job) or (key, job id, job): the job
