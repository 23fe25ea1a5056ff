"""`quotaflow cluster configure`: ClusterConfigured onto quotaflow.admin (I/O shell)."""

from __future__ import annotations

import argparse
from typing import Any

import orjson

from cli.common import EXIT_USAGE, CliError, _Parser, _positive_int, validate
from cli.verdicts import add_wait_options, deliver
from domain.codec import DecodeError, event_to_wire
from streams import topics


def register(commands: Any, kafka_options: argparse.ArgumentParser) -> None:
    cluster = commands.add_parser("cluster", help="cluster-wide settings")
    actions = cluster.add_subparsers(dest="action", metavar="ACTION", parser_class=_Parser)
    actions.required = True
    configure = actions.add_parser(
        "configure",
        parents=[kafka_options],
        help="send ClusterConfigured (settings not given take the contract's defaults)",
    )
    configure.add_argument("--cluster", default="default", help="cluster id (the message key)")
    configure.add_argument("--heartbeat-timeout-s", type=_positive_int, help="default 30")
    configure.add_argument("--placement", choices=["binpack", "spread"], help="default binpack")
    configure.add_argument(
        "--consolidation", action=argparse.BooleanOptionalAction, default=None, help="default on"
    )
    configure.add_argument("--tick-ms", type=_positive_int, help="default 1000")
    add_wait_options(configure)
    configure.set_defaults(handler=_cluster_configure)


def _cluster_configure(args: argparse.Namespace) -> int:
    body: dict[str, Any] = {"type": "ClusterConfigured"}
    for field in ("heartbeat_timeout_s", "placement", "consolidation", "tick_ms"):
        value = getattr(args, field)
        if value is not None:
            body[field] = value
    try:
        event = validate(topics.ADMIN, body)
    except DecodeError as exc:
        raise CliError(f"cluster configure: {exc}", EXIT_USAGE) from None
    # ClusterConfigured replaces the whole configuration: send it explicit, defaults included.
    label = "configured " + " ".join(
        f"{key}={orjson.dumps(value).decode()}"
        for key, value in event_to_wire(event).items()
        if key != "type"
    )
    return deliver(
        args, topics.ADMIN, [(args.cluster, orjson.dumps(event_to_wire(event)))], [label]
    )
