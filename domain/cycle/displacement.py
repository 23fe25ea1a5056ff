"""Whom a job may not take back from by fairness: who displaced it by a rule that dominates
fairness, directly or through a chain of preemptions (pure).

Contract §6: explicit PAI rules dominate fairness, so jobs that a self-level or child-level
rule displaced do not reclaim their resources from the job that displaced them. The same
holds through a chain: if X displaced Y by a self-level rule and Y then reclaimed from Z, the
room X holds came, through Y, from Z as well; Z reclaiming it from X would start the loop
again (X → Y → Z → X, each pair allowed on its own). A displacement within a queue (priority,
interactive) starts such a chain too: X took Y's room within their queue, Y reclaimed room
from Z's queue, and Z reclaiming from X would free Y's room for X to take again, for ever
(the fairness rules cannot take within a queue, so only the chain matters). So a job's
dominating superiors are the jobs that displaced it by a rule that is not a fairness rule,
plus the dominating superiors of every job that displaced it by any rule. Jobs that have
ended break the chain. Decision recorded in docs/preemption.md.
"""

from __future__ import annotations

from collections.abc import Iterable

from domain.cycle.framework import Cycle, CycleView, PreemptionRule
from domain.state import Job


def dominating_superiors(cycle: CycleView, job: Job) -> frozenset[str]:
    """The jobs that fairness rules may not preempt for `job` (see the module docstring)."""
    if not job.displaced_by:
        return frozenset()
    memo: dict[str, tuple[int, frozenset[str]]] = cycle.memo("dominating_superiors", dict)
    changes = cycle.lasting_changes()
    cached = memo.get(job.id)
    if cached is not None and changes is not None and cached[0] == changes:
        return cached[1]
    found = _walk(cycle, job)
    if changes is not None:
        memo[job.id] = (changes, found)
    return found


def _walk(cycle: CycleView, job: Job) -> frozenset[str]:
    dominating = cycle.dominating_reasons()
    jobs = cycle.state.jobs
    found: set[str] = set()
    seen = {job.id}
    stack = [job]
    while stack:
        current = stack.pop()
        for displacer, reason in current.displaced_by.items():
            if reason in dominating:
                found.add(displacer)
            above = jobs.get(displacer)
            if above is not None and displacer not in seen:
                seen.add(displacer)
                stack.append(above)
    found.discard(job.id)
    return frozenset(found)


def superiors_key(cycle: CycleView, job: Job) -> tuple[str, ...]:
    """`dominating_superiors` as a sorted tuple, for the caches keyed by job shape."""
    return tuple(sorted(dominating_superiors(cycle, job)))


def takes_back(cycle: Cycle, job: Job, rule: PreemptionRule, victims: Iterable[Job]) -> bool:
    """Whether a victim, now that the preemption is issued (its tasks stopping, the room held
    for `job`), could take the room right back under a fairness rule (contract section 6: no
    preemption cycles): the rule admits it against `job`, and allows the whole set, `job`,
    once `job`'s held room is given up (a tentative drop, rolled back here).

    The selector's first filter (`could_preempt_back`) asks each rule before anything stops,
    which is exact for the explicit rules (they read priorities and modules) but not for
    fairness, which reads usage: here the usage is the one after. Fair shares in whole
    devices can leave a queue's own fractional use of its deserved quota outside its fair
    share (docs/quotas.md, "No reclaim ping-pong"); without this, it and a queue above its
    deserved quota would take a GPU from each other every second. For an explicit rule's
    preemption fairness does not count, as in the first filter (the victim, displaced by an
    explicit rule, is refused by the fairness rules anyway: `dominating_superiors`)."""
    if rule.explicit or not job.preemptible or job.interactive:
        return False
    fairness = [other for other in cycle.plugins.preemption_rules if other.fairness]
    admitted = [
        (victim, other)
        for victim in victims
        for other in fairness
        if other.admits(cycle, victim, job)
    ]
    if not admitted:
        return False
    statement = cycle.statement
    given_up = statement.checkpoint()
    statement.drop_holds(job)
    found = any(other.allows_after(cycle, victim, [job]) for victim, other in admitted)
    statement.rollback(given_up)
    return found


TakeBackKey = tuple[object, ...]


def _take_back_key(job: Job) -> TakeBackKey:
    """What `takes_back` reads of the preemptor: its queue, request and kind."""
    return (job.queue, job.per_task, job.tasks, job.node_selector, job.preemptible, job.interactive)


def note_taken_back(cycle: Cycle, job: Job, victims: Iterable[Job]) -> None:
    """Remembers, until the next lasting change in the cycle, the queues whose victims a
    preemption for a job of this kind was rolled back for (`takes_back`): the job's reason
    then says so (domain/cycle/reclaim_reasons.py, `takes_back`)."""
    changes = cycle.lasting_changes()
    if changes is None:
        return
    memo: dict[TakeBackKey, tuple[int, frozenset[str]]] = cycle.memo("taken_back", dict)
    key = _take_back_key(job)
    queues = frozenset(victim.queue for victim in victims)
    seen = memo.get(key)
    if seen is not None and seen[0] == changes:
        queues |= seen[1]
    memo[key] = (changes, queues)


def taken_back_queues(cycle: Cycle, job: Job) -> frozenset[str]:
    """The queues `note_taken_back` noted for a job of this kind since the last lasting change."""
    changes = cycle.lasting_changes()
    memo: dict[TakeBackKey, tuple[int, frozenset[str]]] = cycle.memo("taken_back", dict)
    seen = memo.get(_take_back_key(job))
    if seen is None or changes is None or seen[0] != changes:
        return frozenset()
    return seen[1]
