"""`quotaflow queue apply / delete`: queue manifests onto quotaflow.admin (I/O shell)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

import orjson

from cli.common import (
    EXIT_USAGE,
    CliError,
    _Parser,
    load_yaml_documents,
    validate,
)
from cli.verdicts import add_wait_options, check, deliver
from domain.codec import DecodeError, event_to_wire
from domain.manifests import ManifestError, queue_events
from streams import topics


def register(commands: Any, kafka_options: argparse.ArgumentParser) -> None:
    queue = commands.add_parser("queue", help="configure queues")
    actions = queue.add_subparsers(dest="action", metavar="ACTION", parser_class=_Parser)
    actions.required = True
    apply = actions.add_parser(
        "apply", parents=[kafka_options], help="create or replace the queues of a YAML file"
    )
    apply.add_argument("file", metavar="FILE", help="YAML (several documents allowed), or -")
    apply.add_argument(
        "--dry-run", action="store_true", help="print the QueueConfigured events, send nothing"
    )
    add_wait_options(apply)
    apply.set_defaults(handler=_queue_apply)
    delete = actions.add_parser("delete", parents=[kafka_options], help="delete a queue")
    delete.add_argument("queue", metavar="QUEUE")
    add_wait_options(delete)
    delete.set_defaults(handler=_queue_delete)


def _queue_apply(args: argparse.Namespace) -> int:
    documents = load_yaml_documents(args.file)
    try:
        events = queue_events(documents)
    except ManifestError as exc:
        raise CliError(f"{args.file}: {exc}", EXIT_USAGE) from None
    except (AttributeError, TypeError) as exc:  # a document of the wrong shape entirely
        raise CliError(f"{args.file}: not a queue manifest ({exc})", EXIT_USAGE) from None
    if not events:
        raise CliError(f"{args.file}: holds no queues", EXIT_USAGE)
    messages = []
    for event in events:
        body = event_to_wire(event)
        try:
            validate(topics.ADMIN, body)
        except DecodeError as exc:
            raise CliError(f"{args.file}: queue {event.queue}: {exc}", EXIT_USAGE) from None
        messages.append((event.queue, orjson.dumps(body)))
    if args.dry_run:
        for _, value in messages:
            sys.stdout.buffer.write(value + b"\n")
        return 0
    labels = [
        f"applied queue {event.queue}" + (f" (parent {event.parent})" if event.parent else "")
        for event in events
    ]
    return deliver(args, topics.ADMIN, messages, labels)


def _queue_delete(args: argparse.Namespace) -> int:
    body = {"type": "QueueDeleted", "queue": args.queue}
    check(topics.ADMIN, body, "queue delete")
    return deliver(
        args, topics.ADMIN, [(args.queue, orjson.dumps(body))], [f"delete of queue {args.queue}"]
    )
