"""Placement strategies: which nodes a job's tasks go to, gang all-or-nothing (pure)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol

from domain.resources import Resources
from domain.state import Job, State

Plan = dict[str, int]  # node -> tasks


class PlacementStrategy(Protocol):
    """Orders candidate nodes for one task of `per_task`; the first that fit are used."""

    name: str

    def candidates(self, state: State, per_task: Resources) -> Iterator[str]: ...


class Binpack:
    """Fill the fullest node that fits first, keeping whole nodes free for large jobs."""

    name = "binpack"

    def candidates(self, state: State, per_task: Resources) -> Iterator[str]:
        return state.node_index.fullest_first(per_task.gpu)


class Spread:
    """Use the emptiest node first, spreading load (and failure blast radius)."""

    name = "spread"

    def candidates(self, state: State, per_task: Resources) -> Iterator[str]:
        return state.node_index.emptiest_first(per_task.gpu)


PLACEMENTS: dict[str, PlacementStrategy] = {"binpack": Binpack(), "spread": Spread()}


def find_placement(
    state: State,
    job: Job,
    tasks: int,
    strategy: PlacementStrategy,
    exclude: frozenset[str] | set[str] = frozenset(),
) -> Plan | None:
    """Places `tasks` of the job, all or none: first on nodes held for it, then by strategy.
    A node takes as many tasks as fit in its resources and on its devices (Node.copies).

    `exclude` keeps nodes out of the plan (consolidation moves a job off its nodes and never
    onto nodes whose capacity is only freed once other jobs stop)."""
    per_task = job.per_task
    plan: Plan = {}
    remaining = tasks
    for node_id in sorted(job.held):
        if node_id in exclude:
            continue
        take = min(remaining, copies_held_for(state, job, node_id))
        if take > 0:
            plan[node_id] = take
            remaining -= take
            if remaining == 0:
                return plan
    for node_id in strategy.candidates(state, per_task):
        if node_id in plan or node_id in exclude:
            continue
        node = state.nodes[node_id]
        if not node.matches(job.node_selector):
            continue
        take = min(remaining, node.copies(per_task))
        if take > 0:
            plan[node_id] = take
            remaining -= take
            if remaining == 0:
                return plan
    return None


def largest_free(state: State) -> Resources | None:
    """The free capacity of the node with the most free gpu (for pending reasons)."""
    for node_id in state.node_index.emptiest_first(0):
        return state.nodes[node_id].free
    return None


def copies_held_for(state: State, job: Job, node_id: str) -> int:
    """Tasks of the job a node it holds room on could take now, counting what is held for it
    there (find_placement's first pass); none on a lost node or one its selector excludes."""
    node = state.nodes[node_id]
    if node.lost or not node.matches(job.node_selector):
        return 0
    return node.copies(job.per_task, job.held[node_id], job.held_devices.get(node_id, {}))
