"""What one job's try found of each preemption rule, while nothing lasting changes (pure).

A blocked job's try asks each fairness rule whether it applies from reclaim with moves, from
the rules' own loop and from the reclaim reason, and searches victims under it from the
first two. Each answer is a function of the state, which outside a checkpoint is the same
while nothing lasting changed (domain/cycle/statement.py), however much tentative work was
tried and rolled back meanwhile; so the first answer serves the rest of the try.
"""

from __future__ import annotations

from collections.abc import Callable

from domain.cycle.framework import PreemptionRule
from domain.cycle.statement import Statement
from domain.state import Job

_FAILED = "failed_search"


class TryFacts:
    """Per job and rule: whether it applies, and whether its victim search failed."""

    def __init__(self, statement: Statement) -> None:
        self._statement = statement
        self._at: tuple[str, int] | None = None  # the job, and the lasting changes then
        self._facts: dict[object, bool] = {}

    def applies(self, rule: PreemptionRule, job: Job, ask: Callable[[], bool]) -> bool:
        facts = self._of(job)
        if facts is None:
            return ask()
        found = facts.get(rule)
        if found is None:
            found = facts[rule] = ask()
        return found

    def search(self, rule: PreemptionRule, job: Job, search: Callable[[], bool]) -> bool:
        """`search()`, unless it failed for the job under the rule since the last lasting
        change: a failed search changes nothing lasting, so it would fail again."""
        facts = self._of(job)
        failed = (_FAILED, rule)
        if facts is not None and failed in facts:
            return False
        found = search()
        if not found and facts is not None:
            facts[failed] = True
        return found

    def _of(self, job: Job) -> dict[object, bool] | None:
        """The job's facts since the last lasting change; None inside a checkpoint."""
        statement = self._statement
        if statement.tentative:
            return None
        at = (job.id, statement.lasting)
        if at != self._at:
            self._at = at
            self._facts = {}
        return self._facts
