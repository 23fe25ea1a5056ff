"""What one job's try found of each preemption rule, while nothing lasting changes (pure).

A blocked job's try asks each fairness rule whether it applies from reclaim with moves, from
the rules' own loop and from the reclaim reason, and searches victims under it from the
first two. Each answer is a function of the state, which outside a checkpoint is the same
while nothing lasting changed (domain/cycle/statement.py), however much tentative work was
tried and rolled back meanwhile; so the first answer serves the rest of the try.
"""

from __future__ import annotations

from domain.cycle.statement import Statement
from domain.state import Job

FAILED = "failed_search"  # the key of a rule's failed search among a job's facts


class TryFacts:
    """Per job and rule: whether it applies (keyed by the rule), and whether its victim
    search failed (keyed by (FAILED, rule)). Session.rule_applies and Session.preempt_for
    read and write them."""

    def __init__(self, statement: Statement) -> None:
        self._statement = statement
        self._at: tuple[str, int] | None = None  # the job, and the lasting changes then
        self._facts: dict[object, bool] = {}

    def of(self, job: Job) -> dict[object, bool] | None:
        """The job's facts since the last lasting change; None inside a checkpoint, where
        nothing is kept."""
        statement = self._statement
        if statement.tentative:
            return None
        at = (job.id, statement.lasting)
        if at != self._at:
            self._at = at
            self._facts = {}
        return self._facts
