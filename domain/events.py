"""The contract's events (the QuotaFlow contract §2) as strict pydantic models, plus journal records (pure)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    model_validator,
)

from domain import limits
from domain.resources import ResourceError, gpu_to_milli
from domain.wire_types import (
    JobId,
    Labels,
    Module,
    NodeId,
    PreemptionRules,
    Priority,
    QueueId,
    QueuePolicyConfig,
    QueueResource,
    ResourceName,
    ResourcesIn,
    Seconds,
    Strict,
)

__all__ = [
    "EVENT_TYPES",
    "AdminEvent",
    "AgentInstance",
    "Attempt",
    "ClusterConfigured",
    "Device",
    "Event",
    "JobCancelled",
    "JobEvent",
    "JobFinished",
    "JobPreempted",
    "JobStarted",
    "JobSubmitted",
    "JournalRecord",
    "NodeEvent",
    "NodeHeartbeat",
    "NodesAlive",
    "QueueConfigured",
    "QueueDeleted",
    "RunningAttempt",
    "Tick",
]


class QueueConfigured(Strict):
    type: Literal["QueueConfigured"] = "QueueConfigured"
    queue: QueueId
    parent: QueueId | None = None
    priority: Annotated[int, Field(ge=-limits.QUEUE_PRIORITY_MAX, le=limits.QUEUE_PRIORITY_MAX)] = 0
    resources: dict[ResourceName, QueueResource] = Field(default_factory=dict)
    policy: QueuePolicyConfig = Field(default_factory=QueuePolicyConfig)
    preemption: PreemptionRules = Field(default_factory=PreemptionRules)

    @model_validator(mode="after")
    def _gpu_amounts_exact(self) -> QueueConfigured:
        for resource, amounts in self.resources.items():
            ceiling = limits.QUEUE_AMOUNT_MAX[resource]
            for field in ("quota", "limit"):
                if getattr(amounts, field) > ceiling:
                    raise ValueError(
                        f"resources.{resource}.{field}: must be at most {ceiling} "
                        f"(limit for a queue's {resource})"
                    )
        gpu = self.resources.get("gpu")
        if gpu is not None:
            for name in ("quota", "limit"):
                amount = getattr(gpu, name)
                if amount != -1:
                    try:
                        gpu_to_milli(amount)
                    except ResourceError as exc:
                        raise ValueError(f"resources.gpu.{name}: {exc}") from exc
        for name, spec in self.resources.items():
            if name != "gpu":
                for field in ("quota", "limit"):
                    amount = getattr(spec, field)
                    if amount != int(amount):
                        raise ValueError(f"resources.{name}.{field} must be a whole number")
        if self.parent == self.queue:
            raise ValueError(f"queue {self.queue} cannot be its own parent")
        return self


class QueueDeleted(Strict):
    type: Literal["QueueDeleted"] = "QueueDeleted"
    queue: QueueId


class ClusterConfigured(Strict):
    type: Literal["ClusterConfigured"] = "ClusterConfigured"
    heartbeat_timeout_s: Annotated[int, Field(ge=1, le=limits.DURATION_S_MAX)] = 30
    placement: Literal["binpack", "spread"] = "binpack"
    consolidation: bool = True
    tick_ms: Annotated[int, Field(ge=limits.TICK_MS_MIN, le=limits.TICK_MS_MAX)] = 1000
    preempt_grace_s: Seconds | None = Field(
        default=None,
        description="how long a preempted task may take to stop (SIGTERM, then SIGKILL) for "
        "jobs that set no preempt_grace_s of their own; unset: Dispatches carry none and "
        "the agent uses its own default",
    )


class JobSubmitted(Strict):
    type: Literal["JobSubmitted"] = "JobSubmitted"
    job: JobId
    queue: QueueId
    priority: Priority = 5
    module: Module = "DLC"
    interactive: bool = False
    preemptible: bool | None = None
    tasks: Annotated[int, Field(ge=1, le=limits.TASKS_MAX)] = 1
    resources: ResourcesIn = Field(default_factory=ResourcesIn)
    min_tasks: Annotated[int, Field(ge=1, le=limits.TASKS_MAX)] | None = None
    node_selector: Labels | None = None
    labels: Labels | None = None
    user: Annotated[str, StringConstraints(max_length=limits.USER_CHARS_MAX)] | None = None
    duration_s: (
        Annotated[float, Field(ge=0, le=limits.DURATION_S_MAX, allow_inf_nan=False)] | None
    ) = None
    time_limit_s: Annotated[int, Field(ge=1, le=limits.DURATION_S_MAX)] | None = Field(
        default=None,
        description="wall time: the scheduler stops the job once it has run this long "
        "(Preempt reason time_limit) and it ends as failed",
    )
    max_retries: Annotated[int, Field(ge=0, le=limits.RETRIES_MAX)] | None = Field(
        default=None,
        description="how many times a failed job is started again (a new attempt, keeping its "
        "place), as Kubernetes' backoffLimit; unset: 0",
    )
    after_ok: Annotated[list[JobId], Field(max_length=limits.AFTER_OK_MAX)] | None = Field(
        default=None,
        description="jobs that must have succeeded before this one starts (Slurm's "
        "--dependency=afterok); if one fails or is cancelled, this job fails",
    )
    preempt_grace_s: Seconds | None = Field(
        default=None,
        description="how long the job's tasks may take to stop when preempted (SIGTERM, "
        "then SIGKILL); unset: the cluster's preempt_grace_s",
    )

    @model_validator(mode="after")
    def _consistent(self) -> JobSubmitted:
        if self.after_ok is not None:
            if self.job in self.after_ok:
                raise ValueError(f"after_ok: job {self.job} cannot wait for itself")
            if len(set(self.after_ok)) != len(self.after_ok):
                raise ValueError("after_ok: a job is named twice")
        if self.min_tasks is not None and self.min_tasks > self.tasks:
            raise ValueError(f"min_tasks {self.min_tasks} must not exceed tasks {self.tasks}")
        if self.interactive and self.preemptible:
            raise ValueError(
                "an interactive job is never preemptible: drop preemptible or interactive"
            )
        return self

    @property
    def is_preemptible(self) -> bool:
        return (not self.interactive) if self.preemptible is None else self.preemptible

    @property
    def least_tasks(self) -> int:
        return self.tasks if self.min_tasks is None else self.min_tasks


class JobCancelled(Strict):
    type: Literal["JobCancelled"] = "JobCancelled"
    job: JobId


Attempt = Annotated[int, Field(ge=1, le=limits.ATTEMPT_MAX)]
AgentInstance = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,63}$")]


class RunningAttempt(Strict):
    """One attempt of a job an agent says it is running on its node."""

    job: JobId
    attempt: Attempt


class Device(Strict):
    """One GPU device of a node: its index (what CUDA_VISIBLE_DEVICES names), model and memory."""

    index: Annotated[int, Field(ge=0, lt=limits.DEVICES_MAX)]
    model: (
        Annotated[str, StringConstraints(min_length=1, max_length=limits.MODULE_CHARS_MAX)] | None
    ) = None
    memory: Annotated[int, Field(ge=0, le=limits.MEMORY_MAX)] | None = Field(
        default=None, description="the device's memory in MB"
    )


class NodeHeartbeat(Strict):
    """A node is alive with this capacity. `instance`, `incarnation` and `running` are optional
    (agents that send them are recognised across restarts; see docs/cli.md, node agent)."""

    type: Literal["NodeHeartbeat"] = "NodeHeartbeat"
    node: NodeId
    instance: AgentInstance | None = Field(
        default=None,
        description="stable id of the agent that holds this node, kept across its restarts",
    )
    incarnation: Annotated[int, Field(ge=1, le=2**53)] | None = Field(
        default=None, description="the agent's start count (needs instance); higher: a restart"
    )
    capacity: ResourcesIn
    labels: Labels = Field(default_factory=dict)
    running: Annotated[list[RunningAttempt], Field(max_length=1_000)] | None = Field(
        default=None,
        description="the (job, attempt) pairs the agent runs now; on a restart (a new "
        "incarnation), jobs placed on the node but missing here are lost on it and requeued",
    )
    devices: Annotated[list[Device], Field(max_length=limits.DEVICES_MAX)] | None = Field(
        default=None,
        description="the node's GPU devices; their count must equal capacity.gpu. Unset: "
        "capacity.gpu devices numbered from 0 (the last partial if it is not whole)",
    )

    @model_validator(mode="after")
    def _incarnation_needs_instance(self) -> NodeHeartbeat:
        if self.incarnation is not None and self.instance is None:
            raise ValueError("incarnation needs instance: an incarnation counts one agent's starts")
        if self.devices is not None:
            indices = [device.index for device in self.devices]
            if len(set(indices)) != len(indices):
                raise ValueError("devices: an index is listed twice")
            if len(indices) != self.capacity.gpu:
                raise ValueError(
                    f"devices: {len(indices)} listed but capacity.gpu is {self.capacity.gpu}; "
                    "they must agree"
                )
        return self


class JobStarted(Strict):
    type: Literal["JobStarted"] = "JobStarted"
    job: JobId
    node: NodeId
    attempt: Attempt


class JobFinished(Strict):
    type: Literal["JobFinished"] = "JobFinished"
    job: JobId
    node: NodeId
    attempt: Attempt
    outcome: Literal["succeeded", "failed"]
    exit_code: Annotated[int, Field(ge=limits.EXIT_CODE_MIN, le=limits.EXIT_CODE_MAX)] | None = (
        Field(default=None, description="the exit code of the job's process on this node")
    )
    reason: Annotated[str, StringConstraints(max_length=limits.EXIT_REASON_CHARS_MAX)] | None = (
        Field(default=None, description='a short reason, e.g. the signal that ended it ("SIGKILL")')
    )


class JobPreempted(Strict):
    type: Literal["JobPreempted"] = "JobPreempted"
    job: JobId
    node: NodeId
    attempt: Attempt


class Tick(Strict):
    """Time passing: appended by the sequencer when nothing else arrives for tick_ms."""

    type: Literal["Tick"] = "Tick"


AdminEvent = QueueConfigured | QueueDeleted | ClusterConfigured
JobEvent = JobSubmitted | JobCancelled
NodeEvent = NodeHeartbeat | JobStarted | JobFinished | JobPreempted


class NodesAlive(Strict):
    """Nodes heard from since their last journaled heartbeat, each with the ts it was last heard.

    Appended by the sequencer only, instead of journaling heartbeats that change nothing the
    core sees, so the journal does not grow with idle time (docs/scheduler.md, Liveness).
    """

    type: Literal["NodesAlive"] = "NodesAlive"
    seen: Annotated[
        dict[NodeId, Annotated[int, Field(ge=0, le=limits.TS_MAX)]],
        Field(max_length=limits.NODES_ALIVE_MAX),
    ]


Event = AdminEvent | JobEvent | NodeEvent | Tick | NodesAlive

EVENT_TYPES: dict[str, type[Strict]] = {
    cls.__name__: cls
    for cls in (
        QueueConfigured,
        QueueDeleted,
        ClusterConfigured,
        JobSubmitted,
        JobCancelled,
        NodeHeartbeat,
        JobStarted,
        JobFinished,
        JobPreempted,
        Tick,
        NodesAlive,
    )
}


class JournalRecord(BaseModel):
    """One journal entry: an accepted event (or a Tick) with its position `seq` and stamp `ts`."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    seq: int
    ts: int
    event: Event
