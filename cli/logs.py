"""`quotaflow logs`: a job's output, read back from quotaflow.logs (I/O shell)."""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any

from cli.common import CliError, _positive_int, resolve_bootstrap, topic_name
from streams import topics


def register(commands: Any, kafka_options: argparse.ArgumentParser) -> None:
    logs = commands.add_parser(
        "logs",
        parents=[kafka_options],
        help="print a job's output (stdout and stderr, as its agents captured them)",
    )
    logs.add_argument("job", help="the job id")
    logs.add_argument(
        "--attempt", type=_positive_int, help="which attempt (default: the latest with output)"
    )
    logs.add_argument("--node", help="only the output from this node (a gang runs on several)")
    logs.add_argument(
        "-f",
        "--follow",
        action="store_true",
        help="keep printing until the attempt has ended on every node running it",
    )
    logs.set_defaults(handler=_logs)


def _logs(args: argparse.Namespace) -> int:
    from streams.job_logs import LogsNotFound, print_logs

    def write(text: str) -> None:
        sys.stdout.write(text)
        sys.stdout.flush()

    topic = topic_name(args.topic_prefix, topics.LOGS)
    try:
        ends = asyncio.run(
            print_logs(
                resolve_bootstrap(args.bootstrap),
                topic,
                args.job,
                write,
                attempt=args.attempt,
                node=args.node,
                follow=args.follow,
            )
        )
    except LogsNotFound as exc:
        raise CliError(f"logs: {exc}") from None
    for end in ends:  # how it ended goes to stderr: stdout is the job's output only
        code = end.get("exit_code")
        how = "not started" if code is None else f"exit {code}"
        reason = end.get("reason")
        if reason and code is not None:
            how += f" ({reason})"
        elif reason:
            how = str(reason)
        dropped = end.get("dropped") or 0
        lost = f"; {dropped} bytes only in the node's files" if dropped else ""
        print(
            f"-- {args.job} attempt {end.get('attempt')} on {end.get('node')}: {how}{lost}",
            file=sys.stderr,
        )
    return 0
