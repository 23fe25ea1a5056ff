"""CLI commands over the projections' views (I/O shell): registered into `quotaflow`.

`queues`, `jobs`, `usage` and `explain` fold the journal themselves (from Kafka, or from a
JSON-lines file with --file), so they work without the projections process; `--api URL`
asks a running projections process instead. `whatif` re-simulates the journal's workload.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

from domain.events import JournalRecord
from projections.tables import table

PREFIX_ENV = "QUOTAFLOW_TOPIC_PREFIX"


def _error(message: str, code: int = 1) -> Exception:
    """The CLI's own one-line error (under `python -m streams.cli` its class lives in __main__)."""
    main: Any = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    if spec is not None and spec.name == "streams.cli" and hasattr(main, "CliError"):
        error: Exception = main.CliError(message, code)
        return error
    from streams.cli import CliError

    return CliError(message, code)


# -- registration ---------------------------------------------------------------------------


def register(subcommands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Adds the view commands (projections, queues, jobs, usage, explain, whatif) to the CLI."""

    def source(parser: argparse.ArgumentParser, api: bool = False) -> None:
        parser.add_argument(
            "--bootstrap",
            help="Kafka bootstrap address (default: $QUOTAFLOW_BOOTSTRAP, else the broker of "
            "`quotaflow kafka start`, else 127.0.0.1:9092)",
        )
        parser.add_argument(
            "--topic-prefix",
            default=os.environ.get(PREFIX_ENV, ""),
            help=f"prefix of every topic name (default: ${PREFIX_ENV} or none)",
        )
        parser.add_argument(
            "--file", help="read the journal from this JSON-lines file instead of Kafka"
        )
        if api:
            parser.add_argument(
                "--api", help="ask a running `quotaflow projections` at this URL instead"
            )
        parser.add_argument("--json", action="store_true", help="print JSON instead of tables")

    run = subcommands.add_parser(
        "projections", help="run the projections process: views of the journal over HTTP"
    )
    run.add_argument("--bootstrap", help="Kafka bootstrap address (default as for other commands)")
    run.add_argument("--topic-prefix", default=os.environ.get(PREFIX_ENV, ""))
    run.add_argument("--port", type=int, default=8080, help="HTTP port (default 8080)")
    run.add_argument("--host", default="127.0.0.1", help="HTTP bind address (default 127.0.0.1)")
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
    source(queues, api=True)
    queues.add_argument("--at", help="as of this time (ms since the epoch or ISO 8601)")
    queues.set_defaults(handler=_queues)

    jobs = subcommands.add_parser("jobs", help="live jobs: status, queue position, pending reason")
    source(jobs, api=True)
    jobs.add_argument("--queue", help="only this queue's jobs")
    jobs.add_argument("--at", help="as of this time (ms since the epoch or ISO 8601)")
    jobs.set_defaults(handler=_jobs)

    usage = subcommands.add_parser(
        "usage", help="allocated vs capacity per queue and node, now and averaged over time"
    )
    source(usage, api=True)
    usage.add_argument("--at", help="as of this time (ms since the epoch or ISO 8601)")
    usage.set_defaults(handler=_usage)

    explain = subcommands.add_parser(
        "explain", help="why a job is pending or was preempted, by whom, under which rule"
    )
    explain.add_argument("job", metavar="JOB")
    source(explain)
    explain.add_argument("--at", help="as of this time (ms since the epoch or ISO 8601)")
    explain.set_defaults(handler=_explain)

    whatif = subcommands.add_parser(
        "whatif", help="re-simulate the journal's workload with changed queues and compare"
    )
    source(whatif)
    whatif.add_argument("--policy", required=True, help="YAML: queues: {QUEUE or '*': overrides}")
    whatif.add_argument(
        "--jobs", type=int, default=20, help="how many changed jobs to list (0: all; default 20)"
    )
    whatif.set_defaults(handler=_whatif)

    _extend_replay(subcommands)


def _extend_replay(subcommands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Adds --file, --commands and --until to the `replay` audit (streams.cli defines it)."""
    replay = subcommands.choices.get("replay")
    if replay is None:
        return
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
    audit_topics = replay.get_default("handler")

    def handler(args: argparse.Namespace) -> int:
        if not args.file and not args.until and not args.commands:
            return int(audit_topics(args))
        return _replay_audit(args)

    replay.set_defaults(handler=handler)


def _replay_audit(args: argparse.Namespace) -> int:
    """The audit over a file and/or up to a time; prints the state at that time when asked."""
    from domain.audit import audit
    from domain.codec import decode_command
    from projections.read_models import jobs_view, queues_view
    from projections.view import View

    if args.commands and not args.file:
        raise _error(
            "replay: --commands goes with --file (the topic's commands are read otherwise)", 2
        )
    until = parse_time(args.until)
    commands: list[dict[str, Any]] | None = None
    if args.file:
        records = read_file(args.file)
        if args.commands:
            commands = [decode_command(line) for line in _lines(args.commands)]
    else:
        from streams.cli import resolve_bootstrap
        from streams.kafka_io import Topics, read_to_end

        topics = Topics.for_prefix(args.topic_prefix)
        read = asyncio.run(
            read_to_end(resolve_bootstrap(args.bootstrap), [topics.journal, topics.commands])
        )
        from domain.codec import decode_journal

        wanted = None if getattr(args, "cluster", None) is None else args.cluster.encode()
        records = [
            decode_journal(r.value)
            for r in read[topics.journal]
            if r.value is not None and (wanted is None or r.key == wanted)
        ]
        commands = [decode_command(r.value) for r in read[topics.commands] if r.value is not None]
    if until is not None:
        records = [r for r in records if r.ts <= until]
    code = 0
    if commands is not None:
        report = audit(records, commands)
        print(report.summary())
        code = 0 if report.ok else 1
    if until is None and commands is None:
        view = View()
        emitted = 0
        for record in records:
            emitted += len(view.apply(record))
        emitted += len(view.finish())
        print(
            f"journal records {len(records)} (last seq {view.state.seq}): the fold emits {emitted} commands"
        )
        return code
    if until is not None:
        view = View()
        for record in records:
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


def _lines(path: str) -> list[bytes]:
    try:
        return [line for line in Path(path).read_bytes().splitlines() if line.strip()]
    except FileNotFoundError:
        raise _error(f"{path}: no such file", 2) from None
    except OSError as exc:
        raise _error(f"{path}: cannot read: {exc.strerror or exc}", 2) from None


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m projections.cli ...`: the same commands through the `quotaflow` entry point."""
    from streams.cli import main as quotaflow_main

    return quotaflow_main(argv)


# -- sources ----------------------------------------------------------------------------------


def parse_time(text: str | None) -> int | None:
    """Milliseconds since the epoch, or an ISO 8601 time (UTC unless it says otherwise)."""
    if text is None:
        return None
    stripped = text.strip()
    if stripped.lstrip("-").isdigit():
        return int(stripped)
    try:
        moment = datetime.fromisoformat(stripped.replace("Z", "+00:00"))
    except ValueError:
        raise _error(
            f"--at {text!r}: expected milliseconds since the epoch or an ISO 8601 time", 2
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)


def read_file(path: str) -> list[JournalRecord]:
    from domain.codec import DecodeError, decode_journal

    try:
        handle = sys.stdin.buffer if path == "-" else Path(path).open("rb")  # noqa: SIM115
    except FileNotFoundError:
        raise _error(f"{path}: no such file", 2) from None
    except OSError as exc:
        raise _error(f"{path}: cannot read: {exc.strerror or exc}", 2) from None
    records = []
    try:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                records.append(decode_journal(line))
            except DecodeError as exc:
                raise _error(f"{path} line {number}: {exc}", 2) from None
    finally:
        if handle is not sys.stdin.buffer:
            handle.close()
    return records


def read_records(args: argparse.Namespace) -> list[JournalRecord]:
    """The journal, from --file or from Kafka (committed records only)."""
    if getattr(args, "file", None):
        return read_file(args.file)
    from streams.cli import resolve_bootstrap
    from streams.replay import read_journal

    bootstrap = resolve_bootstrap(args.bootstrap)
    return asyncio.run(read_journal(bootstrap, topic_prefix=args.topic_prefix))


def _view(args: argparse.Namespace) -> Any:
    from projections.view import View

    at = parse_time(getattr(args, "at", None))
    view = View()
    for record in read_records(args):
        if at is not None and record.ts > at:
            break
        view.apply(record)
    view.finish()
    return view


def _fetch(base: str, path: str) -> Any:
    url = base.rstrip("/") + path
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return orjson.loads(response.read())
    except urllib.error.HTTPError as exc:
        raise _error(f"{url}: HTTP {exc.code}") from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise _error(f"{url}: cannot reach the projections process ({reason})") from None


def _body(args: argparse.Namespace, path: str, local: Callable[[Any], Any]) -> Any:
    if getattr(args, "api", None):
        if getattr(args, "at", None):
            raise _error("--at needs the journal (drop --api): the API serves the present", 2)
        return _fetch(args.api, path)
    return local(_view(args))


def _print_json(value: Any) -> None:
    sys.stdout.buffer.write(
        orjson.dumps(value, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS) + b"\n"
    )


# -- formatting -------------------------------------------------------------------------------------


def _n(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.1f}"


def _when(ts: int | None) -> str:
    if ts is None:
        return "-"
    return datetime.fromtimestamp(ts / 1000, tz=UTC).strftime("%Y-%m-%d %H:%M:%S")


def _as_of(body: dict[str, Any]) -> str:
    as_of = body.get("as_of") or {}
    return (
        f"as of journal seq {as_of.get('seq')} (ts {as_of.get('ts')}, {_when(as_of.get('ts'))} UTC)"
    )


def render_queues(body: dict[str, Any]) -> str:
    depth: dict[str, int] = {}
    rows = []
    for queue in body["queues"]:
        depth[queue["queue"]] = depth.get(queue["parent"], -1) + 1 if queue["parent"] else 0
        gpu = queue["resources"]["gpu"]
        rows.append(
            [
                "  " * depth[queue["queue"]] + queue["queue"],
                queue["policy"],
                _n(gpu["deserved"]),
                _n(gpu["fair_share"]),
                _n(gpu["allocated"]),
                "none" if gpu["limit"] is None else _n(gpu["limit"]),
                str(len(queue["pending"])),
                str(len(queue["running"])),
                str(queue["preemptions"]),
            ]
        )
    out = [
        _as_of(body),
        table(
            [
                "QUEUE",
                "POLICY",
                "GPU DESERVED",
                "FAIR SHARE",
                "ALLOCATED",
                "LIMIT",
                "PENDING",
                "RUNNING",
                "PREEMPTED",
            ],
            rows,
        ),
    ]
    for queue in body["queues"]:
        if queue["pending"]:
            out.append(f"\npending in {queue['queue']}:")
            out.append(
                table(
                    ["POS", "JOB", "PRIO", "GPU", "WHY"],
                    [
                        [
                            str(p["position"]),
                            p["job"],
                            f"{p['priority']}"
                            + (
                                f"->{p['effective_priority']}"
                                if p["effective_priority"] != p["priority"]
                                else ""
                            ),
                            _n(p["request"]["gpu"]),
                            f"[{p['kind']}] {p['reason']}",
                        ]
                        for p in queue["pending"]
                    ],
                )
            )
    return "\n".join(out)


def render_jobs(body: dict[str, Any]) -> str:
    rows = [
        [
            j["job"],
            j["queue"],
            j["status"],
            str(j["priority"]),
            _n(j["request"]["gpu"]),
            _n(j["position"]),
            ",".join(f"{n}x{t}" for n, t in j["nodes"].items()) or "-",
            j["reason"] or "",
        ]
        for j in body["jobs"]
    ]
    return (
        _as_of(body)
        + "\n"
        + table(["JOB", "QUEUE", "STATUS", "PRIO", "GPU", "POS", "NODES", "WHY"], rows)
    )


def render_usage(body: dict[str, Any]) -> str:
    def row(kind: str, name: str, usage: dict[str, Any]) -> list[str]:
        return [
            kind,
            name,
            _n(usage["allocated"]["gpu"]),
            _n(usage["capacity"]["gpu"]),
            _pct(usage["utilisation"]),
            _pct(usage["mean_utilisation"]),
            _when(usage["since_ts"]),
        ]

    rows = [row("cluster", "-", body["cluster"])]
    rows += [row("queue", name, usage) for name, usage in body["queues"].items()]
    rows += [row("node", name, usage) for name, usage in body["nodes"].items()]
    headers = [
        "KIND",
        "NAME",
        "GPU ALLOCATED",
        "GPU CAPACITY",
        "UTIL %",
        "MEAN UTIL %",
        "SINCE (UTC)",
    ]
    note = "(a queue's capacity and utilisation are the whole cluster's; a node's, its own)"
    return _as_of(body) + "\n" + table(headers, rows) + "\n" + note


# -- handlers -----------------------------------------------------------------------------------------


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def default_checkpoint(topic_prefix: str) -> Path:
    """`.projections/<prefix>checkpoint.bin`: one file per cluster sharing a working directory."""
    safe = "".join(c if c.isalnum() or c in "._-" else "_" for c in topic_prefix)
    return Path(".projections") / f"{safe}checkpoint.bin"


def _projections(args: argparse.Namespace) -> int:
    from projections.app import Settings, run
    from streams.cli import resolve_bootstrap
    from streams.kafka_io import Topics

    topics = Topics.for_prefix(args.topic_prefix)
    checkpoint = None
    if not args.no_checkpoint:
        checkpoint = Path(args.checkpoint or default_checkpoint(args.topic_prefix))
    return run(
        Settings(
            bootstrap=resolve_bootstrap(args.bootstrap),
            journal=topics.journal,
            commands=topics.commands,
            port=args.port,
            host=args.host,
            checkpoint=checkpoint,
            checkpoint_records=args.checkpoint_records,
            checkpoint_s=args.checkpoint_interval,
        )
    )


def _queues(args: argparse.Namespace) -> int:
    from projections.read_models import queues_view

    body = _body(args, "/queues", queues_view)
    if args.json:
        _print_json(body)
    else:
        print(render_queues(body))
    return 0


def _jobs(args: argparse.Namespace) -> int:
    from projections.read_models import jobs_view

    def local(view: Any) -> dict[str, Any]:
        if args.queue and args.queue not in view.state.queues:
            raise _error(f"queue {args.queue!r} is not in the journal", 2)
        return {
            "as_of": {"seq": view.state.seq, "ts": view.state.ts},
            "jobs": jobs_view(view, args.queue),
        }

    path = "/jobs" + (f"?queue={urllib.parse.quote(args.queue)}" if args.queue else "")
    body = _body(args, path, local)
    if args.json:
        _print_json(body)
    else:
        print(render_jobs(body))
    return 0


def _usage(args: argparse.Namespace) -> int:
    from projections.read_models import usage_view

    body = _body(args, "/usage", usage_view)
    if args.json:
        _print_json(body)
    else:
        print(render_usage(body))
    return 0


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

    from projections import whatif

    try:
        document = yaml.safe_load(Path(args.policy).read_text())
    except FileNotFoundError:
        raise _error(f"--policy {args.policy}: no such file", 2) from None
    except (OSError, yaml.YAMLError) as exc:
        raise _error(f"--policy {args.policy}: {' '.join(str(exc).split())}", 2) from None
    try:
        overrides = whatif.parse_overrides(document)
        comparison = whatif.compare(read_records(args), overrides)
    except whatif.WhatIfError as exc:
        raise _error(f"whatif: {exc}", 2) from None
    if args.json:
        _print_json({"summary": comparison.summary(), "jobs": comparison.job_rows()})
    else:
        print(whatif.render(comparison, args.jobs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
