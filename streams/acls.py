"""QuotaFlow's roles as Kafka ACLs, and granting them with the admin API (I/O shell).

``role_acls`` is the table (docs/kafka.md, "Production security"): producers of a team may
write only that team's job topic, agents node events, operators admin events; only the
scheduler reads the ingress topics and writes the journal, commands, rejections and
snapshots, with its consumer group and transactional id; readers (projections, replay,
views) read the journal, commands, rejections and snapshots. Anything not granted is
refused by the broker's StandardAuthorizer.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from streams.kafka_io import KafkaSecurity, Topics, admin_client
from streams.topics import LOGS

# Kafka's wire codes (org.apache.kafka.common.acl / resource).
TOPIC, GROUP, CLUSTER, TRANSACTIONAL_ID = 2, 3, 4, 5
LITERAL, PREFIXED = 3, 4
READ, WRITE, CREATE, DESCRIBE, DESCRIBE_CONFIGS, IDEMPOTENT_WRITE = 3, 4, 5, 8, 10, 12
ALLOW = 3
_RESOURCE = {TOPIC: "topic", GROUP: "group", CLUSTER: "cluster", TRANSACTIONAL_ID: "txn-id"}
_OPERATION = {
    READ: "Read",
    WRITE: "Write",
    CREATE: "Create",
    DESCRIBE: "Describe",
    DESCRIBE_CONFIGS: "DescribeConfigs",
    IDEMPOTENT_WRITE: "IdempotentWrite",
}


@dataclass(frozen=True, order=True, slots=True)
class Acl:
    """One ALLOW rule: ``principal`` may ``operation`` on a resource (any host)."""

    principal: str  # e.g. "User:scheduler"
    resource_type: int
    name: str
    pattern: int
    operation: int

    def describe(self) -> str:
        pattern = "*" if self.pattern == PREFIXED else ""
        return (
            f"{self.principal} {_OPERATION[self.operation]} "
            f"{_RESOURCE[self.resource_type]} {self.name}{pattern}"
        )


def role_acls(topics: Topics, teams: Iterable[str], producers: dict[str, str]) -> list[Acl]:
    """Every ACL of QuotaFlow's roles; ``producers`` maps each team to its SCRAM user."""
    out: list[Acl] = []

    def allow(user: str, kind: int, name: str, *operations: int, pattern: int = LITERAL) -> None:
        out.extend(Acl(f"User:{user}", kind, name, pattern, op) for op in operations)

    scheduler_ids = f"{topics.prefix}quotaflow-scheduler-"
    for topic in topics.ingress:
        allow("scheduler", TOPIC, topic, READ, DESCRIBE)
    allow(
        "scheduler",
        TOPIC,
        f"{topics.jobs}.",
        READ,
        CREATE,
        DESCRIBE,
        DESCRIBE_CONFIGS,
        pattern=PREFIXED,
    )
    for topic in (topics.journal, topics.commands, topics.rejected, topics.snapshots):
        allow("scheduler", TOPIC, topic, READ, WRITE, CREATE, DESCRIBE, DESCRIBE_CONFIGS)
    # The scheduler creates its topics when they are missing; existing ones it only checks.
    for topic in (topics.jobs, topics.nodes, topics.admin):
        allow("scheduler", TOPIC, topic, CREATE, DESCRIBE_CONFIGS)
    # Jobs' output: the scheduler only creates the topic; agents write it, readers read it.
    logs = topics.name(LOGS)
    allow("scheduler", TOPIC, logs, CREATE, DESCRIBE, DESCRIBE_CONFIGS)
    allow("agent", TOPIC, logs, WRITE, DESCRIBE)
    allow("reader", TOPIC, logs, READ, DESCRIBE)
    # Standby schedulers elect the active one through a one-partition topic and a group.
    leader = topics.name("quotaflow.leader")
    allow("scheduler", TOPIC, leader, READ, WRITE, CREATE, DESCRIBE, DESCRIBE_CONFIGS)
    allow("reader", TOPIC, leader, READ, DESCRIBE)  # `quotaflow status` names the active one
    allow("scheduler", GROUP, scheduler_ids, READ, DESCRIBE, pattern=PREFIXED)
    allow("scheduler", TRANSACTIONAL_ID, scheduler_ids, WRITE, DESCRIBE, pattern=PREFIXED)
    allow("scheduler", CLUSTER, "kafka-cluster", IDEMPOTENT_WRITE)

    allow("operator", TOPIC, topics.admin, WRITE, DESCRIBE)

    allow("agent", TOPIC, topics.nodes, WRITE, DESCRIBE)
    allow("agent", TOPIC, topics.commands, READ, DESCRIBE)
    allow("agent", TOPIC, topics.rejected, READ, DESCRIBE)  # refusals of its own heartbeats
    allow("agent", GROUP, f"{topics.prefix}quotaflow-agent-", READ, DESCRIBE, pattern=PREFIXED)

    for topic in (topics.journal, topics.commands, topics.rejected, topics.snapshots):
        allow("reader", TOPIC, topic, READ, DESCRIBE)

    for team in sorted(teams):
        allow(producers[team], TOPIC, topics.team_jobs(team), WRITE, DESCRIBE)
    return sorted(set(out))


async def grant(bootstrap: str, acls: Iterable[Acl], security: KafkaSecurity | None = None) -> int:
    """Creates the ACLs (existing ones are left as they are); returns how many were sent."""
    from aiokafka.errors import for_code
    from aiokafka.protocol.admin import CreateAclsRequest

    admin = admin_client(bootstrap, security, request_timeout_ms=30_000)
    await admin.start()
    sent = 0
    try:
        for acl in acls:
            request = CreateAclsRequest(
                acl.resource_type, acl.name, acl.pattern, acl.principal, "*", acl.operation, ALLOW
            )
            # aiokafka's admin client has no create_acls; its protocol has the request.
            response = await admin._send_to_controller(request)
            for error_code, message in response.creation_responses:
                if error_code:
                    raise for_code(error_code)(f"granting {acl.describe()}: {message}")
            sent += 1
    finally:
        await admin.close()
    return sent
