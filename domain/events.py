"""The contract's events (the QuotaFlow contract §2) as strict pydantic models, plus journal records (pure)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from domain import limits
from domain.resources import ResourceError, Resources, gpu_to_milli

# Lengths are checked before patterns, so a huge id is refused by its length alone.
QueueId = Annotated[
    str,
    StringConstraints(max_length=limits.QUEUE_ID_CHARS_MAX, pattern=r"^[a-z0-9][a-z0-9-]{0,62}$"),
]
# Job and node ids are chosen by users and agents; allow what Kubernetes names and UUIDs use.
_ID = StringConstraints(
    max_length=limits.ID_CHARS_MAX, pattern=r"^[A-Za-z0-9][A-Za-z0-9._:/@-]{0,252}$"
)
JobId = Annotated[str, _ID]
NodeId = Annotated[str, _ID]
Priority = Annotated[int, Field(ge=1, le=9)]
Labels = Annotated[
    dict[
        Annotated[str, StringConstraints(min_length=1, max_length=limits.ID_CHARS_MAX)],
        Annotated[str, StringConstraints(max_length=limits.LABEL_VALUE_CHARS_MAX)],
    ],
    Field(max_length=limits.LABELS_MAX),
]
Module = Annotated[str, StringConstraints(min_length=1, max_length=limits.MODULE_CHARS_MAX)]
Modules = Annotated[list[Module], Field(max_length=limits.MODULES_MAX)]
Seconds = Annotated[int, Field(ge=0, le=limits.DURATION_S_MAX)]


class Strict(BaseModel):
    """Base of every wire model: unknown fields refused, values never coerced, instances frozen."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class ResourcesIn(Strict):
    """Resource amounts as they travel: gpu in devices (thousandths allowed), cpu millicores, memory MB."""

    gpu: Annotated[float, Field(ge=0, le=limits.GPU_MAX, allow_inf_nan=False)] = 0
    cpu: Annotated[int, Field(ge=0, le=limits.CPU_MAX)] = 0
    memory: Annotated[int, Field(ge=0, le=limits.MEMORY_MAX)] = 0

    @field_validator("gpu")
    @classmethod
    def _gpu_exact(cls, value: float) -> float:
        try:
            gpu_to_milli(value)
        except ResourceError as exc:
            raise ValueError(str(exc)) from exc
        return value

    def to_resources(self) -> Resources:
        return Resources.from_amounts(self.gpu, self.cpu, self.memory)


class QueueResource(Strict):
    """One resource of a queue: deserved quota, hard limit and over-quota weight (KAI semantics)."""

    # Per-resource ceilings (limits.QUEUE_AMOUNT_MAX) are checked by QueueConfigured, which
    # knows the resource's name.
    quota: Annotated[float, Field(ge=-1, allow_inf_nan=False)] = 0
    limit: Annotated[float, Field(ge=-1, allow_inf_nan=False)] = 0
    over_quota_weight: (
        Annotated[float, Field(ge=0, le=limits.OVER_QUOTA_WEIGHT_MAX, allow_inf_nan=False)] | None
    ) = None

    @field_validator("quota", "limit")
    @classmethod
    def _minus_one_or_amount(cls, value: float) -> float:
        if value < 0 and value != -1:
            raise ValueError("must be -1 (unlimited) or an amount >= 0")
        return value


def _single_priority_as_range(value: Any) -> Any:
    """A single priority n means the range [n, n]; JSON arrays arrive as lists."""
    if isinstance(value, int) and not isinstance(value, bool):
        return (value, value)
    if isinstance(value, list):
        return tuple(value)
    return value


PriorityRange = Annotated[tuple[Priority, Priority], BeforeValidator(_single_priority_as_range)]


def _check_range(value: tuple[int, int], name: str) -> None:
    if value[0] > value[1]:
        raise ValueError(f"{name} range [{value[0]}, {value[1]}] runs backwards")


class SelfLevelRule(Strict):
    """PAI self-level preemption: jobs in the high range may preempt sibling queues' low-range jobs."""

    high_priority: PriorityRange
    low_priority: PriorityRange
    modules: Modules

    @model_validator(mode="after")
    def _low_below_high(self) -> SelfLevelRule:
        _check_range(self.high_priority, "high_priority")
        _check_range(self.low_priority, "low_priority")
        if self.low_priority[1] >= self.high_priority[0]:
            raise ValueError(
                f"self_level low_priority {list(self.low_priority)} must lie entirely below "
                f"high_priority {list(self.high_priority)}"
            )
        return self


class ChildLevelRule(Strict):
    """PAI child-level preemption: the parent's own jobs may preempt matching jobs below it."""

    priority: PriorityRange
    modules: Modules

    @model_validator(mode="after")
    def _ordered(self) -> ChildLevelRule:
        _check_range(self.priority, "priority")
        return self


class PreemptionRules(Strict):
    self_level: SelfLevelRule | None = None
    child_level: ChildLevelRule | None = None
    within_queue: bool = False


# A queue policy's name: one of the policies registered in domain.plugins.QUEUE_POLICIES.
# These models cannot import that registry (its policies depend on the state, which depends
# on these events), so whoever validates input (codec, manifests, what-if) passes the
# registered names as validation context under POLICY_KINDS, and acceptance refuses an
# unregistered kind as well (docs/architecture.md).
PolicyKind = str
POLICY_KINDS = "policy_kinds"


class QueuePolicyConfig(Strict):
    kind: PolicyKind = "fifo"
    balance_timeout_s: Seconds = 300
    aging_interval_s: Annotated[int, Field(ge=1, le=limits.DURATION_S_MAX)] = 600

    @field_validator("kind", mode="before")
    @classmethod
    def _registered(cls, kind: Any, info: ValidationInfo) -> Any:
        known = (info.context or {}).get(POLICY_KINDS)
        if known is not None and kind not in known:
            names = [repr(name) for name in known]
            expected = " or ".join([", ".join(names[:-1]), names[-1]] if len(names) > 1 else names)
            raise PydanticCustomError(
                "literal_error", "Input should be {expected}", {"expected": expected}
            )
        return kind


ResourceName = Literal["gpu", "cpu", "memory"]


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

    @model_validator(mode="after")
    def _consistent(self) -> JobSubmitted:
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

    @model_validator(mode="after")
    def _incarnation_needs_instance(self) -> NodeHeartbeat:
        if self.incarnation is not None and self.instance is None:
            raise ValueError("incarnation needs instance: an incarnation counts one agent's starts")
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
