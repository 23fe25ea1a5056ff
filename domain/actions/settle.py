"""Settle action: what must happen before allocation: lost nodes, cancelled jobs, timers (pure)."""

from __future__ import annotations

from domain.cycle.framework import Cycle
from domain.state import JobStatus


class Settle:
    name = "settle"

    def execute(self, cycle: Cycle) -> None:
        state = cycle.state
        cycle.statement.pop_due_timers(cycle.ts)  # a due timer only wakes the cycle
        self._lose_silent_nodes(cycle)
        for job_id in sorted(state.cancel_requests):
            job = state.jobs.get(job_id)
            if job is not None and job.placements:
                cycle.stop(job, "cancelled", requeue=False)
        cycle.statement.set(state, "cancel_requests", set())

    def _lose_silent_nodes(self, cycle: Cycle) -> None:
        state = cycle.state
        timeout_ms = state.cluster.heartbeat_timeout_s * 1000
        for node_id in cycle.statement.pop_heartbeat_expiry(cycle.ts):
            node = state.nodes.get(node_id)
            if node is None or node.lost or node.last_heartbeat_ts + timeout_ms > cycle.ts:
                continue  # stale entry: a later heartbeat pushed a later one
            self._lose(cycle, node_id)

    def _lose(self, cycle: Cycle, node_id: str) -> None:
        """The node's tasks are gone with it; their jobs go back to pending, keeping their place."""
        state = cycle.state
        statement = cycle.statement
        node = state.nodes[node_id]
        for job_id in sorted(node.jobs):
            job = state.jobs[job_id]
            statement.lose_tasks(job, node_id)
            if (
                job.placements
                and job.status is JobStatus.RUNNING
                and job.placed_tasks < job.min_tasks
            ):
                # A gang cannot run without all its tasks, nor an elastic job below min_tasks.
                cycle.stop(job, "node_lost")
            statement.after_tasks_gone(job)
        statement.lose_node(node_id)
