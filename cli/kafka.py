"""`quotaflow kafka start / stop / status / topics`: the local broker and QuotaFlow's topics (I/O shell)."""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from typing import Any

from cli.common import (
    EXIT_NOT_RUNNING,
    EXIT_USAGE,
    CliError,
    _Parser,
    _positive_int,
    _topic_settings,
    resolve_bootstrap,
)
from streams import topics


def register(
    commands: Any, kafka_options: argparse.ArgumentParser, topic_options: argparse.ArgumentParser
) -> None:
    kafka = commands.add_parser("kafka", help="run a local single-node Kafka broker (no Docker)")
    actions = kafka.add_subparsers(dest="action", metavar="ACTION", parser_class=_Parser)
    actions.required = True
    start = actions.add_parser(
        "start",
        parents=[kafka_options],
        help="start the broker in the background (or find the running one), create the topics, "
        "print its bootstrap address",
    )
    start.add_argument("--data-dir", type=Path, help="broker data dir (default: .kafka/data)")
    start.add_argument(
        "--port", type=int, help="broker port (default: a free one, kept across restarts)"
    )
    start.add_argument("--no-topics", action="store_true", help="do not create QuotaFlow's topics")
    start.add_argument(
        "--secure",
        action="store_true",
        help="TLS with a generated CA, SASL/SCRAM users per role and ACLs "
        "(data dir default: .kafka/secure; docs/kafka.md, Production security)",
    )
    start.add_argument(
        "--team",
        action="append",
        default=[],
        help="with --secure: a team with its own job topic and producer user (repeat; "
        "fixed by the data dir's first secured start)",
    )
    start.add_argument(
        "--brokers",
        type=_positive_int,
        default=1,
        help="nodes of a local KRaft cluster (default 1; 3 gives replication factor 3, "
        "min.insync.replicas 2)",
    )
    start.set_defaults(handler=_kafka_start)
    env = actions.add_parser(
        "env",
        help="print `export` lines that make clients connect as USER to the secured broker",
    )
    env.add_argument(
        "user", metavar="USER", help="admin, scheduler, operator, agent, reader, producer-TEAM"
    )
    env.set_defaults(handler=_kafka_env)
    stop = actions.add_parser(
        "stop", help="stop the broker or cluster started by `quotaflow kafka start`"
    )
    stop.set_defaults(handler=_kafka_stop)
    status = actions.add_parser(
        "status",
        help="print the running broker's (or cluster's) bootstrap address (exit 3 when none runs)",
    )
    status.set_defaults(handler=_kafka_status)
    create = actions.add_parser(
        "topics",
        parents=[kafka_options, topic_options],
        help="create QuotaFlow's topics with their configuration (idempotent)",
    )
    create.add_argument(
        "--command-partitions",
        type=_positive_int,
        default=1,
        help="partitions of quotaflow.commands (agents read only their own; default 1)",
    )
    create.set_defaults(handler=_kafka_topics)


def _root() -> Path:
    from devtools.kafka_home import project_root

    return project_root()


def _kafka_start(args: argparse.Namespace) -> int:
    if args.team and not args.secure:
        raise CliError("--team needs --secure (a team's topic is guarded by an ACL)", EXIT_USAGE)
    if args.secure and args.brokers > 1:
        raise CliError(
            "--secure runs a single broker; it cannot be combined with --brokers > 1", EXIT_USAGE
        )
    if args.brokers > 1:
        return _cluster_start(args)
    from devtools.detached import ensure_broker, read_state
    from streams.kafka_io import Topics, ensure_topics

    root = _root()
    before = read_state(root)
    running = before is not None and before.is_alive()
    if args.secure:
        return _secure_start(args, root, before if running else None)
    handle = ensure_broker(root, data_dir=args.data_dir, port=args.port)
    if running:
        print(f"quotaflow: broker already running (pid {handle.pid})", file=sys.stderr)
    else:
        print(
            f"quotaflow: broker started (pid {handle.pid}, log {handle.log_path})", file=sys.stderr
        )
    if not args.no_topics:
        asyncio.run(ensure_topics(handle.bootstrap, Topics.for_prefix(args.topic_prefix)))
    print(handle.bootstrap, flush=True)
    return 0


def _secure_start(args: argparse.Namespace, root: Path, running: Any) -> int:
    """`kafka start --secure`: certificates and users, the broker, its topics and ACLs."""
    from devtools import security
    from devtools.detached import ensure_broker
    from devtools.kafka_home import kafka_dir
    from streams.acls import grant, role_acls
    from streams.kafka_io import Topics, ensure_topics, use_security

    if running is not None and running.security_dir is None:
        raise CliError(
            f"a broker without security already runs at {running.bootstrap} "
            "(quotaflow kafka stop, then start --secure)"
        )
    data_dir = (args.data_dir or kafka_dir(root) / "secure").resolve()
    if running is not None:
        data_dir = running.data_dir
    try:
        setup = security.prepare(data_dir, args.team)
    except ValueError as exc:
        raise CliError(f"kafka start --secure: {exc}", EXIT_USAGE) from None
    handle = ensure_broker(root, data_dir=data_dir, port=args.port, secure=setup)
    what = "already running" if running is not None else "started"
    print(
        f"quotaflow: secured broker {what} (pid {handle.pid}, log {handle.log_path}); "
        f"CA {setup.ca_file}, users in {setup.users_file}; "
        'connect as a user with: eval "$(quotaflow kafka env USER)"',
        file=sys.stderr,
    )
    admin = _security_of(setup, security.ADMIN_USER)
    use_security(admin)
    names = Topics.for_prefix(args.topic_prefix)

    async def provision() -> int:
        if not args.no_topics:
            await ensure_topics(handle.bootstrap, names, teams=setup.teams)
        producers = {team: security.producer_user(team) for team in setup.teams}
        return await grant(handle.bootstrap, role_acls(names, setup.teams, producers), admin)

    granted = asyncio.run(provision())
    print(
        f"quotaflow: {granted} ACLs granted for topic prefix {args.topic_prefix!r}", file=sys.stderr
    )
    print(handle.bootstrap, flush=True)
    return 0


