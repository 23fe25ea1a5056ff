"""`quotaflow projections / queues / jobs / usage / explain / whatif`: the views of the journal (I/O shell)."""

from __future__ import annotations

import argparse
from pathlib import Path

from cli import accounting, health, watch
from cli.common import EXIT_USAGE, PREFIX_ENV, CliError, _positive_int, resolve_bootstrap
from cli.config import topic_prefix_default
from cli.security import TOKEN_ENV, add_kafka_security, api_token
from cli.view_render import _print_json, render_queues
from cli.view_sources import _body, parse_time, read_records


def add_source_options(parser: argparse.ArgumentParser, api: bool = False) -> None:
    """Where a view reads the journal: Kafka (--bootstrap, --topic-prefix), --file or --api; --json."""
    parser.add_argument(
        "--bootstrap",
        help="Kafka bootstrap address (default: $QUOTAFLOW_BOOTSTRAP, else the broker of "
        "`quotaflow kafka start`, else 127.0.0.1:9092)",
    )
    parser.add_argument(
        "--topic-prefix",
        default=topic_prefix_default(),
        help=f"prefix of every topic name (default: ${PREFIX_ENV} or none)",
    )
    parser.add_argument(
        "--file", help="read the journal from this JSON-lines file instead of Kafka"
    )
    if api:
        parser.add_argument(
            "--api", help="ask a running `quotaflow projections` at this URL instead"
        )
        parser.add_argument("--token", help=f"the API's bearer token (default: ${TOKEN_ENV})")
    add_kafka_security(parser)
    parser.add_argument("--json", action="store_true", help="print JSON instead of tables")


def register(subcommands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Adds the view commands (projections, queues, jobs, usage, explain, whatif) to the CLI."""

    run = subcommands.add_parser(
        "projections", help="run the projections process: views of the journal over HTTP"
    )
    run.add_argument("--bootstrap", help="Kafka bootstrap address (default as for other commands)")
    run.add_argument("--topic-prefix", default=topic_prefix_default())
    run.add_argument("--port", type=int, default=8080, help="HTTP port (default 8080)")
    run.add_argument("--host", default="127.0.0.1", help="HTTP bind address (default 127.0.0.1)")
    run.add_argument(
        "--token",
        help=f"require this bearer token for everything but /health (default: ${TOKEN_ENV}; "
        "none: no token)",
    )
    run.add_argument("--tls-cert", type=Path, help="serve HTTPS: PEM certificate chain")
    run.add_argument("--tls-key", type=Path, help="PEM key of --tls-cert")
    add_kafka_security(run)
    run.add_argument(
        "--checkpoint",
        metavar="FILE",
        help="where the view and its offsets are saved, to resume from on start "
        "(default: .projections/<topic prefix>checkpoint.bin)",
    )
    run.add_argument(
        "--no-checkpoint",
        action="store_true",
        help="keep no checkpoint: rebuild the views from offset 0 on every start",
    )
    run.add_argument(
        "--checkpoint-records",
        type=_positive_int,
        default=10_000,
        metavar="N",
        help="write a checkpoint after N records read (default 10000) ...",
    )
    run.add_argument(
        "--checkpoint-interval",
        type=float,
        default=5.0,
        metavar="S",
        help="... or S seconds after the last one, when anything was read (default 5)",
    )
    run.set_defaults(handler=_projections)

    queues = subcommands.add_parser(
        "queues", help="queues: deserved, fair share, allocated, limit; pending and running jobs"
    )
    add_source_options(queues, api=True)
    queues.add_argument("--at", help="as of this time (ms since the epoch or ISO 8601)")
    queues.add_argument("--watch", type=float, metavar="S", help="redraw every S seconds")
    queues.set_defaults(handler=_queues)

    accounting.register(subcommands, add_source_options)
    health.register(subcommands, add_source_options)

    explain = subcommands.add_parser(
        "explain", help="why a job is pending or was preempted, by whom, under which rule"
    )
    explain.add_argument("job", metavar="JOB")
    add_source_options(explain)
    explain.add_argument("--at", help="as of this time (ms since the epoch or ISO 8601)")
    explain.set_defaults(handler=_explain)

    whatif = subcommands.add_parser(
        "whatif", help="re-simulate the journal's workload with changed queues and compare"
    )
    add_source_options(whatif)
    whatif.add_argument("--policy", required=True, help="YAML: queues: {QUEUE or '*': overrides}")
    whatif.add_argument(
        "--jobs", type=int, default=20, help="how many changed jobs to list (0: all; default 20)"
    )
    whatif.set_defaults(handler=_whatif)


def default_checkpoint(topic_prefix: str) -> Path:
    """`.projections/<prefix>checkpoint.bin`: one file per cluster sharing a working directory."""
    safe = "".join(c if c.isalnum() or c in "._-" else "_" for c in topic_prefix)
    return Path(".projections") / f"{safe}checkpoint.bin"


def _projections(args: argparse.Namespace) -> int:
    from projections.app import Settings, run
    from streams.kafka_io import Topics, security_options

    topics = Topics.for_prefix(args.topic_prefix)
    checkpoint = None
    if not args.no_checkpoint:
        checkpoint = Path(args.checkpoint or default_checkpoint(args.topic_prefix))
    return run(
        Settings(
            bootstrap=resolve_bootstrap(args.bootstrap),
            journal=topics.journal,
            commands=topics.commands,
            rejected=topics.rejected,
            port=args.port,
            host=args.host,
            checkpoint=checkpoint,
            checkpoint_records=args.checkpoint_records,
            checkpoint_s=args.checkpoint_interval,
            kafka_options=security_options(),
            token=api_token(args.token),
            tls_cert=args.tls_cert,
            tls_key=args.tls_key,
        )
    )


def _queues(args: argparse.Namespace) -> int:
    from projections.read_models import queues_view

    if args.json:
        if args.watch is not None:
            raise CliError("--watch and --json do not go together", EXIT_USAGE)
        _print_json(_body(args, "/queues", queues_view))
        return 0
    return watch.run(args.watch, lambda: render_queues(_body(args, "/queues", queues_view)))


def _explain(args: argparse.Namespace) -> int:
    from projections.explain import explain_at, render

    explanation = explain_at(read_records(args), args.job, parse_time(args.at))
    if args.json:
        _print_json(explanation)
    else:
        print(render(explanation))
    return 0 if explanation.get("status") != "unknown" else 1


def _whatif(args: argparse.Namespace) -> int:
    import yaml

    from projections import whatif, whatif_render

    try:
        document = yaml.safe_load(Path(args.policy).read_text())
    except FileNotFoundError:
        raise CliError(f"--policy {args.policy}: no such file", EXIT_USAGE) from None
    except (OSError, yaml.YAMLError) as exc:
        raise CliError(
            f"--policy {args.policy}: {' '.join(str(exc).split())}", EXIT_USAGE
        ) from None
    try:
        overrides = whatif.parse_overrides(document)
        comparison = whatif.compare(read_records(args), overrides)
    except whatif.WhatIfError as exc:
        raise CliError(f"whatif: {exc}", EXIT_USAGE) from None
    if args.json:
        _print_json({"summary": comparison.summary(), "jobs": comparison.job_rows()})
    else:
        print(whatif_render.render(comparison, args.jobs))
    return 0
