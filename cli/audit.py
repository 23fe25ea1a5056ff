"""`quotaflow replay`: the audit over the journal topic or a saved file, and the state at a time (I/O shell)."""

from __future__ import annotations

import argparse
import asyncio
import itertools
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

from cli.common import (
    EXIT_ERROR,
    EXIT_USAGE,
    CliError,
    resolve_bootstrap,
    tune_gc_for_folding,
)
from cli.view_render import _print_json, _when, render_jobs, render_queues
from cli.view_sources import iter_file, parse_time
from domain.events import JournalRecord


def register(commands: Any, kafka_options: argparse.ArgumentParser) -> None:
    replay = commands.add_parser(
        "replay", parents=[kafka_options], help="audit: replay the journal and compare commands"
    )
    replay.add_argument(
        "--cluster", help="audit only this cluster's journal records (default: every record)"
    )
    replay.add_argument(
        "--file", help="audit a journal saved as JSON lines instead of the journal topic"
    )
    replay.add_argument(
        "--commands",
        help="with --file: JSON-lines commands to check against the journal (default: none, "
        "print what the fold emits)",
    )
    replay.add_argument(
        "--until",
        help="rebuild the state as it was at this time (ms since the epoch or ISO 8601) and "
        "print its queues and jobs; the audit then covers the journal up to that time",
    )
    replay.add_argument("--json", action="store_true", help="with --until: print the state as JSON")
    replay.add_argument(
        "--no-snapshots", action="store_true", help="audit the commands only, not the snapshots"
    )
    replay.set_defaults(handler=_replay)


def _replay(args: argparse.Namespace) -> int:
    tune_gc_for_folding()
    if not args.file and not args.until and not args.commands:
        return _replay_topics(args)
    return _replay_audit(args)


def _replay_topics(args: argparse.Namespace) -> int:
    from streams.replay import replay

    bootstrap = resolve_bootstrap(args.bootstrap)
    report = asyncio.run(
        replay(
            bootstrap,
            topic_prefix=args.topic_prefix,
            cluster=args.cluster,
            snapshots=not args.no_snapshots,
        )
    )
    print(report.summary())
    return 0 if report.ok else EXIT_ERROR


def _replay_audit(args: argparse.Namespace) -> int:
    """The audit over a file and/or up to a time; prints the state at that time when asked."""
    from domain.audit import audit
    from domain.codec import decode_command
    from projections.read_models import jobs_view, queues_view
    from projections.view import View

    if args.commands and not args.file:
        raise CliError(
            "replay: --commands goes with --file (the topic's commands are read otherwise)",
            EXIT_USAGE,
        )
    until = parse_time(args.until)
    commands: Iterator[dict[str, Any]] | None = None
    code = 0
    # The journal streams through each fold (memory bounded by the state, not the journal);
    # `journal()` starts a fresh pass over the same records.
    journal: Callable[[], Iterator[JournalRecord]]
    if args.file:
        path = args.file
        journal = lambda: iter_file(path)  # noqa: E731
        if args.commands:
            commands = (decode_command(line) for line in _lines(args.commands))
    else:
        from streams.journal_reader import end_offsets, iter_journal
        from streams.kafka_io import Topics
        from streams.replay import replay

        topics = Topics.for_prefix(args.topic_prefix)
        bootstrap = resolve_bootstrap(args.bootstrap)
        cluster = getattr(args, "cluster", None)
        # The audit up to `until` streams the journal and the commands (streams/replay.py);
        # the state at that time is then a second streamed pass over the same records.
        ends = asyncio.run(end_offsets(bootstrap, topics.journal))
        report = asyncio.run(
            replay(bootstrap, args.topic_prefix, cluster, False, until=until, journal_ends=ends)
        )
        print(report.summary())
        code = 0 if report.ok else 1
        journal = lambda: iter_journal(bootstrap, topics.journal, cluster, ends)  # noqa: E731

    def records() -> Iterator[JournalRecord]:
        if until is None:
            return journal()
        return itertools.takewhile(lambda record: record.ts <= until, journal())

    if commands is not None:
        file_report = audit(records(), commands)
        print(file_report.summary())
        code = 0 if file_report.ok else 1
    if until is None and commands is None:
        view = View()
        emitted = 0
        count = 0
        for record in records():
            emitted += len(view.apply(record))
            count += 1
        emitted += len(view.finish())
        print(
            f"journal records {count} (last seq {view.state.seq}): the fold emits {emitted} commands"
        )
        return code
    if until is not None:
        view = View()
        for record in records():
            view.apply(record)
        view.finish()
        queues = queues_view(view)
        jobs = {"as_of": queues["as_of"], "jobs": jobs_view(view)}
        if args.json:
            _print_json({"queues": queues, "jobs": jobs})
        else:
            print(f"\nstate at {_when(until)} UTC (ts {until}):")
            print(render_queues(queues))
            print()
            print(render_jobs(jobs))
    return code


def _lines(path: str) -> Iterator[bytes]:
    """The file's non-blank lines, read as the audit asks for them."""
    try:
        handle = Path(path).open("rb")  # noqa: SIM115
    except FileNotFoundError:
        raise CliError(f"{path}: no such file", EXIT_USAGE) from None
    except OSError as exc:
        raise CliError(f"{path}: cannot read: {exc.strerror or exc}", EXIT_USAGE) from None
    return _non_blank(handle)


def _non_blank(handle: BinaryIO) -> Iterator[bytes]:
    with handle:
        for line in handle:
            if line.strip():
                yield line.rstrip(b"\r\n")
