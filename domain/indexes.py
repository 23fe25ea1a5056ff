"""Indexes that keep a cycle cheap: pending jobs by (interactive, priority), live nodes by free room (pure)."""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Iterator, Mapping
from operator import itemgetter

from domain.entities import Job, Node, Selector
from domain.lifting_kept import LiftingKept, TaskShape
from domain.resources import Resources
from domain.selector_room import SelectorRooms

REFILED_KEPT = 4096  # refilings the log holds; past that it starts again (readers read all)


class PendingIndex:
    """A queue's pending jobs, one list per (interactive, priority) sorted by submission order.

    Iteration merges the lists lazily by the policy's effective priority, so a cycle that only
    looks at the head of a long queue costs little. Within one list effective priority never
    rises along the list (older jobs have aged at least as much), which keeps the merge exact.
    An entry is (order, job id, job): sorted by order (unique), and the job itself at hand, so
    a walk over a long queue reads no table and no id (a snapshot writes order and id only).
    """

    __slots__ = ("_lists", "_size", "demand", "touched", "version")

    def __init__(self) -> None:
        self._lists: dict[tuple[bool, int], list[PendingEntry]] = {}
        self._size = 0
        # How many pending jobs ask each smallest size (`demand_shape`), so that what the
        # queue waits for is summed per shape, not per job (domain/actions/expand.py).
        self.demand: dict[DemandShape, int] = {}
        # For the queue's settled walk (domain/actions/settled_walk.py): bumped when a job
        # joins or leaves; and, while the walk is kept, the ids of the pending jobs a
        # statement changed since (Statement.touch), else None.
        self.version = 0
        self.touched: set[str] | None = None

    def __len__(self) -> int:
        return self._size

    def add(self, job: Job) -> None:
        bisect.insort(
            self._lists.setdefault((job.interactive, job.priority), []),
            (job.order, job.id, job),
        )
        self._size += 1
        self.version += 1
        self._count_demand(job, 1)

    def remove(self, job: Job) -> None:
        entries = self._lists[(job.interactive, job.priority)]
        index = _position(entries, job)
        if index is not None:
            del entries[index]
            self._size -= 1
            self.version += 1
            self._count_demand(job, -1)

    def __contains__(self, job: Job) -> bool:
        return _position(self._lists.get((job.interactive, job.priority), []), job) is not None

    def _count_demand(self, job: Job, sign: int) -> None:
        shape = demand_shape(job)
        count = self.demand.get(shape, 0) + sign
        if count:
            self.demand[shape] = count
        else:
            del self.demand[shape]

    def lists(self) -> list[tuple[tuple[bool, int], list[PendingEntry]]]:
        return sorted(self._lists.items(), key=_LIST_KEY)

    def job_ids(self) -> Iterator[str]:
        """Every pending job id, in submission order (for views and tests, not the cycle)."""
        for entry in heapq.merge(*(entries for _, entries in self.lists())):
            yield entry[1]

    def saved(self) -> list[tuple[tuple[bool, int], list[tuple[int, str]]]]:
        """Each list as (order, job id) pairs, for a snapshot."""
        return [
            (key, [(order, job_id) for order, job_id, _ in entries])
            for key, entries in self._lists.items()
        ]

    @classmethod
    def restored(
        cls, saved: list[tuple[tuple[bool, int], list[tuple[int, str]]]], jobs: dict[str, Job]
    ) -> PendingIndex:
        """The index `saved` wrote, its entries holding the restored jobs."""
        index = cls()
        for key, pairs in saved:
            index._lists[key] = [(order, job_id, jobs[job_id]) for order, job_id in pairs]
            index._size += len(pairs)
            for _, job_id in pairs:
                index._count_demand(jobs[job_id], 1)
        return index


PendingEntry = tuple[int, str, Job]  # order, job id, the job


def _position(entries: list[PendingEntry], job: Job) -> int | None:
    """Where the job's entry is in its list, if it is there."""
    # (order, id) sorts just before the job's own entry: orders are unique.
    index = bisect.bisect_left(entries, (job.order, job.id))
    return index if index < len(entries) and entries[index][1] == job.id else None


# A pending job's smallest size and what its admission reads of it: per task gpu, cpu and
# memory, min_tasks, preemptible, interactive (fixed from its submission).
DemandShape = tuple[int, int, int, int, bool, bool]


def demand_shape(job: Job) -> DemandShape:
    per_task = job.per_task
    return (
        per_task.gpu,
        per_task.cpu,
        per_task.memory,
        job.min_tasks,
        job.preemptible,
        job.interactive,
    )


_LIST_KEY = itemgetter(0)  # lists sort by (interactive, priority) alone


