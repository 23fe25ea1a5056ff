"""Consolidation (Run:AI): move running jobs between nodes so a fragmented job fits (pure).

A resolver, tried for a job that cannot be placed at any size: when the free capacity of the
nodes it may use would hold it in total but no set of nodes does, preemptible unattended jobs
are moved (Dispatch elsewhere, then Preempt where they ran, both reason `consolidation`) if,
and only if, that makes the job fit. Each move is planned on capacity that is free now, never
on capacity that only frees once another moved job stops, so every moved job has its new
place before anything stops; the freed room is then held for the job.
"""

from __future__ import annotations

from dataclasses import dataclass

from domain.actions.landing import Landing
from domain.actions.lifting import some_node_could_grow
from domain.commands import NodeCommand
from domain.cycle.framework import Cycle, Outcome
from domain.cycle.room import Room
from domain.entities import NO_JOBS
from domain.nodes import dispatch_command
from domain.placement import Plan
from domain.quota_checks import admission_breach
from domain.resources import ZERO, Resources
from domain.state import Job, JobStatus, State

# A bound on the work one blocked job may cause in one cycle: moves tried, and moves made.
MAX_TRIES = 256
MAX_MOVES = 32
FAILED_PLANS_MAX = 1024  # job shapes whose failed plan is remembered (State.failed_plans)
Stamp = tuple[int, int, int]  # State.allocation_stamp()


@dataclass
class Move:
    job: Job
    plan: Plan  # where it goes


def movable(job: Job, by: Job) -> bool:
    """Unattended, preemptible, running and not already stopping anywhere."""
    return (
        job.id != by.id
        and job.preemptible
        and not job.interactive
        and job.status is JobStatus.RUNNING
        and not job.stopping
        and bool(job.placements)
    )


def free_room(state: State, job: Job) -> Resources:
    """Free capacity of the live nodes the job may use."""
    if not job.node_selector:
        return state.node_index.free_total
    return state.node_index.free_matching(job.node_selector, state.nodes)


def within_fair_share(state: State, job: Job, request: Resources) -> bool:
    """Whether the job's queue (its own jobs' slot) stays within its fair share with the job."""
    state.update_fair_shares()
    queue = state.queues[job.queue]
    used = (queue.allocated + request).as_tuple()
    for asked, total, share in zip(request.as_tuple(), used, queue.own_fair_share, strict=True):
        if asked > 0 and total > share + 1e-6:
            return False
    return True


def consolidate(cycle: Cycle, job: Job) -> Outcome | None:
    """Moves jobs to make the whole job fit, or changes nothing and returns None."""
    state = cycle.state
    if not state.cluster.consolidation or job.awaiting:
        return None
    tasks = job.tasks
    request = job.per_task * tasks
    if not request.fits_in(free_room(state, job)):
        return None  # not even the free room of the nodes it may use would hold it
    if admission_breach(state, job, tasks) is not None:
        return None  # quota or limit, not fragmentation, keeps it out
    if not within_fair_share(state, job, request):
        return None  # moving others' work for a queue beyond its share only invites a reclaim
    unallocated = state.capacity
    for top in state.top_level_queues():
        unallocated = unallocated - state.queues[top].subtree_allocated
    if not request.fits_in(unallocated):
        return None  # nor the capacity no queue is allocated
    if _known_to_fail(cycle, job):
        return None
    found = plan_moves(cycle, job, tasks)
    if found is None:
        _remember_failure(cycle, job)
        return None
    moves, plan = found
    carry_out(cycle, job, moves, plan)
    return Outcome.PREEMPTING


def _known_to_fail(cycle: Cycle, job: Job) -> bool:
    """Whether a plan for a look-alike found nothing on the same allocations. A plan reads of
    the job only its shape, and of the state only nodes, who runs where, holds and the
    configuration, all of which the allocation stamp covers: it would find nothing again,
    in this cycle or a later one."""
    stamp = _stamp(cycle)
    return stamp is not None and cycle.state.failed_plans.get(job.shape(priority=False)) == stamp


def _remember_failure(cycle: Cycle, job: Job) -> None:
    stamp = _stamp(cycle)  # a plan rolls back all it tried: the stamp is the one it began at
    if stamp is not None:
        _remember(cycle.state, job.shape(priority=False), stamp)


def _remember(state: State, key: tuple[object, ...], stamp: Stamp) -> None:
    failed = state.failed_plans
    if len(failed) >= FAILED_PLANS_MAX:
        failed.clear()
    failed[key] = stamp


