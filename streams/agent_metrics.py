"""Prometheus metrics and /health of a node agent (I/O shell): commands received, reports sent, jobs running."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Protocol

from prometheus_client import CollectorRegistry, Counter
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from streams.metrics import gauge as _gauge
from streams.metrics import wall_s


class Agent(Protocol):
    """What the monitor reads of `streams.agent.Agent`."""

    state: Any

    @property
    def runs(self) -> dict[str, Any]: ...


class AgentMonitor:
    """A node agent's counters and a collector over its runs."""

    def __init__(self, node: str) -> None:
        self.node = node
        self.registry = CollectorRegistry()
        self.agent: Agent | None = None
        self.started_s = wall_s()
        self.last_heartbeat_s: float | None = None
        r = self.registry
        self.reports = Counter(
            "quotaflow_agent_reports", "Events the agent sent", ["type"], registry=r
        )
        self.commands = Counter(
            "quotaflow_agent_commands", "Commands addressed to this node", ["type"], registry=r
        )
        r.register(_AgentCollector(self))

    def sent(self, kind: str) -> None:
        self.reports.labels(kind).inc()
        if kind == "NodeHeartbeat":
            self.last_heartbeat_s = wall_s()

    def received(self, kind: str) -> None:
        self.commands.labels(kind).inc()

    def health(self) -> dict[str, Any]:
        agent = self.agent
        return {
            "component": "agent",
            "node": self.node,
            "instance": None if agent is None or agent.state is None else agent.state.instance,
            "started_s": self.started_s,
            "last_heartbeat_s": self.last_heartbeat_s,
            "running_jobs": 0 if agent is None else len(agent.runs),
            "now_s": wall_s(),
        }


class _AgentCollector(Collector):
    def __init__(self, monitor: AgentMonitor) -> None:
        self.monitor = monitor

    def collect(self) -> Iterator[Metric]:
        agent = self.monitor.agent
        yield _gauge(
            "quotaflow_agent_running_jobs",
            "Jobs this node runs",
            0 if agent is None else len(agent.runs),
        )
        beat = GaugeMetricFamily(
            "quotaflow_agent_last_heartbeat_timestamp_seconds", "Wall time of the last heartbeat"
        )
        if self.monitor.last_heartbeat_s is not None:
            beat.add_metric([], self.monitor.last_heartbeat_s)
        yield beat
