"""Look-alike keys: what trying a pending job reads of it, as one key all jobs of that shape share (pure).

A blocked try changes nothing lasting, so a job whose key equals that of a job found blocked
in the cycle, with no lasting change since, is blocked for the same reason
(`Session.try_schedule`, `Session.known_verdict`). The key holds the job's priority only
where some preemption rule may read it: fitting, the resolvers and the reclaim rules never
do.
"""

from __future__ import annotations

from domain.cycle.framework import CycleView, PluginSet
from domain.entities import ShapeKey
from domain.state import Job, JobStatus, State


class LookAlikeKeys:
    """The keys of one cycle. `view` is the cycle as the rules see it (a weak proxy: the
    session holds this object, and a finished cycle is freed by reference counting)."""

    def __init__(self, state: State, plugins: PluginSet, view: CycleView) -> None:
        self._state = state
        self._rules = plugins.preemption_rules
        self._view = view
        # Per queue: whether some preemption rule may read its jobs' priority (kept with the
        # configuration, for these rules: see `_reads_priority`).
        self._priority_read = _priority_reads(state, plugins)

    def key(self, job: Job) -> ShapeKey | None:
        """Everything trying a pending job reads of it (its priority only when some rule
        may), as the key all jobs of that shape share; or None for a job whose try also reads
        its own history (held room, awaited victims, who displaced it). Asked for every
        pending job a cycle reaches."""
        if job.held or job.awaiting or job.displaced_by or job.status is not _PENDING:
            return None
        priority = self._priority_read.get(job.queue)
        if priority is None:
            priority = self._reads_priority(job)
        key = job.shape_key
        if key is None or key.priority is not priority:
            key = self._state.shape_keys.shared(job.shape(priority=priority), priority)
            job.shape_key = key
        return key

    def _reads_priority(self, job: Job) -> bool:
        """Asked once per queue until the configuration changes: a rule's answer reads only
        the job's queue and the configuration (PreemptionRule.reads_priority)."""
        known = self._priority_read.get(job.queue)
        if known is None:
            view = self._view
            known = self._priority_read[job.queue] = any(
                rule.reads_priority(view, job) for rule in self._rules
            )
        return known


# Read once: an enum member read through its class costs a lookup, and `key` runs for every
# pending job a cycle reaches.
_PENDING = JobStatus.PENDING


def _priority_reads(state: State, plugins: PluginSet) -> dict[str, bool]:
    """The answers of `LookAlikeKeys._reads_priority` so far, per queue, kept in the state's
    configuration memo for these preemption rules (another rule set starts anew)."""
    memo = state.configuration_memo
    kept = memo.get("reads_priority")
    rules = plugins.preemption_rules
    if not isinstance(kept, tuple) or kept[0] is not rules:
        kept = memo["reads_priority"] = (rules, {})
    answers: dict[str, bool] = kept[1]
    return answers
