"""QuotaFlow's Kafka topic names, and the same names under a prefix (pure)."""

from __future__ import annotations

from dataclasses import dataclass

JOBS = "quotaflow.jobs"
NODES = "quotaflow.nodes"
ADMIN = "quotaflow.admin"
JOURNAL = "quotaflow.journal"
COMMANDS = "quotaflow.commands"
REJECTED = "quotaflow.rejected"
SNAPSHOTS = "quotaflow.snapshots"  # the scheduler's state at a journal seq (compacted)
LOGS = "quotaflow.logs"  # jobs' output, written by agents (not read by the scheduler)

# Topics written by clients, agents and operators and read by the scheduler.
INGRESS: tuple[str, ...] = (JOBS, NODES, ADMIN)

# Every topic QuotaFlow creates, in a stable order.
TOPICS: tuple[str, ...] = (JOBS, NODES, ADMIN, JOURNAL, COMMANDS, REJECTED, SNAPSHOTS, LOGS)


@dataclass(frozen=True, slots=True)
class Topics:
    """The QuotaFlow topic names under one prefix."""

    prefix: str = ""

    @classmethod
    def for_prefix(cls, prefix: str = "") -> Topics:
        return cls(prefix)

    def name(self, logical: str) -> str:
        """The real topic name for a contract name such as ``quotaflow.jobs``."""
        return f"{self.prefix}{logical}"

    def logical(self, actual: str) -> str:
        """The contract name for a real topic name (what the codec's topic rules are keyed by)."""
        if self.prefix and actual.startswith(self.prefix):
            return actual[len(self.prefix) :]
        return actual

    @property
    def jobs(self) -> str:
        return self.name(JOBS)

    def team_jobs(self, team: str) -> str:
        """A team's own job topic, ``quotaflow.jobs.<team>`` (docs/kafka.md, per-team topics)."""
        return f"{self.jobs}.{team}"

    @property
    def nodes(self) -> str:
        return self.name(NODES)

    @property
    def admin(self) -> str:
        return self.name(ADMIN)

    @property
    def journal(self) -> str:
        return self.name(JOURNAL)

    @property
    def commands(self) -> str:
        return self.name(COMMANDS)

    @property
    def rejected(self) -> str:
        return self.name(REJECTED)

    @property
    def snapshots(self) -> str:
        return self.name(SNAPSHOTS)

    @property
    def ingress(self) -> tuple[str, ...]:
        return tuple(self.name(topic) for topic in INGRESS)

    @property
    def all(self) -> tuple[str, ...]:
        return tuple(self.name(topic) for topic in TOPICS)
