"""Why reclaim did not help a blocked job: the queues looked at and what stopped each (pure).

Asked only for a job that is blocked for room while its queue is below its deserved quota
and entitled to reclaim (a fairness rule applies), and every rule's victim search failed. Each other queue running work
is classified by the first thing that ruled it out: it is at or below its fair share and its
deserved quota (`within_share`); it runs no preemptible unattended jobs
(`not_preemptible`: non-preemptible or interactive); its jobs are not admitted as victims
(`not_admitted`: they could take the room back, were dispatched in this cycle, or displaced
this job, directly or through a chain, by a rule that dominates fairness); a victim set was
found, but its jobs could then take the room right back (`takes_back`,
domain/cycle/displacement.py); none runs on a node matching
the job's node selector (`node_selector`); or every sufficient victim set would take it
below its fair share and deserved quota, or frees no set of nodes the job fits on
(`insufficient`). Cached per job shape while nothing lasting changed in the cycle; and,
when no other queue is a candidate (every one is `within_share`), across cycles too: that
reason reads only the blocked reason, the job's queue and which queues run work
(`_all_within_share`).
"""

from __future__ import annotations

from typing import cast

from domain.cycle.displacement import superiors_key, taken_back_queues
from domain.cycle.framework import Cycle, PreemptionRule
from domain.reasons import Reason, ReasonKind, reason
from domain.rules.reclaim_deserved import below_deserved
from domain.state import Job

SHOWN = 5  # queues named in the sentence; the facts carry all of them
ALL_WITHIN = "reclaim_reasons_all_within_share"  # configuration memo (see _all_within_share)
ALL_WITHIN_MAX = 4096  # (queue, blocked reason) entries kept before the memo starts anew
# (job's queue, blocked reason) -> (the queues running work then, the reason given)
_AllWithin = dict[tuple[str, Reason], tuple[tuple[str, ...], Reason | None]]


def reclaim_reason(cycle: Cycle, job: Job, blocked: Reason) -> Reason | None:
    """The reason why reclaim did not make room, or None when the job's queue may not
    reclaim at all (then the room reason stands alone)."""
    displaced = superiors_key(cycle, job)
    key: tuple[object, ...] = (job.queue, job.per_task, job.tasks, job.node_selector)
    key += (job.priority, blocked.text, job.module, job.interactive, job.preemptible, displaced)
    memo: dict[object, tuple[int, Reason | None]] = cycle.memo("reclaim_reasons", dict)
    cached = memo.get(key)
    changes = cycle.lasting_changes()
    if cached is not None and changes is not None and cached[0] == changes:
        return cached[1]
    found = _reason(cycle, job, blocked)
    if changes is not None:
        memo[key] = (changes, found)
    return found


def _reason(cycle: Cycle, job: Job, blocked: Reason) -> Reason | None:
    if not below_deserved(cycle, job):
        return None  # the promise is kept: the room reason stands alone
    rules = [
        rule
        for rule in cycle.plugins.preemption_rules
        if rule.fairness and not rule.explicit and cycle.rule_applies(rule, job)
    ]
    if not rules:
        return None
    return _diagnose(cycle, job, rules, blocked)


def _diagnose(
    cycle: Cycle, job: Job, rules: list[PreemptionRule], blocked: Reason
) -> Reason | None:
    candidates: set[str] = set()
    for rule in rules:
        candidates.update(rule.candidate_queues(cycle, job))
    if not candidates:
        return _all_within_share(cycle, job, blocked)
    return _classified(cycle, job, rules, blocked, candidates)


