"""Where a job moved by consolidation could go: binpack, counted per shape (pure).

Split from domain/actions/consolidate.py: `plan_moves` asks `Landing.place` for every
resident it may move, and most have nowhere to go on a full cluster.
"""

from __future__ import annotations

from domain.cycle.room import Room
from domain.entities import Selector
from domain.placement import PLACEMENTS, Plan, find_placement
from domain.resources import Resources
from domain.state import Job, State

BINPACK = PLACEMENTS["binpack"]
_NOTHING: frozenset[str] = frozenset()


class Landing:
    """Where a resident could go (binpack), counted per shape while no move is kept.

    find_placement fills every candidate node in turn, so it fails exactly when the nodes
    outside `exclude` hold fewer tasks than asked. Per (request, selector) the candidates
    are listed once and their copies counted lazily, only as far as an answer needs: a
    resident with nowhere to go then costs a sum over its excluded nodes, not a walk over
    every candidate. A move tried and rolled back restores every node exactly, so the
    counts stand until a move is kept (`forget`)."""

    def __init__(self, state: State) -> None:
        self._state = state
        self._shapes: dict[tuple[Resources, Selector], _Counted] = {}
        # Per (request, selector, tasks): where such a resident goes off a node (`place_off`).
        self._off: dict[tuple[Resources, Selector, int], tuple[Plan, int] | None] = {}

    def forget(self) -> None:
        self._shapes.clear()
        self._off.clear()

    def place_off(
        self, resident: Job, target: str, locked: set[str], room: Room
    ) -> tuple[Plan, int] | None:
        """Where the resident's tasks could go, off its nodes, `target` and `locked` (as
        `place`), and what landing there changes in the room's bound
        (`Room.landing_change`); None if nowhere.

        For a resident alone on `target` (holding no room, which widens where it may go),
        kept per (request, selector, tasks) until a move is kept, as the counts are, and
        found with only `locked` excluded: `find_placement` walks the candidates in order,
        so a node that plan does not use either holds no task or comes after the walk
        ended, and excluding it gives the same plan. So `locked` must be the same set at
        every call until `forget` (`plan_moves` locks nodes only as it keeps a move). On a
        full cluster the residents of many nodes share a few shapes, and most have nowhere
        to go or only where the room loses what it gains."""
        old = resident.placements
        tasks = sum(old.values())
        if resident.held or len(old) != 1 or target not in old:
            return self._landed(resident, tasks, locked | set(old) | {target}, room)
        key = (resident.per_task, resident.node_selector, tasks)
        if key in self._off:
            found = self._off[key]
        else:
            found = self._off[key] = self._landed(resident, tasks, locked, room)
        if found is None or target not in found[0]:
            return found
        return self._landed(resident, tasks, locked | {target}, room)

    def _landed(
        self, resident: Job, tasks: int, exclude: set[str], room: Room
    ) -> tuple[Plan, int] | None:
        plan = self.place(resident, tasks, exclude)
        return None if plan is None else (plan, room.landing_change(resident, plan))

    def place(self, resident: Job, tasks: int, exclude: set[str]) -> Plan | None:
        if not resident.held and not self._counted(resident).hold(tasks, exclude):
            return None
        return find_placement(self._state, resident, tasks, BINPACK, exclude=exclude)

    def could_land(self, resident: Job, tasks: int) -> bool:
        """Whether `tasks` of the resident could go anywhere, nothing excluded: when not,
        `place` finds nothing whatever it excludes (excluding nodes only takes copies away)."""
        return bool(resident.held) or self._counted(resident).hold(tasks, _NOTHING)

    def _counted(self, resident: Job) -> _Counted:
        """The resident's shape's counts (held room widens where it may go: a resident
        holding some is no general shape, and is never counted)."""
        key = (resident.per_task, resident.node_selector)
        counted = self._shapes.get(key)
        if counted is None:
            counted = self._shapes[key] = _Counted(self._state, resident)
        return counted


class _Counted:
    """One shape's candidate nodes (binpack order, listed once) and the copies counted on
    a prefix of them. Exact only because they are the very nodes find_placement walks with
    BINPACK (the node index's fullest-first order): another strategy here would need its own."""

    def __init__(self, state: State, resident: Job) -> None:
        self._state = state
        self._per_task = resident.per_task
        self._selector = resident.node_selector
        self._candidates = list(BINPACK.candidates(state, resident.per_task))
        self._counted = 0  # candidates counted so far
        self._copies: dict[str, int] = {}  # node -> copies, for counted nodes holding some
        self._total = 0  # sum of _copies

    def hold(self, tasks: int, exclude: set[str] | frozenset[str]) -> bool:
        """Whether the candidates outside `exclude` hold `tasks` copies in all."""
        copies = self._copies
        have = self._total - sum(copies.get(node_id, 0) for node_id in exclude)
        nodes = self._state.nodes
        while have < tasks and self._counted < len(self._candidates):
            node_id = self._candidates[self._counted]
            self._counted += 1
            node = nodes[node_id]
            fits = node.copies(self._per_task) if node.matches(self._selector) else 0
            if fits > 0:
                copies[node_id] = fits
                self._total += fits
                if node_id not in exclude:
                    have += fits
        return have >= tasks