def _cluster_start(args: argparse.Namespace) -> int:
    from devtools.detached_cluster import ensure_cluster, read_cluster_state
    from streams.kafka_io import Topics, TopicSettings, ensure_topics

    if args.port is not None:
        raise CliError("--port applies to a single broker; a cluster picks a port per node")
    root = _root()
    before = read_cluster_state(root)
    running = before is not None and before.is_alive()
    handle = ensure_cluster(root, args.brokers, data_dir=args.data_dir)
    word = "already running" if running else "started"
    for node, broker in zip(handle.nodes, handle.brokers, strict=True):
        print(
            f"quotaflow: node {node.node_id} {word} (pid {broker.pid}, {node.bootstrap}, "
            f"log {broker.log_path})",
            file=sys.stderr,
        )
    if not args.no_topics:
        replicas = min(3, len(handle.nodes))
        settings = TopicSettings(
            replication_factor=replicas, min_insync_replicas=2 if replicas >= 3 else 1
        )
        asyncio.run(ensure_topics(handle.bootstrap, Topics.for_prefix(args.topic_prefix), settings))
    print(handle.bootstrap, flush=True)
    return 0


def _security_of(setup: Any, user: str) -> Any:
    from streams.kafka_security import KafkaSecurity

    return KafkaSecurity(
        protocol="SASL_SSL",
        sasl_mechanism="SCRAM-SHA-512",
        username=user,
        password=setup.passwords[user],
        ca_file=str(setup.ca_file),
    )


def _kafka_env(args: argparse.Namespace) -> int:
    import shlex

    from devtools import security
    from devtools.detached import read_state

    handle = read_state(_root())
    if handle is None or not handle.is_alive() or handle.security_dir is None:
        raise CliError("no secured broker is running (quotaflow kafka start --secure)")
    setup = security.load(handle.security_dir)
    if setup is None or args.user not in setup.passwords:
        known = ", ".join(sorted(setup.passwords)) if setup else "none"
        raise CliError(f"no user {args.user!r} on the secured broker (users: {known})", EXIT_USAGE)
    variables = {"QUOTAFLOW_BOOTSTRAP": handle.bootstrap}
    variables |= _security_of(setup, args.user).environment()
    for team in setup.teams:
        if args.user == security.producer_user(team):
            variables["QUOTAFLOW_TEAM"] = team
    for name, value in variables.items():
        print(f"export {name}={shlex.quote(value)}")
    return 0


def _kafka_stop(args: argparse.Namespace) -> int:
    from devtools.detached import read_state, stop_from_state
    from devtools.detached_cluster import read_cluster_state, stop_cluster_from_state

    root = _root()
    handle = read_state(root)
    cluster = read_cluster_state(root)
    stopped = False
    if stop_from_state(root):
        print(f"stopped the broker at {handle.bootstrap if handle else '?'}")
        stopped = True
    if stop_cluster_from_state(root):
        print(f"stopped the cluster at {cluster.bootstrap if cluster else '?'}")
        stopped = True
    if not stopped:
        print("no broker was running")
    return 0


def _kafka_status(args: argparse.Namespace) -> int:
    from devtools.detached import read_state
    from devtools.detached_cluster import read_cluster_state

    root = _root()
    cluster = read_cluster_state(root)
    if cluster is not None and cluster.is_alive():
        print(cluster.bootstrap)
        for node, broker in zip(cluster.nodes, cluster.brokers, strict=True):
            state = "running" if broker.is_alive() else "down"
            print(
                f"node {node.node_id} {node.bootstrap} {state} (pid {broker.pid})", file=sys.stderr
            )
        return 0
    handle = read_state(root)
    if handle is None or not handle.is_alive():
        print("not running")
        return EXIT_NOT_RUNNING
    print(handle.bootstrap)
    return 0


def _kafka_topics(args: argparse.Namespace) -> int:
    from streams.kafka_io import Topics, ensure_topics

    bootstrap = resolve_bootstrap(args.bootstrap)
    settings = _topic_settings(args, command_partitions=args.command_partitions)
    names = Topics.for_prefix(args.topic_prefix)
    asyncio.run(ensure_topics(bootstrap, names, settings))
    for logical in topics.TOPICS:
        partitions = settings.partitions(logical)
        config = settings.config(logical)
        print(
            f"{names.name(logical)} ({partitions} partition{'s' if partitions > 1 else ''}; "
            f"cleanup.policy={config['cleanup.policy']}, retention.ms={config['retention.ms']})"
        )
    return 0
