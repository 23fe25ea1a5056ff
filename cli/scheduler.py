"""`quotaflow scheduler`: runs the sequencer, the journal's only writer (I/O shell)."""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Any

from cli.common import (
    EXIT_USAGE,
    CliError,
    _run_until_signalled,
    _topic_settings,
    resolve_bootstrap,
)


def register(
    commands: Any, kafka_options: argparse.ArgumentParser, topic_options: argparse.ArgumentParser
) -> None:
    scheduler = commands.add_parser(
        "scheduler",
        parents=[kafka_options, topic_options],
        help="run the scheduler (the journal's only writer)",
    )
    scheduler.add_argument("--cluster", default="default", help="cluster id: the journal's key")
    scheduler.add_argument(
        "--log-level",
        default="INFO",
        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        type=str.upper,
        help="scheduler log level on stderr (default INFO; DEBUG adds the Kafka client's warnings)",
    )
    scheduler.add_argument(
        "--snapshot-records",
        type=int,
        default=None,
        metavar="N",
        help="write a state snapshot every N journal records (default 2000; 0: never)",
    )
    scheduler.add_argument(
        "--snapshot-seconds",
        type=float,
        default=None,
        metavar="T",
        help="or every T seconds when records were journaled meanwhile (default 300)",
    )
    scheduler.add_argument(
        "--ignore-snapshots",
        action="store_true",
        help="rebuild the state from the whole journal instead of the newest snapshot",
    )
    scheduler.add_argument(
        "--team",
        action="append",
        default=[],
        metavar="TEAM[=QUEUE]",
        help="also read quotaflow.jobs.TEAM, accepting only jobs at or below QUEUE "
        "(default: the queue named TEAM); repeat per team",
    )
    scheduler.add_argument(
        "--instance",
        help="this instance's name, shown as the active scheduler (default: host-pid)",
    )
    scheduler.add_argument(
        "--no-standby",
        action="store_true",
        help="run at once without leader election: a second instance fences this one instead "
        "of waiting as a standby",
    )
    scheduler.add_argument(
        "--metrics-port",
        type=int,
        default=None,
        metavar="PORT",
        help="serve Prometheus /metrics and /health on this port (default: none)",
    )
    scheduler.add_argument(
        "--metrics-host", default="127.0.0.1", help="address for --metrics-port (0.0.0.0: all)"
    )
    scheduler.set_defaults(handler=_scheduler)


def _teams(given: list[str]) -> dict[str, str]:
    """``--team TEAM[=QUEUE]`` flags to team -> queue."""
    teams: dict[str, str] = {}
    for entry in given:
        team, _, queue = entry.partition("=")
        team, queue = team.strip(), (queue.strip() or team.strip())
        if not team:
            raise CliError(f"--team {entry!r}: expected TEAM or TEAM=QUEUE", EXIT_USAGE)
        teams[team] = queue
    return teams


def _scheduler(args: argparse.Namespace) -> int:
    from streams.leadership import run_scheduler_with_standby
    from streams.sequencer import run_scheduler

    bootstrap = resolve_bootstrap(args.bootstrap)
    logging.basicConfig(
        level=args.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    if args.log_level == "DEBUG":  # the Kafka client's retries and reconnects, when asked for
        logging.getLogger("aiokafka").setLevel(logging.WARNING)
    settings = _topic_settings(args)
    options: dict[str, Any] = {
        "snapshot_records": args.snapshot_records,
        "snapshot_seconds": args.snapshot_seconds,
        "load_snapshots": not args.ignore_snapshots,
        "teams": _teams(args.team),
        "metrics_port": args.metrics_port,
        "metrics_host": args.metrics_host,
    }
    if not args.no_standby:
        options["instance"] = args.instance
    run = run_scheduler if args.no_standby else run_scheduler_with_standby
    print(f"scheduler: cluster {args.cluster} on {bootstrap}", flush=True)
    return _run_until_signalled(
        lambda stop: run(bootstrap, args.cluster, args.topic_prefix, stop, settings, **options)
    )
