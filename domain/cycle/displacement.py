"""Whom a job may not take back from by fairness: who displaced it by an explicit rule, directly
or through a chain of preemptions (pure).

Contract §6: explicit PAI rules dominate fairness, so jobs that a self-level or child-level
rule displaced do not reclaim their resources from the job that displaced them. The same
holds through a chain: if X displaced Y by a self-level rule and Y then reclaimed from Z, the
room X holds came, through Y, from Z as well; Z reclaiming it from X would start the loop
again (X → Y → Z → X, each pair allowed on its own). So a job's explicit superiors are the
jobs that displaced it by an explicit rule, plus the explicit superiors of every job that
displaced it by any rule. Jobs that have ended break the chain. Decision recorded in
docs/preemption.md.
"""

from __future__ import annotations

from domain.cycle.framework import CycleView
from domain.state import Job


def explicit_superiors(cycle: CycleView, job: Job) -> frozenset[str]:
    """The jobs that fairness rules may not preempt for `job` (see the module docstring)."""
    if not job.displaced_by:
        return frozenset()
    memo: dict[str, tuple[int, frozenset[str]]] = cycle.memo("explicit_superiors", dict)
    changes = cycle.lasting_changes()
    cached = memo.get(job.id)
    if cached is not None and changes is not None and cached[0] == changes:
        return cached[1]
    found = _walk(cycle, job)
    if changes is not None:
        memo[job.id] = (changes, found)
    return found


def _walk(cycle: CycleView, job: Job) -> frozenset[str]:
    explicit = cycle.explicit_reasons()
    jobs = cycle.state.jobs
    found: set[str] = set()
    seen = {job.id}
    stack = [job]
    while stack:
        current = stack.pop()
        for displacer, reason in current.displaced_by.items():
            if reason in explicit:
                found.add(displacer)
            above = jobs.get(displacer)
            if above is not None and displacer not in seen:
                seen.add(displacer)
                stack.append(above)
    found.discard(job.id)
    return frozenset(found)


def superiors_key(cycle: CycleView, job: Job) -> tuple[str, ...]:
    """`explicit_superiors` as a sorted tuple, for the caches keyed by job shape."""
    return tuple(sorted(explicit_superiors(cycle, job)))