def _room_key(
    cycle: Cycle, job: Job, tasks: int, avoid: frozenset[str]
) -> tuple[tuple[object, ...], Stamp] | None:
    """What making room for `tasks` of a pending job reads of it (its request and selector,
    not its queue: that is read only by the job's own fit once the room is made), with the
    stamp a plan is remembered at. None inside a checkpoint (see `_stamp`), or for a job
    that runs somewhere already (it would be no resident of its own plan)."""
    stamp = _stamp(cycle)
    if stamp is None or job.placements:
        return None
    return ("room", job.per_task, tasks, job.node_selector, avoid), stamp


def _stamp(cycle: Cycle) -> Stamp | None:
    """What a failed plan is remembered at: the state's allocation stamp, or None inside a
    checkpoint (a tentative state's stamp comes back once it is rolled back)."""
    return None if cycle.lasting_changes() is None else cycle.state.allocation_stamp()


def plan_moves(
    cycle: Cycle, job: Job, tasks: int, avoid: frozenset[str] = frozenset()
) -> tuple[list[Move], Plan] | None:
    """Greedy: empty the nodes with the most free room first, moving the smallest jobs off
    them onto the fullest other nodes that fit (binpack), keeping a move only if it raises how
    many of the job's tasks fit. Everything is tried in statements and rolled back. Nothing
    lands on `avoid` (nodes whose room only frees once preempted jobs stop).

    Until the room is made, a plan reads of the job only its request, task count and
    selector: moves that made too little room are remembered under those (`_room_key`) at
    the allocation stamp, so a job of another queue, kind or priority asking the same is
    not planned for again while nothing changed (see `_known_to_fail`)."""
    state = cycle.state
    statement = cycle.statement
    shared = _room_key(cycle, job, tasks, avoid)
    if shared is not None and state.failed_plans.get(shared[0]) == shared[1]:
        return None  # a look-alike's moves made no room for all its tasks (in any queue)
    room = Room(state, statement, job)
    landing = Landing(state)
    everything = statement.checkpoint()
    moves: list[Move] = []
    # Nodes that nothing may land on: where the job will go and where moved jobs still run.
    locked: set[str] = set(avoid)
    moved: set[str] = set()
    # Only live nodes the job may use that could hold a task once emptied are worth
    # emptying, those with the most free GPU first (Node.free.gpu, as the index files it).
    # The order is copied before any move (a move refiles nodes); each node is read only
    # when the plan comes to it, and most plans stop long before the end.
    nodes, per_task = state.nodes, job.per_task
    targets = (
        (
            target
            for _, target in state.node_index.most_free_gpu_first()
            if room.usable(target) and per_task.fits_in(nodes[target].capacity)
        )
        if some_node_could_grow(state, job, landing)  # else every resident would be passed over
        else iter(())
    )
    tries = 0
    plan: Plan | None = None
    jobs = state.jobs
    moving: dict[str, Resources] = {}  # per limited queue, what the moves so far run twice
    # Residents whose move cannot help, until a move is kept (a move tried and rolled back
    # restores every node and the room's counts exactly).
    in_vain: set[str] = set()
    for target in targets:
        if room.total >= tasks or tries >= MAX_TRIES or len(moves) >= MAX_MOVES:
            break
        # Only the resident's old nodes can gain room (its new ones only lose some): when
        # none of them could hold one more task once it leaves, or it could go nowhere at
        # all, the move cannot help. When that holds for every resident, each is tried in
        # vain and nothing changes: the tries are counted as those steps count them.
        residents: list[Job] = []
        could_grow = False
        for resident_id in state.nodes[target].jobs:
            resident = jobs[resident_id]
            if resident_id not in moved and movable(resident, job):
                residents.append(resident)
                if could_grow or resident_id in in_vain:
                    continue
                if room.could_grow_lifting(resident) and landing.could_land(
                    resident, resident.placed_tasks
                ):
                    could_grow = True
                else:
                    in_vain.add(resident_id)  # a gang is a resident of each of its nodes
        if not could_grow:
            tries = min(tries + len(residents), MAX_TRIES)
            continue
        residents.sort(key=lambda r: (r.per_task.gpu * r.placed_tasks, r.order, r.id))
        for resident in residents:
            if room.total >= tasks or tries >= MAX_TRIES or len(moves) >= MAX_MOVES:
                break
            tries += 1
            if resident.id in in_vain:
                continue
            before = room.total
            old = dict(resident.placements)
            if not room.could_grow_lifting(resident):
                continue
            if not _limits_hold_while_moving(state, resident, moving):
                continue  # its queue would pass a limit while it runs in both places
            # Where the resident could go is found before it is lifted: lifting it frees room
            # only on its own nodes, which are excluded, so the plan is the same and a
            # resident with nowhere to go costs no tentative change.
            landed = landing.place_off(resident, target, locked, room)
            if landed is None or room.most_gained_leaving(resident) + landed[1] <= 0:
                continue  # nowhere to go, or the move cannot raise the room (not tried)
            new = landed[0]
            trial = statement.checkpoint()
            for node_id, placed in sorted(old.items()):
                statement.unplace(resident, node_id, placed)
            for node_id in sorted(new):
                statement.place(resident, node_id, new[node_id])
            for node_id in sorted(set(old) | set(new)):
                room.recount(node_id)
            if room.total > before:
                statement.accept(trial)
                landing.forget()
                in_vain.clear()
                moves.append(Move(resident, new))
                _note_moving(state, resident, moving)
                moved.add(resident.id)
                locked |= set(old) | {target}
                continue
            statement.rollback(trial)
            for node_id in sorted(set(old) | set(new)):
                room.recount(node_id)
    if room.total >= tasks:
        plan = cycle.fit(job, tasks).plan
    elif shared is not None:
        _remember(state, *shared)
    statement.rollback(everything)
    if plan is None or not moves:
        return None
    # Only the moves whose old nodes the job actually uses are needed.
    used = set(plan)
    needed = [move for move in moves if used & set(move.job.placements)]
    if len(needed) < len(moves):
        return _without_unneeded(cycle, job, tasks, needed)
    return moves, plan


