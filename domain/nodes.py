"""Node agents as the core sees them: who holds a node, restarts, what a Dispatch carries (pure).

An agent may name itself in its heartbeats: a stable `instance` id and an `incarnation` that
grows with each of its starts. The core then
- refuses a heartbeat from another instance (or from no instance) while the node's holder is
  live, and one from an older incarnation of the holder (a stale process still sending);
- on a restart (a new incarnation, or a new instance taking over a node not yet lost) that
  reports what it `running`, asks the next cycle to treat every job placed on the node but
  not reported as lost on it (requeued with a new attempt, keeping its place);
- stamps each Dispatch with the node's incarnation, so an agent ignores a Dispatch addressed
  to an earlier start of itself: the core has already requeued that job (see docs/cli.md).
Heartbeats without these fields behave exactly as before.
"""

from __future__ import annotations

from domain.commands import Dispatch, DispatchReason
from domain.devices import WHOLE, Assignment
from domain.events import NodeHeartbeat
from domain.resources import milli_to_gpu
from domain.state import Job, Node, State
from domain.trusted import Trusted


def heartbeat_refusal(state: State, event: NodeHeartbeat) -> str | None:
    """Why this heartbeat may not speak for its node, or None when it may."""
    node = state.nodes.get(event.node)
    if node is None or node.lost or node.instance is None:
        # A new node, one already lost, or one held by an agent that names no instance (an
        # agent from before instances, replaced by one that names itself): anyone may take it.
        return None
    frees = (
        f"the node frees {state.cluster.heartbeat_timeout_s}s after the holder's last "
        f"heartbeat (ts {node.last_heartbeat_ts})"
    )
    if event.instance != node.instance:
        sender = "names no instance" if event.instance is None else f"is from {event.instance}"
        return (
            f"node {event.node!r} is held by agent instance {node.instance} (incarnation "
            f"{node.incarnation}); this heartbeat {sender}: stop the other agent, or start this "
            f"one with another --node name; {frees}"
        )
    if event.incarnation is not None and event.incarnation < node.incarnation:
        return (
            f"node {event.node!r}: incarnation {event.incarnation} of agent instance "
            f"{node.instance} is older than its current incarnation {node.incarnation}: an "
            "earlier start of this agent is still running; stop it"
        )
    return None


def note_holder(state: State, node: Node, event: NodeHeartbeat) -> None:
    """Records which agent holds the node; a restart that says what it runs asks for a
    reconciliation in the next cycle (only then: a normal heartbeat never loses a job that
    was dispatched after the agent last looked)."""
    incarnation = event.incarnation or 0
    restarted = event.instance != node.instance or incarnation != node.incarnation
    if restarted and event.running is not None and node.jobs and not node.lost:
        state.reconcile_requests[node.id] = frozenset(
            (running.job, running.attempt) for running in event.running
        )
        state.needs_cycle = True
    node.instance = event.instance
    node.incarnation = incarnation


def dispatch_command(
    state: State,
    job: Job,
    node_id: str,
    tasks: int,
    devices: tuple[Assignment, ...],
    seq: int,
    ts: int,
    reason: DispatchReason,
) -> Dispatch:
    """The Dispatch of `tasks` of the job to a node: where and why, and what the agent needs
    to run it, including the devices its tasks were placed on (none for a job that asks no
    GPU). Built from the job's validated request without validating again (domain/trusted.py)."""
    spec = job.spec
    per_task = job.per_task
    gpu = per_task.gpu
    return _DISPATCH(
        job=job.id,
        node=node_id,
        tasks=tasks,
        resources=per_task.to_wire(),
        attempt=job.attempt,
        seq=seq,
        ts=ts,
        reason=reason,
        duration_s=spec.duration_s,
        labels=None if spec.labels is None else dict(spec.labels),
        user=spec.user,
        incarnation=state.nodes[node_id].incarnation or None,
        devices=[list(task) for task in devices] if gpu else None,
        gpu_fraction=milli_to_gpu(gpu) if 0 < gpu < WHOLE else None,
        # The job's grace period, else the cluster's; neither set: none (the agent's default).
        preempt_grace_s=(
            spec.preempt_grace_s
            if spec.preempt_grace_s is not None
            else state.cluster.preempt_grace_s
        ),
    )


_DISPATCH = Trusted(Dispatch)
