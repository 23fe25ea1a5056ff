"""The undo of one change to a job on some nodes: what the statement restores on a rollback (pure).

Split from domain/cycle/statement.py, which records one such memento per change while a
checkpoint is open. A rollback restores the state exactly, the order of dicts included.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TypeVar

from domain.state import Job, State

Undo = Callable[[], None]
V = TypeVar("V")


def memento(state: State, job: Job, node_ids: Iterable[str]) -> Undo:
    """Saves everything a change to the job on these nodes may touch, and returns the
    undo that puts it back: the job's placements, holds and devices, the nodes' rooms,
    devices and memos, its queues' aggregates, and the state's sets and counters."""
    placements, stopping, held = dict(job.placements), dict(job.stopping), dict(job.held)
    devices, held_devices = dict(job.devices), dict(job.held_devices)
    nodes = [
        (
            node,
            node.allocated,
            node.held,
            node.stopping,
            dict(node.jobs),
            node.gpus.save(),
            node.copies_memo,
            node.lifting_memo,
        )
        for node in (state.nodes[n] for n in node_ids if n in state.nodes)
    ]
    queues = [
        (
            queue,
            queue.allocated,
            queue.subtree_allocated,
            queue.protected,
            queue.stopping,
            queue.held,
            job.id in queue.running,
        )
        for queue in state.ancestors(job.queue)
    ]
    freed, needs_cycle, version = state.freed, state.needs_cycle, state.node_index.version
    index = state.node_index
    growths, grown = index.growths, [(node[0].id, node[0].id in index.grown) for node in nodes]
    elastic, holder = job.id in state.elastic_placed, job.id in state.holders
    own = state.queues[job.queue]
    stoppable_on = own.stoppable_on
    placed = None if stoppable_on is None else [(n, stoppable_on.get(n)) for n in node_ids]

    def undo() -> None:
        _refill(job.placements, placements)
        _refill(job.stopping, stopping)
        _refill(job.held, held)
        _refill(job.devices, devices)
        _refill(job.held_devices, held_devices)
        for queue, allocated, subtree, protected, stopping_, held_, running in queues:
            queue.allocated, queue.subtree_allocated, queue.protected = (
                allocated,
                subtree,
                protected,
            )
            queue.stopping, queue.held = stopping_, held_
            _member(queue.running, job.id, running)
        if placed is None:
            own.stoppable_on = None  # not known when recorded: counted afresh when next asked
        elif own.stoppable_on is not None:
            for node_id, amount in placed:
                if amount is None:
                    own.stoppable_on.pop(node_id, None)
                else:
                    own.stoppable_on[node_id] = amount
        _member(state.elastic_placed, job.id, elastic)
        _member(state.holders, job.id, holder)
        for node, allocated, node_held, node_stopping, jobs, gpus, copies, lifting in nodes:
            node.allocated, node.held, node.stopping = allocated, node_held, node_stopping
            _refill(node.jobs, jobs)
            node.gpus.restore(gpus)
            state.node_index.update(node)
            node.copies_memo, node.lifting_memo = copies, lifting  # those of the room restored
        state.freed, state.needs_cycle, state.node_index.version = freed, needs_cycle, version
        index.growths = growths  # the room restored grew nowhere (domain/cycle/parked.py)
        for node_id, noted in grown:
            _member(index.grown, node_id, noted)

    return undo


def _refill(target: dict[str, V], saved: dict[str, V]) -> None:
    """Restores a dict's items and their order, keeping the dict itself."""
    if list(target.items()) != list(saved.items()):
        target.clear()
        target.update(saved)


def _member(target: set[str], item: str, present: bool) -> None:
    if present:
        target.add(item)
    else:
        target.discard(item)
