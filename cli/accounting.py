"""`quotaflow jobs` and `quotaflow usage`: the job list with filters, and resource-hours like sreport (I/O shell)."""

from __future__ import annotations

import argparse
import urllib.parse
from typing import Any

from cli import watch
from cli.common import EXIT_USAGE, CliError
from cli.report_render import render_accounting, render_job_list
from cli.view_render import _print_json, render_usage
from cli.view_sources import _body, parse_time

STATES = ("pending", "running", "finished", "failed", "cancelled")


def register(subcommands: Any, source: Any) -> None:
    jobs = subcommands.add_parser(
        "jobs",
        help="jobs: user, state, queue position, pending reason; ended ones with --all/--since",
    )
    source(jobs, api=True)
    jobs.add_argument("--user", action="append", metavar="USER", help="only this user's (repeat)")
    jobs.add_argument(
        "--state",
        action="append",
        choices=STATES,
        metavar="STATE",
        help=f"only {'/'.join(STATES)} (repeat)",
    )
    jobs.add_argument(
        "--queue", action="append", metavar="QUEUE", help="only this queue's (repeat)"
    )
    jobs.add_argument("--all", action="store_true", help="include ended jobs")
    jobs.add_argument(
        "--since", help="include jobs that ended since TIME (ISO 8601, ms, or 2h/30m/1d ago)"
    )
    jobs.add_argument("--at", help="as of this time (ms since the epoch or ISO 8601)")
    jobs.add_argument("--watch", type=float, metavar="S", help="redraw every S seconds")
    jobs.set_defaults(handler=_jobs)

    usage = subcommands.add_parser(
        "usage",
        help="GPU/CPU/memory hours per queue or user (--by), or allocation vs capacity now",
    )
    source(usage, api=True)
    usage.add_argument(
        "--by", choices=("queue", "user"), help="resource-hours per queue or user, like sreport"
    )
    usage.add_argument("--since", help="with --by: from TIME (default: the journal's start)")
    usage.add_argument("--until", help="with --by: to TIME (default: the journal's last record)")
    usage.add_argument("--at", help="as of this time (ms since the epoch or ISO 8601)")
    usage.add_argument("--watch", type=float, metavar="S", help="redraw every S seconds")
    usage.set_defaults(handler=_usage)


def _query(**params: Any) -> str:
    pairs = []
    for key, value in params.items():
        if isinstance(value, list):
            value = ",".join(value)
        if value is not None and value is not False and value != "":
            pairs.append((key, "1" if value is True else str(value)))
    return "?" + urllib.parse.urlencode(pairs) if pairs else ""


def _jobs(args: argparse.Namespace) -> int:
    from projections.job_list import FilterError, job_list

    since = parse_time(args.since, "--since")

    def local(view: Any) -> dict[str, Any]:
        for queue in args.queue or ():
            if queue not in view.state.queues and queue not in {
                a.queue for a in view.ledger.jobs.values()
            }:
                raise CliError(f"queue {queue!r} is not in the journal", EXIT_USAGE)
        try:
            return job_list(
                view,
                users=args.user,
                states=args.state,
                queues=args.queue,
                ended_since=since,
                include_ended=args.all,
            )
        except FilterError as exc:
            raise CliError(f"jobs: {exc}", EXIT_USAGE) from None

    path = "/accounting/jobs" + _query(
        user=args.user, state=args.state, queue=args.queue, since=since, all=args.all
    )

    def draw() -> str:
        body = _body(args, path, local)
        if args.json:
            _print_json(body)
            return ""
        return render_job_list(body)

    return _emit(args, draw)


def _usage(args: argparse.Namespace) -> int:
    from projections.job_list import FilterError, accounting
    from projections.read_models import usage_view

    if args.by is None:
        if args.since or args.until:
            raise CliError("usage: --since/--until need --by queue|user", EXIT_USAGE)

        def now_view() -> str:
            body = _body(args, "/usage", usage_view)
            if args.json:
                _print_json(body)
                return ""
            return render_usage(body)

        return _emit(args, now_view)
    since = parse_time(args.since, "--since")
    until = parse_time(args.until, "--until")

    def local(view: Any) -> dict[str, Any]:
        try:
            return accounting(view, by=args.by, since=since, until=until)
        except FilterError as exc:
            raise CliError(f"usage: {exc}", EXIT_USAGE) from None

    path = "/accounting/usage" + _query(by=args.by, since=since, until=until)

    def draw() -> str:
        body = _body(args, path, local)
        if args.json:
            _print_json(body)
            return ""
        return render_accounting(body)

    return _emit(args, draw)


def _emit(args: argparse.Namespace, draw: Any) -> int:
    if args.json and args.watch is None:
        draw()
        return 0
    if args.json:
        raise CliError("--watch and --json do not go together (poll the API instead)", EXIT_USAGE)
    return watch.run(args.watch, draw)
