"""Waiting preemptors a walk passes over on a lookup until room they could use grows (pure).

Allocate asks `still_waiting` (domain/cycle/awaiting.py) of every waiting preemptor its walk
reaches. On a large cluster thousands wait for their victims cycle after cycle, and each
answer reads the job, its reason, its holds and the nodes it could use: the cost of a cycle
grew with the preemptions in flight, not with what changed. Once the full answer is yes,
or as soon as its preemption starts (`awaiting.started_waiting`), the preemptor is parked
here, and later walks pass it over while:

- nothing of it changed: every change to a pending job (its reason, awaited victims,
  holds, placements) goes through `Statement.touch`, which unparks it;
- Claim still finds it waiting for victims all stopping (`awaiting.unchanged`, asked by the
  caller);
- no node's room grew where one of its tasks could go now.

The last is kept per node, not per job. Every change to a node's room ends in
`NodeIndex.update`, which notes the node in `NodeIndex.grown` unless its free room only
shrank (a heartbeat that changes its labels or devices notes it too). A noted node unparks
the preemptors holding room on it, and stays a suspect while it could take a task of some
parked shape (task request and node selector). A parked preemptor whose shape a suspect
could take is asked in full. Every other node's room has only shrunk since the preemptor
was parked, and a node that takes fewer tasks never lets a gang that did not fit fit
(`find_placement` needs enough tasks in all), so its try would still find no room and
change nothing.

A preemptor is parked only when no size of it is placeable, found by looking (or by a look
for a shape it covers, with no node noted as grown since: `Fitter.finds_no_room`): the
answer that led here may rest on the cycle's memo of shapes that found no room, which
counts frees, and a stop that begins is no free. And only preemptible jobs under no limit
are parked: quota and limit checks read allocations, which change all the time, and no
such check can forbid them (`Fitter.breach`). The parked set is derived, kept with the
configuration (whose limits it reads), and never saved.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from domain.entities import Selector
from domain.resources import Resources
from domain.state import Job, Node, State

PARKED = "parked_preemptors"  # configuration memo: the Parked below
# More suspects than this and everyone is asked in full again: each parked check reads each.
SUSPECTS_MAX = 32

Shape = tuple[Resources, Selector]  # per-task request, node selector
Entry = tuple[Shape, tuple[str, ...]]  # what a parked job was parked with: shape, held nodes


@dataclass(slots=True)
class Parked:
    jobs: dict[str, Entry] = field(default_factory=dict)
    shapes: dict[Shape, int] = field(default_factory=dict)  # parked jobs per shape
    on_node: dict[str, set[str]] = field(default_factory=dict)  # node -> parked holding there
    suspects: set[str] = field(default_factory=set)  # grown nodes that may take a shape

    def passes_over(self, state: State, job: Job) -> bool:
        """Whether the walk may pass the parked job over: its full answer would be yes."""
        entry = self.jobs.get(job.id)
        if entry is None:
            return False
        if state.node_index.grown:
            self._note_growth(state)
            entry = self.jobs.get(job.id)
            if entry is None:
                return False
        return not (self.suspects and self._suspect_takes(state, entry[0]))

    def park(self, state: State, job: Job) -> None:
        """Parks a preemptor whose full answer was yes just now, found with no size placeable
        by looking (not from a memo), preemptible and under no limit."""
        if len(self.jobs) > 2 * len(state.holders) + 64:
            self._prune(state)
        # Growth noted before now is growth before this job was parked (its look found no
        # room after it): it may unpark only those parked earlier. Above all the notes its
        # own preemption made, when it is parked in the cycle that started it.
        if state.node_index.grown:
            self._note_growth(state)
        self.unpark(job.id)
        shape = (job.per_task, job.node_selector)
        held = tuple(job.held)
        self.jobs[job.id] = (shape, held)
        self.shapes[shape] = self.shapes.get(shape, 0) + 1
        for node_id in held:
            self.on_node.setdefault(node_id, set()).add(job.id)

    def unpark(self, job_id: str) -> None:
        entry = self.jobs.pop(job_id, None)
        if entry is None:
            return
        shape, held = entry
        left = self.shapes[shape] - 1
        if left:
            self.shapes[shape] = left
        else:
            del self.shapes[shape]
        for node_id in held:
            parked = self.on_node.get(node_id)
            if parked is not None:
                parked.discard(job_id)
                if not parked:
                    del self.on_node[node_id]

    def _note_growth(self, state: State) -> None:
        """Unparks the preemptors holding room on the nodes whose room grew, and keeps as
        suspects those nodes, and earlier suspects, that could take a task of a parked shape."""
        grown = state.node_index.grown
        for node_id in sorted(grown):
            for job_id in sorted(self.on_node.get(node_id, ())):
                self.unpark(job_id)
        suspects = grown | self.suspects
        grown.clear()
        self.suspects = {
            node_id
            for node_id in suspects
            if (node := state.nodes.get(node_id)) is not None
            and any(_takes(node, shape) for shape in self.shapes)
        }
        if len(self.suspects) > SUSPECTS_MAX:
            self.clear()

    def _suspect_takes(self, state: State, shape: Shape) -> bool:
        """Whether some suspect could take a task of the shape now."""
        nodes = state.nodes
        return any(
            (node := nodes.get(node_id)) is not None and _takes(node, shape)
            for node_id in self.suspects
        )

    def _prune(self, state: State) -> None:
        """Forgets parked jobs that hold no room any more (placed, ended or cancelled)."""
        for job_id in sorted(set(self.jobs).difference(state.holders)):
            self.unpark(job_id)

    def clear(self) -> None:
        self.jobs.clear()
        self.shapes.clear()
        self.on_node.clear()
        self.suspects.clear()


def _takes(node: Node, shape: Shape) -> bool:
    per_task, selector = shape
    return not node.lost and node.matches(selector) and node.copies(per_task) > 0


def parked_if_kept(state: State) -> Parked | None:
    """The parked set, if one is kept (`parked_of` makes one)."""
    parked = state.configuration_memo.get(PARKED)
    assert parked is None or isinstance(parked, Parked)
    return parked


def parked_of(state: State) -> Parked:
    parked = parked_if_kept(state)
    if parked is None:
        parked = state.configuration_memo[PARKED] = Parked()
        state.node_index.grown.clear()  # nothing was parked before: no growth to look at
    return parked
