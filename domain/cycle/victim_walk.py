"""One victim search's walk: the steps taken so far, the victims, and the fit once the room is enough (pure).

Split from domain/cycle/victims.py, which drives walks (the cheapest nodes first, then every
step) and minimises what a walk found; see docs/preemption.md, 3b and 3c.
"""

from __future__ import annotations

from typing import Protocol

from domain.cycle.framework import Attempt, PreemptionRule
from domain.cycle.release_room import ReleaseLedger
from domain.cycle.room import Room, VictimStep, victim_steps
from domain.state import Job

__all__ = ["Judge", "Walk"]


class Judge(Protocol):
    """What a walk asks of its search: the rule's whole-set verdict, and a fit."""

    def allowed(self, job: Job, rule: PreemptionRule, victims: list[Job]) -> bool: ...

    def fit(self, job: Job, tasks: int) -> Attempt: ...


class Walk:
    """Steps taken so far for one search (each victim's steps in order), the distinct victims,
    and the fit once the room is enough (`target` None: only counting room)."""

    def __init__(
        self,
        search: Judge,
        job: Job,
        rule: PreemptionRule,
        room: Room,
        target: int | None,
        releases: ReleaseLedger | None = None,
    ) -> None:
        self.search = search
        self.job = job
        self.rule = rule
        self.room = room
        self.target = target
        self.chosen: list[VictimStep] = []
        self.victims: list[Job] = []
        self.next_index: dict[str, int] = {}  # per victim, its next step to take
        self.skipped: set[str] = set()  # victims the rule forbids (with what is taken so far)
        self.found: Attempt | None = None
        # A rule that bounds releases (ReleaseBound): what each victim queue may release,
        # and what the steps taken so far release of it. A copy of its own: the walk adds
        # its releases to it, and a walk rolled back must leave the next one the room whole.
        self.releases = None if releases is None else releases.copy()

    def take(self, step: VictimStep) -> None:
        """Takes the step, with the victim's earlier steps not taken yet, unless the rule
        forbids the result: then gives them back and skips the victim from here on. The
        rules' whole-set checks only get stricter as victims are added, so a forbidden
        victim stays forbidden for this walk. Under a rule that bounds releases, a victim
        whose release is above what its queue has left is forbidden without being taken."""
        victim = step.victim
        if victim.id in self.skipped or self.next_index.get(victim.id, 0) > step.index:
            return
        added: list[VictimStep] = []
        start = self.next_index.get(victim.id, 0)
        pending = [step] if start == step.index else victim_steps(victim)[start : step.index + 1]
        tasks = sum(count for taken in pending for _, count in taken.nodes)
        if self.releases is not None and self.releases.refuses(victim, tasks):
            self.skipped.add(victim.id)
            return
        for earlier in pending:
            self.room.take(earlier)
            added.append(earlier)
        # Only the usage of this victim's queues changed: the set was acceptable before, so
        # checking this victim alone judges the whole set (docs/preemption.md).
        if not self.search.allowed(self.job, self.rule, [victim]):
            for earlier in reversed(added):
                self.room.give_back(earlier)
            self.skipped.add(victim.id)
            return
        self.chosen += added
        if victim.id not in self.next_index:
            self.victims.append(victim)
        self.next_index[victim.id] = step.index + 1
        if self.releases is not None:
            self.releases.took(victim, tasks)

    def take_all(self, steps: list[VictimStep]) -> None:
        for step in steps:
            if self.found is not None:
                return
            self.take(step)
            if self.chosen and self.target is not None and self.room.total >= self.target:
                attempt = self.search.fit(self.job, self.target)
                if attempt.plan is not None:
                    self.found = attempt
