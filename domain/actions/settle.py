"""Settle action: what must happen before allocation: lost nodes, restarted agents, cancelled jobs, time limits, timers (pure)."""

from __future__ import annotations

from domain.actions.time_limit import stop_overdue
from domain.cycle.framework import Cycle
from domain.state import JobStatus


class Settle:
    name = "settle"

    def execute(self, cycle: Cycle) -> None:
        state = cycle.state
        if state.timers_due(cycle.ts):
            stop_overdue(cycle)  # time limits; any other due timer only wakes the cycle
        cycle.statement.pop_due_timers(cycle.ts)
        self._lose_silent_nodes(cycle)
        if state.reconcile_requests:
            self._reconcile_restarted_agents(cycle)
        if state.cancel_requests:
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
        node = cycle.state.nodes[node_id]
        for job_id in sorted(node.jobs):
            _lose_tasks(cycle, node_id, job_id, placed=True, stopping=True)
        cycle.statement.lose_node(node_id)

    def _reconcile_restarted_agents(self, cycle: Cycle) -> None:
        """A restarted agent said what it runs; whatever else the node held is lost on it."""
        state = cycle.state
        for node_id in sorted(state.reconcile_requests):
            running = state.reconcile_requests[node_id]
            node = state.nodes.get(node_id)
            if node is None or node.lost:
                continue
            for job_id in sorted(node.jobs):
                job = state.jobs[job_id]
                stopping = job.stopping.get(node_id)
                _lose_tasks(
                    cycle,
                    node_id,
                    job_id,
                    placed=(job_id, job.attempt) not in running,
                    stopping=stopping is not None and (job_id, stopping.attempt) not in running,
                )
        cycle.statement.set(state, "reconcile_requests", {})


def _lose_tasks(cycle: Cycle, node_id: str, job_id: str, placed: bool, stopping: bool) -> None:
    """The job's tasks on the node (placed, being stopped, or both) are gone: free them; the rest
    of a gang is stopped, and a job left with nothing goes back to pending, keeping its place."""
    statement = cycle.statement
    job = cycle.state.jobs[job_id]
    if not statement.lose_tasks(job, node_id, placed=placed, stopping=stopping):
        return
    if job.placements and job.status is JobStatus.RUNNING and job.placed_tasks < job.min_tasks:
        # A gang cannot run without all its tasks, nor an elastic job below min_tasks.
        cycle.stop(job, "node_lost")
    statement.after_tasks_gone(job)
