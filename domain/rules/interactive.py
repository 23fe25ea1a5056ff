"""Interactive preemption (Run:AI): an interactive job within its queue's deserved quota takes
from that queue's unattended preemptible jobs (pure).

Admission already keeps interactive jobs within deserved quota, and the victim selector's
simulation re-checks that quota once the victims are gone, so this rule only names who may
make room: the same queue's running unattended jobs. Interactive and non-preemptible jobs are
never victims (the victim selector's universal filter), and an interactive job is never preemptible,
so no victim can preempt it back.
"""

from __future__ import annotations

from collections.abc import Iterator

from domain.commands import PreemptReason
from domain.cycle.framework import CycleView
from domain.state import Job


class Interactive:
    reason: PreemptReason = "interactive"
    explains = (
        "interactive: an interactive job within its queue's deserved quota preempted one of "
        "that queue's unattended jobs"
    )
    explicit = False  # a PAI rule: dominates fairness
    fairness = False

    def applies(self, cycle: CycleView, job: Job) -> bool:
        return job.interactive

    def candidate_queues(self, cycle: CycleView, job: Job) -> Iterator[str]:
        yield job.queue

    def admits(self, cycle: CycleView, job: Job, victim: Job) -> bool:
        return job.interactive and victim.queue == job.queue and not victim.interactive

    def reads_priority(self, cycle: CycleView, job: Job) -> bool:
        return False  # no verdict reads a job's priority

    def allows_after(self, cycle: CycleView, job: Job, victims: list[Job]) -> bool:
        return True