def _all_within_share(cycle: Cycle, job: Job, blocked: Reason) -> Reason | None:
    """The reason when no other queue is a candidate: every other queue running work is
    `within_share`. It reads nothing but the blocked reason, the job's queue and the queues
    running work, so it is kept across cycles under the first two while the last is equal
    (in the configuration memo, derived, never saved): a queue's blocked head, asked again
    cycle after cycle, gets the very same reason without building its 2 x queues facts."""
    running = _running_queues(cycle)[0]
    memo = cycle.state.configuration_memo
    kept = cast(_AllWithin | None, memo.get(ALL_WITHIN))
    if kept is None or len(kept) >= ALL_WITHIN_MAX:
        kept = {}
        memo[ALL_WITHIN] = kept
    key = (job.queue, blocked)
    found = kept.get(key)
    if found is not None and found[0] == running:
        return found[1]
    reason_now = _classified(cycle, job, [], blocked, set())
    kept[key] = (running, reason_now)
    return reason_now


def _classified(
    cycle: Cycle, job: Job, rules: list[PreemptionRule], blocked: Reason, candidates: set[str]
) -> Reason | None:
    """Each other queue running work with its why: `within_share` unless a candidate."""
    running, within, where = _running_queues(cycle)
    own = where.get(job.queue)
    if own is None:
        looked, stopped = running, list(within)
    else:
        looked, stopped = running[:own] + running[own + 1 :], [*within[:own], *within[own + 1 :]]
    if not looked:
        return None  # nobody else runs work: the room reason says it all
    # Every other queue is within its share but the candidates, each classified.
    for queue_id in sorted(candidates):
        position = where.get(queue_id)
        if position is None or queue_id == job.queue:
            continue
        if own is not None and position > own:
            position -= 1
        stopped[position] = f"{queue_id}={_why(cycle, job, rules, queue_id, candidates)}"
    shown = ", ".join(item.replace("=", ": ") for item in stopped[:SHOWN])
    more = f" and {len(stopped) - SHOWN} more" if len(stopped) > SHOWN else ""
    text = f"{blocked.text}; reclaim did not help: {shown}{more}"
    facts = dict(blocked.facts)
    facts["looked_at"] = looked
    facts["stopped"] = tuple(stopped)
    return reason(ReasonKind.RECLAIM, text, **facts)


# The queues running work (sorted), each as `within_share`, and each one's position.
_Running = tuple[tuple[str, ...], tuple[str, ...], dict[str, int]]


def _running_queues(cycle: Cycle) -> _Running:
    """The queues running work, sorted, each with its `within_share` entry and its position;
    kept while nothing lasting changed (who runs where changes only by lasting changes), so
    a diagnosis copies them and classifies only the candidates."""
    memo: dict[str, tuple[int, _Running]] = cycle.memo("running_queues", dict)
    changes = cycle.lasting_changes()
    cached = memo.get("all")
    if cached is not None and changes is not None and cached[0] == changes:
        return cached[1]
    queues = cycle.state.queues
    running = tuple(q for q in sorted(queues) if queues[q].running)
    found = (
        running,
        tuple(f"{q}=within_share" for q in running),
        {q: position for position, q in enumerate(running)},
    )
    if changes is not None:
        memo["all"] = (changes, found)
    return found


def _why(
    cycle: Cycle, job: Job, rules: list[PreemptionRule], queue_id: str, candidates: set[str]
) -> str:
    if queue_id not in candidates:
        return "within_share"
    state = cycle.state
    running = [state.jobs[j] for j in sorted(state.queues[queue_id].running)]
    usable = [j for j in running if j.preemptible and not j.interactive]
    if not usable:
        return "not_preemptible"
    if queue_id in taken_back_queues(cycle, job):
        return "takes_back"  # a victim set was found, but it could take the room right back
    # The first admitted victim settles it, unless the job has a node selector: then the
    # first admitted victim on a matching node does (the same answer as classifying all).
    admitted = False
    for victim in usable:
        if not any(cycle.may_be_victim(job, victim, r) for r in rules):
            continue
        if not job.node_selector:
            return "insufficient"
        admitted = True
        if any(
            n in state.nodes and state.nodes[n].matches(job.node_selector)
            for n in victim.placements
        ):
            return "insufficient"
    return "node_selector" if admitted else "not_admitted"
