"""Victim steps and the room they free, counted per node (pure).

A victim is stopped in steps (one halving of an elastic job, or all that is left of it);
`Room` counts how many tasks of a blocked job the usable nodes could hold as steps are
taken and given back through the cycle's statement. See docs/preemption.md.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from domain.cycle import release_totals
from domain.cycle.release_totals import Freeable, capped_per_node
from domain.cycle.statement import Statement
from domain.devices import Assignment, usage
from domain.resources import MANY_COPIES, ZERO, Resources
from domain.state import Job, State

_NO_NEED = -(1 << 62)  # a resource the task does not ask for: any freeing will do


@dataclass(frozen=True)
class VictimStep:
    """Tasks of one victim to stop: one halving of an elastic job (`shrink`, never below
    min_tasks), or all that is left of it. A victim's steps are always taken in order."""

    victim: Job
    nodes: tuple[tuple[str, int], ...]
    shrink: bool
    index: int = 0  # position among the victim's steps


def victim_steps(victim: Job) -> list[VictimStep]:
    """A gang is stopped whole; an elastic job may first give up tasks by halves down to
    min_tasks (as Run:AI shrinks), each time from the nodes where it has the fewest tasks so
    that what keeps running stays together."""
    if not victim.is_elastic:  # one step: the search lists every running victim's steps
        return [VictimStep(victim, tuple(sorted(victim.placements.items())), False, 0)]
    placed = dict(victim.placements)
    size = sum(placed.values())
    steps: list[VictimStep] = []
    while victim.is_elastic and size > victim.min_tasks:
        extra = size - max(victim.min_tasks, size // 2)
        size -= extra
        taken: dict[str, int] = {}
        for node_id, tasks in sorted(placed.items(), key=lambda item: (item[1], item[0])):
            take = min(tasks, extra)
            extra -= take
            if take:
                taken[node_id] = take
                placed[node_id] = tasks - take
            if extra == 0:
                break
        placed = {node_id: tasks for node_id, tasks in placed.items() if tasks}
        steps.append(VictimStep(victim, tuple(sorted(taken.items())), True, len(steps)))
    steps.append(VictimStep(victim, tuple(sorted(placed.items())), False, len(steps)))
    return steps


def victims_of(steps: list[VictimStep]) -> list[Job]:
    seen: dict[str, Job] = {}
    for step in steps:
        seen.setdefault(step.victim.id, step.victim)
    return list(seen.values())


def freeing_needed(
    per_task: Resources, free: tuple[int, int, int], copies: int
) -> tuple[int, int, int] | None:
    """What must be freed on a usable node with `free` room that holds `copies` tasks of
    `per_task`, per resource, before it could hold one more (counted in resources alone);
    None when nothing may. `max_copies_in(free + freed) > copies` holds when, for every
    resource the task asks, free + freed reaches (copies + 1) times the ask."""
    if per_task.is_zero():  # asks nothing: "a large number" of copies fit anywhere
        grows = copies < per_task.max_copies_in(ZERO)
        return (_NO_NEED, _NO_NEED, _NO_NEED) if grows else None
    more = copies + 1
    return (
        more * per_task.gpu - free[0] if per_task.gpu > 0 else _NO_NEED,
        more * per_task.cpu - free[1] if per_task.cpu > 0 else _NO_NEED,
        more * per_task.memory - free[2] if per_task.memory > 0 else _NO_NEED,
    )


def resource_copies(
    asked: Resources, free: tuple[int, int, int], freed: tuple[int, int, int]
) -> int:
    """`asked.max_copies_in(free + freed)` on plain integers (free as the node index files
    it): how many tasks a node could hold once `freed` is freed there, in resources alone.
    Asked for every node a victim search counts, so no `Resources` is made."""
    more = MANY_COPIES
    if asked.gpu > 0:
        more = (free[0] + freed[0]) // asked.gpu
    if asked.cpu > 0:
        more = min(more, (free[1] + freed[1]) // asked.cpu)
    if asked.memory > 0:
        more = min(more, (free[2] + freed[2]) // asked.memory)
    return max(0, more)


class Room:
    """How many of a job's tasks the live nodes it may use could hold, kept per node so that
    releasing or restoring a victim's tasks costs only the nodes it touches.

    Only nodes the free-capacity index says could hold one task are counted up front (on a
    full cluster, few or none); any other node holds none now and is counted when a victim's
    tasks on it are taken. Taking and giving back go through the statement, whose rollback
    undoes them all."""

    def __init__(self, state: State, statement: Statement, job: Job) -> None:
        self._state = state
        self._statement = statement
        self._job = job
        self._copies: dict[str, int] = {}
        # The devices each taken step's tasks used, per (victim, step index, node).
        self._taken: dict[tuple[str, int, str], tuple[Assignment, ...]] = {}
        # Per node, what freeing must reach for one more task (see `could_grow_lifting`).
        self._needs: dict[str, tuple[int, int, int] | None] = {}
        self.total = 0
        for node_id in state.node_index.fullest_first(job.per_task.gpu):
            node = state.nodes[node_id]
            if node.matches(job.node_selector):
                copies = node.copies(job.per_task)
                if copies:
                    self._copies[node_id] = copies
                    self.total += copies

    def usable(self, node_id: str) -> bool:
        """Whether the node is live and the job may use it."""
        node = self._state.nodes[node_id]
        return not node.lost and node.matches(self._job.node_selector)

    @property
    def job(self) -> Job:
        return self._job

    @property
    def state(self) -> State:
        return self._state

    def copies_once_freed(
        self, node_id: str, freed: Mapping[str, int], victims: Mapping[str, Job]
    ) -> int:
        """`Node.copies` of the job on the node once `freed[victim]` of each victim's placed
        tasks there are taken: the victim's latest placed tasks and their devices, as
        `Allocations.unplace` takes them."""
        freed_room = ZERO
        freed_devices: dict[int, int] = {}
        for victim_id, tasks in freed.items():
            victim = victims[victim_id]
            freed_room = freed_room + victim.per_task * tasks
            latest = victim.devices.get(node_id, ())[-tasks:]
            for index, amount in usage(latest, victim.per_task.gpu).items():
                freed_devices[index] = freed_devices.get(index, 0) + amount
        node = self._state.nodes[node_id]
        return node.copies_freeing(self._job.per_task, freed_room, freed_devices)

    def most_if_emptied(self, queues: Freeable, enough: int) -> int:
        """An upper bound of how many tasks the nodes could hold once any victims of the
        queues are stopped, as a walk may take them: for each queue, what its stoppable jobs
        have placed per node (`Allocations.stoppable_on`), each node's share capped by what
        the queue may release in all (`ReleaseLedger`: a walk never takes more of it).
        Counting stops once it reaches `enough`. A node's term, as in `AllTaken`,
        only grows with what is freed on it and is never below 0 (`Node.copies` is at most
        `max_copies_in(free)`), so no walk's fit finds more. Each queue is first counted
        alone, which counts no more than all of them together: one reaching `enough`
        settles it without adding up every queue's nodes. The caps are also spent once
        (domain/cycle/release_totals.py): in total, before any node is counted, and, for
        several tasks, node by node once the counts reach `enough`."""
        if not (self._job.per_task.gpu or self._job.per_task.cpu or self._job.per_task.memory):
            return max(self.total, enough)  # asks nothing: any node holds "a large number"
        most = release_totals.most_released(self, queues)
        if most < enough:
            return most
        most = self._counted(queues, enough)
        if most < enough or enough < 2:
            return most
        # Node by node, the caps' sum pays for several tasks at once: for one task the count
        # per node above, each node's share already capped, is as tight.
        return min(most, release_totals.most_paid_for(self, queues))

    def _counted(self, queues: Freeable, enough: int) -> int:
        total = self.total
        for queue in queues:
            total = self._count(capped_per_node([queue]), enough)
            if total >= enough or len(queues) == 1:
                return total
        return self._count(capped_per_node(queues), enough)

    def _count(self, freed: Iterator[tuple[str, tuple[int, int, int]]], enough: int) -> int:
        """`total` plus, per node, the tasks more that freeing its amount lets it hold (in
        resources alone); stops once it reaches `enough`."""
        total = self.total
        asked, copies, free_of = self._job.per_task, self._copies, self._state.node_index.free_of
        for node_id, freed_there in freed:
            if total >= enough:
                break
            if not self.usable(node_id):
                continue
            more = resource_copies(asked, free_of(node_id), freed_there)
            total += more - copies.get(node_id, 0)
        return total

    def could_grow(self, node_id: str, steps: list[VictimStep]) -> bool:
        """Whether taking every one of `steps` could let the node hold one more task: its
        free room plus what the steps free on it, counted in resources alone (an upper bound
        of `Node.copies`, which also counts devices), must hold more copies than now."""
        freed = ZERO
        for step in steps:
            for step_node, tasks in step.nodes:
                if step_node == node_id:
                    freed = freed + step.victim.per_task * tasks
        return self.could_grow_freeing(node_id, freed)

    def could_grow_freeing(self, node_id: str, freed: Resources) -> bool:
        """Whether freeing `freed` on the node could let it hold one more task (the same
        upper bound as `could_grow`)."""
        if not self.usable(node_id):
            return False  # never counted: its copies stay 0
        free = self._state.nodes[node_id].free + freed
        return self._job.per_task.max_copies_in(free) > self.copies(node_id)

    def could_grow_lifting(self, job: Job) -> bool:
        """Whether lifting all of `job`'s tasks could let one of its nodes hold one more task:
        `could_grow_freeing` on each of its nodes, from a threshold kept per node until it is
        recounted (every change to a node here is followed by its `recount`)."""
        per_task = job.per_task
        for node_id, placed in job.placements.items():
            need = self._needs[node_id] if node_id in self._needs else self._need(node_id)
            if (
                need is not None
                and per_task.gpu * placed >= need[0]
                and per_task.cpu * placed >= need[1]
                and per_task.memory * placed >= need[2]
            ):
                return True
        return False

    def _need(self, node_id: str) -> tuple[int, int, int] | None:
        """What must be freed on the node, per resource, before it could hold one more task
        (`freeing_needed`); None when nothing may, or the job may not use the node."""
        need = None
        if self.usable(node_id):
            free = self._state.node_index.free_of(node_id)  # Node.free, as filed (usable: live)
            need = freeing_needed(self._job.per_task, free, self.copies(node_id))
        self._needs[node_id] = need
        return need

    def most_gained_leaving(self, job: Job) -> int:
        """With `landing_change` for where it goes, an upper bound of how much `total` grows
        if `job` moves off its nodes: each node's tasks counted in resources alone (as
        `could_grow_freeing`), which bounds what `Node.copies` counts on its devices too."""
        asked, nodes = self._job.per_task, self._state.nodes
        bound = 0
        for node_id, placed in job.placements.items():
            if self.usable(node_id):
                freed = nodes[node_id].free + job.per_task * placed
                bound += asked.max_copies_in(freed) - self.copies(node_id)
        return bound

    def landing_change(self, job: Job, new: Mapping[str, int]) -> int:
        """The other term of `most_gained_leaving`'s bound: what landing on `new` changes,
        counted the same way. It reads of the job only its request: jobs of one request
        landing on the same nodes share it."""
        asked, nodes = self._job.per_task, self._state.nodes
        bound = 0
        for node_id, placed in new.items():
            if self.usable(node_id):
                left = nodes[node_id].free - job.per_task * placed
                bound += asked.max_copies_in(left) - self.copies(node_id)
        return bound

    def recount(self, node_id: str) -> None:
        self._needs.pop(node_id, None)
        if self.usable(node_id):
            copies = self._state.nodes[node_id].copies(self._job.per_task)
            self.total += copies - self._copies.get(node_id, 0)
            self._copies[node_id] = copies

    def take(self, step: VictimStep) -> None:
        """Pretends the step's tasks are stopped."""
        victim = step.victim
        for node_id, tasks in step.nodes:
            devices = self._statement.unplace(victim, node_id, tasks)
            self._taken[(victim.id, step.index, node_id)] = devices
            self.recount(node_id)

    def give_back(self, step: VictimStep) -> None:
        """Undoes `take`, the tasks back on the devices they used: placed afresh, a fraction
        could land on another device and leave whole the one it shares, and a fit would
        count room that stopping the victims will not make. A victim's steps are given back
        latest first, so its devices are in their order again."""
        victim = step.victim
        for node_id, tasks in step.nodes:
            devices = self._taken.pop((victim.id, step.index, node_id), None)
            self._statement.place(victim, node_id, tasks, devices)
            self.recount(node_id)

    def copies(self, node_id: str) -> int:
        """Tasks of the job the node could hold now (0 for a node not counted yet)."""
        return self._copies.get(node_id, 0)
