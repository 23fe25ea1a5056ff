"""Invariants of GPU devices over any state, for the property tests (pure)."""

from __future__ import annotations

from domain.devices import WHOLE, share
from domain.state import State


def check_devices(state: State) -> None:
    """Every task's devices are booked on its node exactly once; no device holds more than
    its capacity; a whole-GPU task's devices are its alone; room held for preemptors never
    exceeds what the devices will have once stopping tasks are gone."""
    for node in state.nodes.values():
        used: dict[int, int] = {}
        stopping: dict[int, int] = {}
        whole_owner: dict[int, str] = {}
        sharers: dict[int, set[str]] = {}
        for job_id in sorted(node.jobs):
            job = state.jobs[job_id]
            gpu = job.per_task.gpu
            stop = job.stopping.get(node.id)
            placed = job.devices.get(node.id, ())
            stopped = stop.devices if stop else ()
            assert len(placed) == job.placements.get(node.id, 0), (job_id, node.id)
            assert len(placed) + len(stopped) == node.jobs[job_id], (job_id, node.id)
            for task, target in [(t, used) for t in placed + stopped] + [
                (t, stopping) for t in stopped
            ]:
                if gpu == 0:
                    assert task == (), (job_id, task)
                elif gpu < WHOLE:
                    assert len(task) == 1, (job_id, task)
                else:
                    assert len(task) == -(-gpu // WHOLE) == len(set(task)), (job_id, task)
                for index in task:
                    target[index] = target.get(index, 0) + share(gpu)
            for task in placed + stopped:
                for index in task:
                    if gpu >= WHOLE:
                        assert index not in whole_owner, f"{node.id} device {index} double-booked"
                        whole_owner[index] = job_id
                    else:
                        sharers.setdefault(index, set()).add(job_id)
        assert used == node.gpus.used, (node.id, used, node.gpus.used)
        assert stopping == node.gpus.stopping, (node.id, stopping, node.gpus.stopping)
        for index in whole_owner:
            assert index not in sharers, f"{node.id}: whole task on shared device {index}"
        held: dict[int, int] = {}
        for job in state.jobs.values():
            for index, amount in job.held_devices.get(node.id, {}).items():
                held[index] = held.get(index, 0) + amount
        assert {i: a for i, a in held.items() if a} == node.gpus.held, node.id
        if node.allocated.fits_in(node.capacity):  # a node whose capacity shrank may overbook
            for index, amount in used.items():
                assert amount <= node.gpus.layout.capacity(index), f"{node.id} device {index}"
            for index in sorted(set(used) | set(held)):
                after_stops = used.get(index, 0) - stopping.get(index, 0) + held.get(index, 0)
                assert after_stops <= node.gpus.layout.capacity(index), (node.id, index)
    for job in state.jobs.values():
        assert set(job.devices) == set(job.placements), job.id