class NodeIndex:
    """Live nodes sorted by free capacity, so placement finds the fullest or emptiest fit fast."""

    __slots__ = (
        "_by_free_gpu",
        "_entries",
        "_free",
        "_keys",
        "_refiled",
        "_refiled_before",
        "_selectors",
        "grown",
        "growths",
        "lifting_kept",
        "version",
    )

    def __init__(self) -> None:
        self._entries: list[tuple[int, int, int, str]] = []
        self._by_free_gpu: list[tuple[int, str]] = []  # (-free gpu, id): consolidation's order
        self._keys: dict[str, tuple[int, int, int, str]] = {}
        self._free = [0, 0, 0]  # sum over live nodes of their free capacity, each at least 0
        self.version = 0  # bumped on every change, so a cycle can reuse what it derived
        # Live nodes whose free room did more than shrink since the parked preemptors last
        # looked (domain/cycle/parked.py, which empties it); derived, never saved.
        self.grown: set[str] = set()
        self.growths = 0  # how many times a node was noted there (a rollback puts it back)
        self._selectors = SelectorRooms()  # derived, never saved (domain/selector_room.py)
        # The ids of the nodes refiled lately, in order, so that what is kept per node can be
        # brought up to date by reading only those (`refiled_since`); never rolled back.
        self._refiled: list[str] = []
        self._refiled_before = 0  # how many refilings the log no longer holds
        # Per lifting key, the nodes with a job worth lifting, as of a mark of the log
        # (domain/lifting_kept.py); derived, never saved.
        self.lifting_kept: dict[TaskShape, LiftingKept] = {}

    @property
    def free_total(self) -> Resources:
        """What all live nodes have free, each node counted at zero or more."""
        return Resources(self._free[0], self._free[1], self._free[2])

    def free_matching(self, selector: Selector, nodes: Mapping[str, Node]) -> Resources:
        """What the live nodes that `selector` matches have free, each at zero or more."""
        return self._selectors.free(selector, self._keys, nodes)

    def selectors_kept(self) -> list[Selector]:
        """The node selectors whose free room `free_matching` keeps now."""
        return self._selectors.kept()

    def _count(self, key: tuple[int, int, int, str], sign: int) -> None:
        gpu, cpu, memory, _ = key
        self._free[0] += sign * max(0, gpu)
        self._free[1] += sign * max(0, cpu)
        self._free[2] += sign * max(0, memory)

    def __len__(self) -> int:
        return len(self._entries)

    def update(self, node: Node) -> None:
        """Re-files the node by its free capacity (drops it if lost). A node already indexed
        keeps its place in `_keys`, so undoing a change restores the index exactly. Every
        change to a node's room ends here, so the node's memos (copies, lifting) start anew."""
        node.copies_memo = {}
        node.lifting_memo = {}
        self._log_refiled(node.id)
        if node.lost:
            self.discard(node.id)
            self.version += 1
            return
        old = self._keys.get(node.id)
        self._unfile(node.id)
        self.version += 1
        free = node.free
        key = (free.gpu, free.cpu, free.memory, node.id)
        # Equal room is noted too: its devices, holds or labels may have changed.
        if old is None or not (
            key[0] <= old[0] and key[1] <= old[1] and key[2] <= old[2] and key != old
        ):
            self.note_grown(node.id)
        bisect.insort(self._entries, key)
        bisect.insort(self._by_free_gpu, (-key[0], node.id))
        self._keys[node.id] = key
        self._count(key, 1)
        self._selectors.refile(node, key)

    def note_grown(self, node_id: str) -> None:
        self.grown.add(node_id)
        self.growths += 1

    def discard(self, node_id: str) -> None:
        if self._unfile(node_id):
            del self._keys[node_id]
            self._selectors.forget(node_id)

    def _unfile(self, node_id: str) -> bool:
        key = self._keys.get(node_id)
        if key is None:
            return False
        self.version += 1
        index = bisect.bisect_left(self._entries, key)
        del self._entries[index]
        del self._by_free_gpu[bisect.bisect_left(self._by_free_gpu, (-key[0], node_id))]
        self._count(key, -1)
        return True

    def _log_refiled(self, node_id: str) -> None:
        if len(self._refiled) >= REFILED_KEPT:
            self._refiled_before += len(self._refiled)
            self._refiled.clear()
        self._refiled.append(node_id)

    def refiled_since(self, mark: int) -> tuple[dict[str, None] | None, int]:
        """The nodes refiled since `mark`, each once, in the order first refiled (None when
        the log no longer reaches back that far: read every node), and the mark to ask from
        next time."""
        now = self._refiled_before + len(self._refiled)
        if mark < self._refiled_before:
            return None, now
        return dict.fromkeys(self._refiled[mark - self._refiled_before :]), now

    def most_free_gpu_first(self) -> list[tuple[int, str]]:
        """The live nodes as (-free gpu, id), most free GPU first, ties by id: a copy, so
        changes made while it is walked do not reorder it."""
        return self._by_free_gpu.copy()

    def free_of(self, live_node: str) -> tuple[int, int, int]:
        """The live node's free (gpu, cpu, memory) as last filed (= Node.free)."""
        gpu, cpu, memory = self._keys[live_node][:3]
        return gpu, cpu, memory

    def fullest_first(self, at_least_gpu: int) -> Iterator[str]:
        """Nodes with at least `at_least_gpu` free, fullest (least free gpu) first."""
        start = bisect.bisect_left(self._entries, (at_least_gpu,))
        for index in range(start, len(self._entries)):
            yield self._entries[index][3]

    def emptiest_first(self, at_least_gpu: int) -> Iterator[str]:
        stop = bisect.bisect_left(self._entries, (at_least_gpu,))
        for index in range(len(self._entries) - 1, stop - 1, -1):
            yield self._entries[index][3]
