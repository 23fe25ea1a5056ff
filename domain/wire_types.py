"""The wire contract's building blocks: ids, strict base model, resource amounts, queue settings (pure)."""

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