def _limits_hold_while_moving(state: State, resident: Job, moving: dict[str, Resources]) -> bool:
    """Whether every limit on the resident's path holds while it runs twice: a move dispatches
    it at its new place before its old tasks stop, and both count until the agent reports the
    stop (as do the moves already planned). A hard limit is never passed, not even then."""
    path = state.limited_path(resident.queue)
    if not path:
        return True
    twice = resident.allocation
    for queue in path:
        during = queue.subtree_allocated + moving.get(queue.id, ZERO) + twice
        if queue.quota.limit_breach(during) is not None:
            return False
    return True


def _note_moving(state: State, resident: Job, moving: dict[str, Resources]) -> None:
    for queue in state.limited_path(resident.queue):
        moving[queue.id] = moving.get(queue.id, ZERO) + resident.allocation


def _without_unneeded(
    cycle: Cycle, job: Job, tasks: int, moves: list[Move]
) -> tuple[list[Move], Plan] | None:
    """Re-checks a smaller set of moves (the job's plan may then differ); None if it fails."""
    statement = cycle.statement
    checkpoint = statement.checkpoint()
    for move in moves:
        for node_id, placed in sorted(move.job.placements.items()):
            statement.unplace(move.job, node_id, placed)
    for move in moves:
        for node_id in sorted(move.plan):
            statement.place(move.job, node_id, move.plan[node_id])
    plan = cycle.fit(job, tasks).plan if moves else None
    statement.rollback(checkpoint)
    if plan is None:
        return None
    return moves, plan


def carry_out(cycle: Cycle, job: Job, moves: list[Move], plan: Plan) -> None:
    """Dispatches every moved job at its new place first, then preempts its old tasks, and
    holds the room for the job.

    A move starts a new attempt of the moved job: its new tasks are attempt n+1 while the old
    ones stop as attempt n, so JobStarted of the new place and JobPreempted of the old one
    (matched against the Stopping entry's attempt) can never be confused, and any late
    report of the old attempt changes nothing but the release of its own tasks."""
    statement = cycle.statement
    dispatches: list[NodeCommand] = []
    preempts: list[NodeCommand] = []
    for move in moves:
        moved = move.job
        preempts += cycle.stop(moved, "consolidation", by=job.id, emit=False)
        statement.set(moved, "attempt", moved.attempt + 1)
        statement.set(moved, "status", JobStatus.RUNNING)
        statement.set(moved, "started_ts", None)
        statement.set(moved, "started_nodes", NO_JOBS)
        for node_id in sorted(move.plan):
            tasks = move.plan[node_id]
            devices = statement.place(moved, node_id, tasks)
            dispatches.append(
                dispatch_command(
                    cycle.state,
                    moved,
                    node_id,
                    tasks,
                    devices,
                    cycle.seq,
                    cycle.ts,
                    "consolidation",
                )
            )
        statement.set(job, "awaiting", job.awaiting | {moved.id})
    statement.emit(dispatches)
    statement.emit(preempts)
    for node_id in sorted(plan):
        statement.hold(job, node_id, job.per_task * plan[node_id])
