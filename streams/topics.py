"""QuotaFlow's Kafka topic names (pure constants)."""

from __future__ import annotations

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
