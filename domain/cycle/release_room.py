"""What a preemption rule's victims may release: the bound a rule may add, and the ledger a search keeps (pure).

A fairness rule may bound, per candidate queue, how much stopping that queue's victims may
release before the rule refuses the set (`ReleaseBound`); the victim search and reclaim with
moves then skip victims beyond it and count down what each queue has left (`ReleaseLedger`).
See docs/preemption.md, 3c.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol, runtime_checkable

from domain.cycle.framework import CycleView, PreemptionRule
from domain.resources import ZERO, Resources
from domain.state import Job, State

# Fair shares and quotas are floats over integer amounts: a release is refused by a bound
# only when it exceeds the room by more than this (the rules' own rounding tolerance).
RELEASE_EPSILON = 1e-6


@runtime_checkable
class ReleaseBound(Protocol):
    """What a preemption rule may add to bound the victim search: for a blocked job and one
    candidate queue, how much (gpu, cpu, memory; math.inf: no bound) stopping that queue's
    victims may release before `allows_after` refuses the set. It must be exact for a first
    victim (a release above it is refused, one within it is not refused for that queue's
    sake), as reclaim's "not below its fair share" is: the search then drops such victims
    before walking them, and stops at once when nothing is left. It must also be shared by
    the queue's victims: once victims of the queue released some amount, a further release
    above the room less that amount is refused too, whatever else was taken (reclaim's
    entities lose what each of their victims releases); the walk then refuses such a victim
    without trying it (docs/preemption.md, 3c)."""

    def release_room(
        self, cycle: CycleView, job: Job, queue_id: str
    ) -> tuple[float, float, float]: ...


ReleaseRoom = tuple[float, float, float]  # per resource, what a victim queue may release


def release_bound(state: State, rule: PreemptionRule) -> ReleaseBound | None:
    """The rule, if it bounds what its victims may release (`ReleaseBound`), else None. A
    runtime protocol check costs tens of microseconds, and searches ask it every cycle: the
    answer is kept per rule with the configuration (`State.configuration_memo`), beside the
    rule object itself, so a rule of another plug-in set never reads it."""
    memo = state.configuration_memo
    known = memo.get("release_bounds")
    if known is None:
        known = memo["release_bounds"] = {}
    bounds: dict[int, tuple[PreemptionRule, ReleaseBound | None]] = known  # type: ignore[assignment]
    kept = bounds.get(id(rule))
    if kept is None or kept[0] is not rule:
        kept = bounds[id(rule)] = (rule, rule if isinstance(rule, ReleaseBound) else None)
    return kept[1]


class ReleaseLedger:
    """For a rule that bounds releases (`ReleaseBound`): what each victim queue may release,
    as a search began, and what the victims taken since release of it. The room is shared
    by the queue's victims, so a victim beyond what is left is refused whatever else is
    taken. The victim search's walks and reclaim with moves keep one each."""

    __slots__ = ("_released", "_rooms")

    def __init__(
        self, rooms: Mapping[str, ReleaseRoom], released: Mapping[str, Resources] | None = None
    ) -> None:
        self._rooms = rooms
        self._released = dict(released or {})

    def copy(self) -> ReleaseLedger:
        """A ledger that goes on from this one's releases without changing them."""
        return ReleaseLedger(self._rooms, self._released)

    def refuses(self, victim: Job, tasks: int) -> bool:
        """Whether stopping `tasks` more of the victim releases more than its queue has left."""
        room = self._rooms.get(victim.queue)
        if room is None:
            return False
        done = self._released.get(victim.queue, ZERO)
        left = (room[0] - done.gpu, room[1] - done.cpu, room[2] - done.memory)
        return exceeds_release_room(victim.per_task, left, tasks)

    def took(self, victim: Job, tasks: int) -> None:
        """`tasks` of the victim were taken: its queue has that much less left."""
        if victim.queue in self._rooms:
            done = self._released.get(victim.queue, ZERO)
            self._released[victim.queue] = done + victim.per_task * tasks


def exceeds_release_room(
    release: Resources, room: tuple[float, float, float], times: int = 1
) -> bool:
    """Whether a release (`times` copies of `release`) is above a
    `ReleaseBound.release_room` in some resource."""
    gpu, cpu, memory = room  # unrolled: the victim search asks this of every victim
    return (
        release.gpu * times > gpu + RELEASE_EPSILON
        or release.cpu * times > cpu + RELEASE_EPSILON
        or release.memory * times > memory + RELEASE_EPSILON
    )
