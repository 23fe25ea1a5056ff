"""The state's entities: jobs, their stops, and nodes, with values derived from them (pure)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from weakref import WeakValueDictionary

from domain.devices import NONE, Assignment, NodeDevices, usage
from domain.events import Device, JobSubmitted
from domain.reasons import Reason
from domain.resources import ZERO, Resources


class JobStatus(StrEnum):
    PENDING = "pending"
    RUNNING = "running"  # dispatched on one or more nodes (started or not yet)
    STOPPING = "stopping"  # every remaining placement is being preempted; requeued after
    CANCELLING = "cancelling"
    FINISHED = "finished"
    FAILED = "failed"
    CANCELLED = "cancelled"


TIME_LIMIT_TIMER = "time_limit"  # the timer set when an attempt with a time limit first starts

# The one empty job set every job shares (`frozenset()` allocates 216 bytes each time).
NO_JOBS: frozenset[str] = frozenset()
Selector = tuple[tuple[str, str], ...]  # a job's node selector: sorted (label, value) pairs
TERMINAL = frozenset({JobStatus.FINISHED, JobStatus.FAILED, JobStatus.CANCELLED})


@dataclass(slots=True)
class Stopping:
    """Tasks of one attempt on one node that an agent has been told to stop."""

    attempt: int
    tasks: int
    requeue: bool  # False when the job is being cancelled or shrunk
    devices: tuple[Assignment, ...] = ()  # the stopping tasks' devices (domain/devices.py)


class ShapeKey:
    """A job shape (`Job.shape`) made once and shared by every pending job of that shape
    (`State.shape_keys`): the cycle's look-alike memo keys on it, and it hashes and compares
    by identity, so a step over a backlog neither builds nor hashes the shape again."""

    __slots__ = ("__weakref__", "priority", "shape")

    def __init__(self, shape: tuple[object, ...], priority: bool) -> None:
        self.shape = shape
        self.priority = priority  # whether the shape holds the job's priority


class ShapeKeys(WeakValueDictionary[tuple[object, ...], ShapeKey]):
    """The shared shape keys (`State.shape_keys`): weak values, so a shape goes with its last
    live job; pickled (projection checkpoints) and copied with the keys the jobs hold."""

    def __reduce__(self) -> tuple[type[ShapeKeys], tuple[dict[tuple[object, ...], ShapeKey]]]:
        return (ShapeKeys, (dict(self.items()),))

    def shared(self, shape: tuple[object, ...], priority: bool) -> ShapeKey:
        """The key every holder of this shape shares, made on first asking."""
        key = self.get(shape)
        if key is None:
            key = self[shape] = ShapeKey(shape, priority)
        return key


@dataclass(slots=True)
class Job:
    id: str
    queue: str
    priority: int
    module: str
    interactive: bool
    preemptible: bool
    tasks: int
    min_tasks: int
    per_task: Resources
    node_selector: Selector
    order: int  # submission sequence: the journal seq of JobSubmitted; the place in queue
    submitted_ts: int
    spec: JobSubmitted
    status: JobStatus = JobStatus.PENDING
    attempt: int = 0
    placements: dict[str, int] = field(default_factory=dict)  # node -> tasks of this attempt
    devices: dict[str, tuple[Assignment, ...]] = field(default_factory=dict)  # node -> per task
    stopping: dict[str, Stopping] = field(default_factory=dict)  # node -> tasks being stopped
    started_ts: int | None = None
    # Frozen, and shared while empty: an empty set costs 216 bytes; most jobs wait pending.
    started_nodes: frozenset[str] = NO_JOBS
    blocked_since: int | None = None
    pending_reason: Reason | None = None  # why the last cycle that tried it could not place it
    held: dict[str, Resources] = field(default_factory=dict)  # freed for it by a preemption
    held_devices: dict[str, dict[int, int]] = field(default_factory=dict)  # node -> device -> milli
    awaiting: frozenset[str] = NO_JOBS  # victims still stopping for it
    displaced_by: dict[str, str] = field(default_factory=dict)  # job -> rule that displaced us
    failed_on: str | None = None  # the first node that reported this job failed
    finishing: bool = False  # some tasks of this attempt ended on their own: it no longer grows
    retries: int = 0  # failed attempts started again so far (up to spec.max_retries)
    timed_out: bool = False  # stopped for running its time_limit_s: ends failed, never retried
    # Its shape's shared key, once a cycle asked for it (Session._shape); not in snapshots.
    shape_key: ShapeKey | None = field(default=None, repr=False, compare=False)

    @property
    def placed_tasks(self) -> int:
        return sum(self.placements.values())

    @property
    def request(self) -> Resources:
        """What the whole job asks for at full size."""
        return self.per_task * self.tasks

    @property
    def allocation(self) -> Resources:
        tasks = self.placed_tasks + sum(stop.tasks for stop in self.stopping.values())
        return self.per_task * tasks

    @property
    def is_elastic(self) -> bool:
        return self.min_tasks < self.tasks

    def started_or(self, now: int) -> int:
        """When it started, or `now` if it has not yet (dispatched, not reported running):
        the start least disruption orders victims by."""
        return self.started_ts if self.started_ts is not None else now

    def pending_key(self) -> tuple[int, str]:
        return (self.order, self.id)

    def shape(self, priority: bool = True) -> tuple[object, ...]:
        """What trying the job reads of it, apart from its history (held room, awaited
        victims, displacements): look-alike jobs share it, and the cycle's caches key on it.
        Without `priority` when no preemption rule reads it (PreemptionRule.reads_priority).
        The request is a tuple of ints, not `Resources`: a key of plain values hashes and
        compares without a Python call (the backlog's look-alikes are looked up by it)."""
        per_task = self.per_task
        return (
            self.queue,
            self.priority if priority else None,
            self.module,
            self.interactive,
            self.preemptible,
            (per_task.gpu, per_task.cpu, per_task.memory),
            self.tasks,
            self.min_tasks,
            self.node_selector,
        )


COPIES_MEMO_MAX = 256  # task shapes remembered per node between changes to its room


@dataclass(slots=True)
class Node:
    id: str
    capacity: Resources
    labels: dict[str, str]
    last_heartbeat_ts: int
    allocated: Resources = ZERO  # includes tasks told to stop until their agent says so
    held: Resources = ZERO  # kept for preemptors
    stopping: Resources = ZERO  # the part of `allocated` whose tasks are being stopped
    lost: bool = False
    jobs: dict[str, int] = field(default_factory=dict)  # job -> tasks (placed or stopping)
    instance: str | None = None  # the agent that holds the node, when it names itself
    incarnation: int = 0  # that agent's start count (0: not given)
    devices: tuple[Device, ...] | None = None  # as the heartbeat listed them (None: implied)
    gpus: NodeDevices = field(default_factory=NodeDevices)  # per-device use (domain/devices.py)
    # copies() of each task shape, for a job holding nothing here or holding a given room,
    # as the node is now; and, per task shape and selector, the jobs whose lifting alone
    # would let it hold one more (domain/actions/lifting.py). Every change to the node's
    # room is followed by NodeIndex.update, which starts new memos; an undone change puts
    # the memos of the restored room back (domain/cycle/memento.py).
    copies_memo: dict[object, int] = field(default_factory=dict, repr=False, compare=False)
    lifting_memo: dict[object, tuple[str, ...]] = field(
        default_factory=dict, repr=False, compare=False
    )

    @property
    def free(self) -> Resources:
        """What a job with nothing held here may use now."""
        return self.free_for(ZERO)

    def free_for(self, own_hold: Resources) -> Resources:
        """What a job holding `own_hold` here may use now.

        Room held for preemptors is carved first out of what stopping tasks will free, so
        that capacity is not counted twice (once as still allocated to the stopping victim,
        once as held): only the part of other jobs' holds that stopping tasks do not cover
        is taken from what is free now.
        """
        held, stopping, capacity, allocated = (
            self.held,
            self.stopping,
            self.capacity,
            self.allocated,
        )
        return Resources(
            capacity.gpu - allocated.gpu - max(0, held.gpu - own_hold.gpu - stopping.gpu),
            capacity.cpu - allocated.cpu - max(0, held.cpu - own_hold.cpu - stopping.cpu),
            capacity.memory
            - allocated.memory
            - max(0, held.memory - own_hold.memory - stopping.memory),
        )

    def copies(
        self,
        per_task: Resources,
        own_hold: Resources = ZERO,
        own_devices: Mapping[int, int] = NONE,
    ) -> int:
        """How many tasks of `per_task` fit here now for a job holding `own_hold` (and
        `own_devices`) here: in every resource, and on whole or shared GPU devices."""
        # A job holding room here (a waiting preemptor, asked every cycle) is remembered by
        # its hold too; most jobs hold nothing, and are remembered by their request alone.
        # The key is plain ints, not `Resources`: a tuple hashes and compares without a
        # Python call, and the tasks of different jobs ask equal, not identical, amounts.
        request = (per_task.gpu, per_task.cpu, per_task.memory)
        key: object = (
            request
            if own_hold is ZERO and own_devices is NONE
            else (request, own_hold.as_tuple(), tuple(own_devices.items()))
        )
        memo = self.copies_memo
        copies = memo.get(key)
        if copies is None:
            if len(memo) >= COPIES_MEMO_MAX:
                memo.clear()
            copies = memo[key] = self._copies(per_task, own_hold, own_devices)
        return copies

    def _copies(
        self, per_task: Resources, own_hold: Resources, own_devices: Mapping[int, int]
    ) -> int:
        copies = per_task.max_copies_in(self.free_for(own_hold))
        if copies <= 0:
            return 0
        if per_task.gpu:
            copies = min(copies, self.gpus.copies(per_task.gpu, own_devices))
        return copies

    def copies_freeing(
        self, per_task: Resources, freed: Resources, freed_devices: Mapping[int, int]
    ) -> int:
        """`copies(per_task)` once tasks holding `freed` here, on `freed_devices` (milli-GPU
        per device), are gone, as if released; nothing changes and nothing is remembered."""
        copies = per_task.max_copies_in(self.free + freed)
        if copies <= 0:
            return 0
        if per_task.gpu:
            copies = min(copies, self.gpus.copies_freeing(per_task.gpu, freed_devices))
        return copies

    def matches(self, selector: Selector) -> bool:
        if not selector:  # most jobs select no labels; asked of every candidate node
            return True
        labels = self.labels
        # A loop, not all() over a generator, which costs several times as much here.
        for key, value in selector:  # noqa: SIM110
            if labels.get(key) != value:
                return False
        return True


def place_on_devices(node: Node, job: Job, tasks: int) -> tuple[Assignment, ...]:
    """Chooses the devices for `tasks` more of the job on the node and marks them used.

    The fit has checked that they fit (Node.copies). Only a node whose capacity shrank under
    running tasks (a heartbeat with fewer devices) can leave none: the tasks then go on the
    devices with the most room, overbooked, as the node's totals are, until some end."""
    gpu = job.per_task.gpu
    own = job.held_devices.get(node.id, NONE)
    chosen = node.gpus.choose(gpu, tasks, own) or node.gpus.overbook(gpu, tasks, own)
    node.gpus.add("used", usage(chosen, gpu))
    return tuple(chosen)


def hold_devices(node: Node, job: Job, amount: Resources) -> dict[int, int]:
    """The devices to keep for the job's tasks that `amount` makes room for: those they will
    take once the node's stopping tasks are gone and other preemptors have theirs."""
    gpu = job.per_task.gpu
    if gpu <= 0:
        return {}
    tasks = amount.gpu // gpu
    chosen = node.gpus.choose(gpu, tasks, job.held_devices.get(node.id, NONE), future=True)
    return usage(chosen or (), gpu)
