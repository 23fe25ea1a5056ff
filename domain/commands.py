"""The contract's commands to node agents (the QuotaFlow contract §3) and refusals (pure)."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field

DispatchReason = Literal["quota", "over_quota", "expand", "consolidation"]
# "time_limit" is the issue's: the job ran its JobSubmitted.time_limit_s.
# "cancelled" and "node_lost" extend the contract's list where it is silent: a running job that
# is cancelled, or the rest of a gang whose node was lost, must still be stopped by its agents.
PreemptReason = Literal[
    "reclaim",
    "priority",
    "interactive",
    "self_level",
    "child_level",
    "consolidation",
    "shrink",
    "cancelled",
    "node_lost",
    "time_limit",
]


class Command(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    def to_wire(self) -> dict[str, Any]:
        """The command as a JSON-ready dict: what `model_dump(mode="json")` gives, since
        every field of a command holds JSON values already, read off the fields directly
        (half the instructions for a Dispatch). The dict shares the command's lists and
        dicts: read only."""
        return dict(self.__dict__)


class Dispatch(Command):
    """Run `tasks` of `job` on `node`, each with `resources` (wire form)."""

    type: Literal["Dispatch"] = "Dispatch"
    job: str
    node: str
    tasks: int
    resources: dict[str, Any]
    attempt: int
    seq: int
    ts: int
    reason: DispatchReason
    # What the agent needs to run the job travels with it, so no agent reads the journal.
    # Optional and written only when set: a Dispatch without them is as before.
    duration_s: float | None = Field(
        default=None, description="the job's duration_s from JobSubmitted (run time), if any"
    )
    labels: dict[str, str] | None = Field(
        default=None, description='the job\'s labels from JobSubmitted (e.g. "command"), if any'
    )
    user: str | None = Field(default=None, description="the job's user from JobSubmitted, if any")
    incarnation: int | None = Field(
        default=None,
        description="the incarnation of the node's agent this is addressed to (when the agent "
        "sends one); an agent ignores a Dispatch for another incarnation of itself: the core "
        "requeued that job when the restart's heartbeat arrived",
    )

    devices: list[list[int]] | None = Field(
        default=None,
        description="per task, the indices of the GPU devices the core placed it on: whole "
        "devices of its own for a whole-GPU task, one shared device (the fullest it fits) for "
        "a fractional one; unset when it uses no GPU (docs/devices.md)",
    )
    gpu_fraction: float | None = Field(
        default=None,
        description="for a fractional task (resources.gpu below 1): its share of the device it "
        "shares, e.g. 0.5",
    )
    preempt_grace_s: int | None = Field(
        default=None,
        description="seconds the agent waits after SIGTERM before SIGKILL when it preempts "
        "these tasks (the job's, or the cluster's default)",
    )

    OPTIONAL_ON_WIRE: ClassVar[tuple[str, ...]] = (
        "duration_s",
        "labels",
        "user",
        "incarnation",
        "devices",
        "gpu_fraction",
        "preempt_grace_s",
    )

    def to_wire(self) -> dict[str, Any]:
        """As Command.to_wire, without the optional fields left unset (OPTIONAL_ON_WIRE)."""
        return {name: value for name, value in self.__dict__.items() if value is not None}


class Preempt(Command):
    """Stop `tasks` of `job` on `node`; the agent answers with JobPreempted."""

    type: Literal["Preempt"] = "Preempt"
    job: str
    node: str
    tasks: int
    attempt: int
    seq: int
    ts: int
    reason: PreemptReason
    by: str | None = None


class Rejected(Command):
    """An input the scheduler refused, kept whole with a reason a person can act on."""

    type: Literal["Rejected"] = "Rejected"
    ts: int
    input: str
    reason: str


NodeCommand = Dispatch | Preempt
