"""The scheduling cycle's plug-in points: queue policies, preemption rules, actions (pure).

As in KAI's framework, a cycle opens a Session over the state; actions (settle, allocate,
expand, ...) call only the session; policies and rules are small objects registered in
`domain.plugins`, combined by fixed rules. A new policy is a new module and one registry line.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum
from typing import TYPE_CHECKING, Protocol

from domain.state import Job, Queue

if TYPE_CHECKING:
    from domain.session import Session


class Verdict(StrEnum):
    """What a blocked job does to the rest of its queue in this cycle."""

    STOP = "stop"  # nothing behind it is placed
    SKIP = "skip"  # the next job is tried


class QueuePolicy(Protocol):
    """How a queue orders its pending jobs and what a blocked job does to those behind it."""

    kind: str

    def effective_priority(self, job: Job, queue: Queue, now: int) -> int:
        """The priority the job is ordered by now; must not rise along a list of equal
        base priority in submission order (older jobs rank at least as high)."""
        ...

    def on_blocked(self, job: Job, queue: Queue, session: Session) -> Verdict: ...


class PreemptionRule(Protocol):
    """One kind of preemption (reclaim, priority, interactive, self-level, child-level).

    `applies` says whether the rule may act for this blocked job at all; `admits` filters
    victims (AND-ed with the session's universal filters: preemptible, not interactive, no
    preemption cycles). The shared victim selector does the rest.
    """

    reason: str

    def applies(self, session: Session, job: Job) -> bool: ...

    def candidate_queues(self, session: Session, job: Job) -> Iterable[str]:
        """Queues whose running jobs may be victims (sorted)."""
        ...

    def admits(self, session: Session, job: Job, victim: Job) -> bool: ...

    def allows_after(self, session: Session, job: Job, victims: list[Job]) -> bool:
        """A check over the whole victim set, e.g. reclaim's 'no victim queue below its fair
        share'; True when the set is acceptable."""
        ...


class Action(Protocol):
    """A step of the cycle, run in registry order."""

    name: str

    def execute(self, session: Session) -> None: ...
