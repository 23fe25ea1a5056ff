"""`quotaflow submit` and `quotaflow cancel`: jobs onto quotaflow.jobs, validated first (I/O shell)."""

from __future__ import annotations

import argparse
import os
import uuid
from typing import Any

import orjson

from cli.common import (
    EXIT_USAGE,
    CliError,
    _load_documents,
    _non_negative_float,
    _non_negative_int,
    _positive_int,
    parse_pairs,
    validate,
)
from cli.verdicts import add_wait_options, check, deliver
from domain.codec import DecodeError
from streams import topics

TEAM_ENV = "QUOTAFLOW_TEAM"


def register(commands: Any, kafka_options: argparse.ArgumentParser) -> None:
    submit = commands.add_parser(
        "submit", parents=[kafka_options], help="submit a job (flags) or jobs (-f FILE)"
    )
    submit.add_argument("-f", "--file", help="JSON or YAML JobSubmitted object(s), or - for stdin")
    submit.add_argument("--job", help="job id (default: a new UUID)")
    submit.add_argument("--queue", help="queue id (required without -f)")
    submit.add_argument("--gpu", type=_non_negative_float, help="GPUs per task (0.5 allowed)")
    submit.add_argument("--cpu", type=_non_negative_int, help="millicores per task")
    submit.add_argument("--memory", type=_non_negative_int, help="MB per task")
    submit.add_argument("--tasks", type=_positive_int, help="tasks in the gang (default 1)")
    submit.add_argument("--min-tasks", type=_positive_int, help="elastic: fewest tasks to run with")
    submit.add_argument("--priority", type=int, help="1-9 (default 5)")
    submit.add_argument("--module", help='e.g. DLC, DSW, EAS (default "DLC")')
    submit.add_argument("--interactive", action="store_true", default=None, help="interactive job")
    submit.add_argument(
        "--preemptible",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="may be preempted (default: not interactive)",
    )
    submit.add_argument(
        "--duration", type=_non_negative_float, help="run time in seconds (demo agent)"
    )
    submit.add_argument("--label", action="append", default=[], metavar="K=V", help="job label")
    submit.add_argument(
        "--selector", action="append", default=[], metavar="K=V", help="node label required"
    )
    submit.add_argument("--user", help="who submits it")
    add_wait_options(submit)
    submit.set_defaults(handler=_submit)
    cancel = commands.add_parser("cancel", parents=[kafka_options], help="cancel a job")
    cancel.add_argument("job", metavar="JOB")
    add_wait_options(cancel)
    cancel.set_defaults(handler=_cancel)
    for parser in (submit, cancel):
        parser.add_argument(
            "--team",
            default=os.environ.get(TEAM_ENV) or None,
            help=f"send to this team's job topic, {topics.JOBS}.TEAM, which a secured cluster "
            f"grants the team's producers (default: ${TEAM_ENV}, else {topics.JOBS})",
        )


def _jobs_topic(args: argparse.Namespace) -> str:
    """quotaflow.jobs, or the team's own quotaflow.jobs.<team> (docs/kafka.md)."""
    return f"{topics.JOBS}.{args.team}" if args.team else topics.JOBS


def _submit(args: argparse.Namespace) -> int:
    if args.file is not None:
        given = [
            flag
            for flag in (
                "job",
                "queue",
                "gpu",
                "cpu",
                "memory",
                "tasks",
                "min_tasks",
                "priority",
                "module",
                "interactive",
                "preemptible",
                "duration",
                "user",
            )
            if getattr(args, flag) is not None
        ]
        if given or args.label or args.selector:
            names = (
                ", ".join(f"--{flag.replace('_', '-')}" for flag in given) or "--label/--selector"
            )
            raise CliError(f"submit: -f FILE cannot be combined with {names}", EXIT_USAGE)
        located = [
            (f"{args.file} {where}", _job_body(item, where))
            for where, item in _load_documents(args.file)
        ]
    else:
        body = _job_from_flags(args)
        located = [(f"job {body['job']}", body)]
    bodies = []
    for where, body in located:
        try:
            validate(topics.JOBS, body)
        except DecodeError as exc:
            raise CliError(f"submit: {where}: {exc}", EXIT_USAGE) from None
        bodies.append(body)
    if not bodies:
        raise CliError(f"submit: {args.file} holds no jobs", EXIT_USAGE)
    return deliver(
        args,
        _jobs_topic(args),
        [(str(body["job"]), orjson.dumps(body)) for body in bodies],
        [f"submitted {body['job']} to queue {body.get('queue')}" for body in bodies],
    )


def _job_from_flags(args: argparse.Namespace) -> dict[str, Any]:
    if not args.queue:
        raise CliError("submit: --queue is required (or give -f FILE)", EXIT_USAGE)
    body: dict[str, Any] = {
        "type": "JobSubmitted",
        "job": args.job or str(uuid.uuid4()),
        "queue": args.queue,
    }
    resources = {
        name: getattr(args, name)
        for name in ("gpu", "cpu", "memory")
        if getattr(args, name) is not None
    }
    if resources:
        body["resources"] = resources
    for flag, field in (
        ("tasks", "tasks"),
        ("min_tasks", "min_tasks"),
        ("priority", "priority"),
        ("module", "module"),
        ("interactive", "interactive"),
        ("preemptible", "preemptible"),
        ("duration", "duration_s"),
        ("user", "user"),
    ):
        value = getattr(args, flag)
        if value is not None:
            body[field] = value
    if args.label:
        body["labels"] = parse_pairs(args.label, "--label")
    if args.selector:
        body["node_selector"] = parse_pairs(args.selector, "--selector")
    return body


def _job_body(item: Any, where: str) -> dict[str, Any]:
    if not isinstance(item, dict):
        raise CliError(f"submit: {where}: expected a JobSubmitted object", EXIT_USAGE)
    body = {"type": "JobSubmitted", **item}
    if "job" not in item:
        body["job"] = str(uuid.uuid4())
    return body


def _cancel(args: argparse.Namespace) -> int:
    body = {"type": "JobCancelled", "job": args.job}
    check(topics.JOBS, body, "cancel")
    return deliver(
        args, _jobs_topic(args), [(args.job, orjson.dumps(body))], [f"cancel of {args.job}"]
    )
