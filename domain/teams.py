"""Whether a team may submit or cancel a job: its jobs must stay in its part of the queue tree (pure).

A team writes to its own job topic (``quotaflow.jobs.<team>``, guarded by a Kafka ACL); the
scheduler is configured with the queue each team's topic is mapped to and, before admitting
an input read from that topic, asks ``team_refusal``. A refused input never reaches the
journal, so the journal and its replay need not know where an accepted job came from.
"""

from __future__ import annotations

from domain.events import Event, JobCancelled, JobSubmitted
from domain.state import State


def in_subtree(state: State, queue: str, root: str) -> bool:
    """Whether ``queue`` exists and is ``root`` or below it."""
    if queue not in state.queues:
        return False
    return any(ancestor.id == root for ancestor in state.ancestors(queue))


def team_refusal(state: State, team: str, root: str, event: Event) -> str | None:
    """None when team ``team`` (mapped to queue ``root``) may send ``event``, else the reason."""
    if isinstance(event, JobSubmitted):
        if not in_subtree(state, event.queue, root):
            return (
                f"team {team!r} may submit only to queue {root!r} and the queues below it, "
                f"not to {event.queue!r}"
            )
        return None
    if isinstance(event, JobCancelled):
        job = state.jobs.get(event.job)
        if job is not None and not in_subtree(state, job.queue, root):
            return (
                f"team {team!r} may cancel only jobs in queue {root!r} and below it; "
                f"job {event.job!r} is in {job.queue!r}"
            )
        return None  # an unknown job: the core's own admission explains that
    return f"team {team!r}'s job topic carries only JobSubmitted and JobCancelled, not {event.type}"
