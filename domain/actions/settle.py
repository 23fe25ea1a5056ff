"""Settle action: what must happen before allocation: lost nodes, cancelled jobs, timers (pure)."""

from __future__ import annotations

import heapq

from domain.session import Session
from domain.state import JobStatus


class Settle:
    name = "settle"

    def execute(self, session: Session) -> None:
        state = session.state
        state.pop_due_timers(session.ts)  # a due timer only wakes the cycle
        self._lose_silent_nodes(session)
        if state.reconcile_requests:
            self._reconcile_restarted_agents(session)
        for job_id in sorted(state.cancel_requests):
            job = state.jobs.get(job_id)
            if job is not None and job.placements:
                session.stop(job, "cancelled", requeue=False)
        state.cancel_requests.clear()

    def _lose_silent_nodes(self, session: Session) -> None:
        state = session.state
        timeout_ms = state.cluster.heartbeat_timeout_s * 1000
        expiry = state.heartbeat_expiry
        while expiry and expiry[0][0] <= session.ts:
            _, node_id = heapq.heappop(expiry)
            node = state.nodes.get(node_id)
            if node is None or node.lost or node.last_heartbeat_ts + timeout_ms > session.ts:
                continue  # stale entry: a later heartbeat pushed a later one
            self._lose(session, node_id)

    def _lose(self, session: Session, node_id: str) -> None:
        """The node's tasks are gone with it; their jobs go back to pending, keeping their place."""
        state = session.state
        node = state.nodes[node_id]
        for job_id in sorted(node.jobs):
            _lose_tasks(session, node_id, job_id, placed=True, stopping=True)
        node.lost = True
        state.capacity = state.capacity - node.capacity
        state.node_index.discard(node_id)
        state.fair_share_stale = True

    def _reconcile_restarted_agents(self, session: Session) -> None:
        """A restarted agent said what it runs; whatever else the node held is lost on it."""
        state = session.state
        for node_id in sorted(state.reconcile_requests):
            running = state.reconcile_requests[node_id]
            node = state.nodes.get(node_id)
            if node is None or node.lost:
                continue
            for job_id in sorted(node.jobs):
                job = state.jobs[job_id]
                stopping = job.stopping.get(node_id)
                _lose_tasks(
                    session,
                    node_id,
                    job_id,
                    placed=(job_id, job.attempt) not in running,
                    stopping=stopping is not None and (job_id, stopping.attempt) not in running,
                )
        state.reconcile_requests.clear()


def _lose_tasks(session: Session, node_id: str, job_id: str, placed: bool, stopping: bool) -> None:
    """The job's tasks on the node (placed, being stopped, or both) are gone: free them; the rest
    of a gang is stopped, and a job left with nothing goes back to pending, keeping its place."""
    state = session.state
    job = state.jobs[job_id]
    tasks = job.placements.pop(node_id, 0) if placed else 0
    stop = state.end_stop(job, node_id) if stopping else None
    lost = tasks + (stop.tasks if stop else 0)
    if lost == 0:
        return
    state.release(job, node_id, lost)
    if job.placements and job.status is JobStatus.RUNNING and job.placed_tasks < job.min_tasks:
        # A gang cannot run without all its tasks, nor an elastic job below min_tasks.
        session.stop(job, "node_lost")
    state.after_tasks_gone(job)
