"""A node agent's settings and its heartbeat, and the partition its commands arrive on (I/O shell)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from aiokafka.partitioner import murmur2

from domain.codec import decode_ingress
from domain.events import NodeHeartbeat
from streams import topics
from streams.agent_devices import Gpu
from streams.kafka_io import Topics

KILL_GRACE_S = 10.0
STATE_DIR_ENV = "QUOTAFLOW_STATE_DIR"


def default_state_dir() -> Path:
    """$QUOTAFLOW_STATE_DIR, else $XDG_STATE_HOME/quotaflow/agents, else ~/.local/state/..."""
    explicit = os.environ.get(STATE_DIR_ENV)
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "quotaflow" / "agents"


@dataclass(frozen=True)
class AgentConfig:
    bootstrap: str
    node: str
    gpu: float = 8
    cpu: int = 64000
    memory: int = 512000
    labels: dict[str, str] = field(default_factory=dict)
    heartbeat_s: float = 5.0
    exec_jobs: bool = False
    topic_prefix: str = ""
    metrics_port: int | None = None  # serve /metrics and /health there (streams/metrics.py)
    metrics_host: str = "127.0.0.1"
    kill_grace_s: float = KILL_GRACE_S
    state_dir: Path | None = None  # None: default_state_dir()
    devices: tuple[Gpu, ...] = ()  # reported in the heartbeat when known

    def topic(self, name: str) -> str:
        return Topics.for_prefix(self.topic_prefix).name(name)

    @property
    def group_id(self) -> str:
        return f"{self.topic_prefix}quotaflow-agent-{self.node}"

    def heartbeat(
        self,
        instance: str | None = None,
        incarnation: int | None = None,
        running: list[tuple[str, int]] | None = None,
    ) -> NodeHeartbeat:
        """This node's heartbeat, checked by the scheduler's codec; raises DecodeError."""
        body: dict[str, Any] = {"type": "NodeHeartbeat", "node": self.node}
        if instance is not None:  # early in the object: a rejection's input prefix shows it
            body["instance"] = instance
            body["incarnation"] = incarnation
        body["capacity"] = {"gpu": self.gpu, "cpu": self.cpu, "memory": self.memory}
        body["labels"] = self.labels
        if self.devices:
            body["devices"] = [_device(gpu) for gpu in self.devices]
        if running is not None:
            body["running"] = [{"job": job, "attempt": attempt} for job, attempt in running]
        event = decode_ingress(topics.NODES, orjson.dumps(body))
        assert isinstance(event, NodeHeartbeat)
        return event


def _device(gpu: Gpu) -> dict[str, Any]:
    body: dict[str, Any] = {"index": gpu.index}
    if gpu.model is not None:
        body["model"] = gpu.model
    if gpu.memory is not None:
        body["memory"] = gpu.memory
    return body


def partition_for(key: str, partitions: int) -> int:
    """The partition Kafka's default partitioner picks for `key` (murmur2, as the Java client)."""
    return int(murmur2(key.encode()) & 0x7FFFFFFF) % partitions
