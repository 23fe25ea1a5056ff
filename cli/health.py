"""`quotaflow status` and `quotaflow rejected`: is the scheduler alive, how far behind, and what it refused (I/O shell).

A scheduler's liveness is its own record on quotaflow.status (a quiet journal proves
nothing: Ticks are journaled only when something is due); its lag is what the ingress
topics hold beyond the offsets it committed. Ages compare the journal's time stamps
with this machine's clock: clocks that disagree by seconds make the ages wrong by as much.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from typing import Any

import orjson

from cli import watch
from cli.common import EXIT_USAGE, CliError, _positive_int, resolve_bootstrap
from cli.config import setting, topic_prefix_default
from cli.report_render import render_rejected, render_status
from cli.view_render import _print_json
from cli.view_sources import _fetch, parse_time, read_records
from streams.kafka_io import Topics

EXIT_DOWN = 3  # the LSB status convention: not running
# Where a scheduler that publishes its liveness writes it: compacted, keyed scheduler/<cluster>,
# a JSON object with published_s (its wall clock), active, instance, last_journal_write_s,
# last_tick_s, ingress_lag (docs/operations.md). Older than STALE_AFTER_MS: down or stuck.
LIVENESS_TOPIC = "quotaflow.status"
STALE_AFTER_MS = 15_000


def register(subcommands: Any, source: Any) -> None:
    status = subcommands.add_parser(
        "status", help="liveness: the scheduler (last write, last tick, lag), projections, nodes"
    )
    source(status, api=True)
    status.add_argument("--cluster", default="default", help="the scheduler's cluster id")
    status.add_argument("--watch", type=float, metavar="S", help="redraw every S seconds")
    status.set_defaults(handler=_status)

    rejected = subcommands.add_parser(
        "rejected", help="recent inputs the scheduler refused, with its reasons"
    )
    rejected.add_argument(
        "--bootstrap", help="Kafka bootstrap address (default as for other commands)"
    )
    rejected.add_argument("--topic-prefix", default=topic_prefix_default())
    rejected.add_argument("--json", action="store_true", help="print JSON instead of a table")
    from cli.security import add_kafka_security

    add_kafka_security(rejected)
    rejected.add_argument("--since", help="only those since TIME (ISO 8601, ms, or 2h/30m/1d ago)")
    rejected.add_argument(
        "--limit", type=_positive_int, default=20, help="the most recent N (default 20)"
    )
    rejected.add_argument("--watch", type=float, metavar="S", help="redraw every S seconds")
    rejected.set_defaults(handler=_rejected)


async def _lag(bootstrap: str, topics: Topics, group: str) -> dict[str, Any]:
    from aiokafka.admin import AIOKafkaAdminClient

    from streams.kafka_io import partitions_of, read_committed_consumer

    partitions = await partitions_of(bootstrap, topics.ingress)
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    consumer = read_committed_consumer(bootstrap)
    await admin.start()
    await consumer.start()
    try:
        committed = await admin.list_consumer_group_offsets(group)
        ends = await consumer.end_offsets(partitions)
    finally:
        await consumer.stop()
        await admin.close()
    per_topic: dict[str, int] = {}
    for tp in partitions:
        meta = committed.get(tp)
        done = meta.offset if meta is not None and meta.offset >= 0 else 0
        per_topic[topics.logical(tp.topic)] = per_topic.get(topics.logical(tp.topic), 0) + max(
            0, ends[tp] - done
        )
    return {"inputs_waiting": sum(per_topic.values()), "per_topic": per_topic}


async def _liveness(bootstrap: str, prefix: str, cluster: str) -> dict[str, Any] | None:
    """The scheduler's newest liveness record, or None when it publishes none."""
    from streams.kafka_io import read_committed_consumer, read_to_end

    topic = f"{prefix}{LIVENESS_TOPIC}"
    consumer = read_committed_consumer(bootstrap)
    await consumer.start()
    try:
        if topic not in await consumer.topics():
            return None
    finally:
        await consumer.stop()
    key = f"scheduler/{cluster}".encode()
    newest: dict[str, Any] | None = None
    for record in (await read_to_end(bootstrap, topic, timeout_s=15))[topic]:
        if record.key == key:
            try:
                body = orjson.loads(record.value) if record.value is not None else None
            except orjson.JSONDecodeError:
                continue
            newest = body if isinstance(body, dict) else None
    return newest


def _ms(seconds: Any) -> int | None:
    return int(seconds * 1000) if isinstance(seconds, int | float) else None


def from_liveness(record: dict[str, Any], now_ms: int) -> dict[str, Any]:
    """What a liveness record says: down when it is stale or says the instance stopped."""
    published = _ms(record.get("published_s"))
    stale = published is None or now_ms - published > STALE_AFTER_MS
    return {
        "source": LIVENESS_TOPIC,
        "instance": record.get("instance"),
        "active": record.get("active"),
        "published_ts": published,
        "last_journal_ts": _ms(record.get("last_journal_write_s")),
        "last_tick_ts": _ms(record.get("last_tick_s")),
        "ingress_lag": record.get("ingress_lag"),
        "down": stale or record.get("active") is False,
    }


def status_body(args: argparse.Namespace) -> dict[str, Any]:
    from projections.read_models import nodes_view

    now = int(time.time() * 1000)
    topics = Topics.for_prefix(args.topic_prefix)
    group = f"{args.topic_prefix}quotaflow-scheduler-{args.cluster}"
    api = setting("api", getattr(args, "api", None))
    # The journal itself: its last record is the scheduler's last write.
    from projections.view import View

    view = View()
    last_tick: int | None = None
    for record in read_records(args):
        view.apply(record)
        if record.event.type == "Tick":
            last_tick = record.ts
    view.finish()
    state = view.state
    tick_ms = state.cluster.tick_ms
    last_ts = state.ts if view.records else None
    scheduler: dict[str, Any] = {
        "cluster": args.cluster,
        "journal_seq": state.seq,
        "last_journal_ts": last_ts,
        "last_tick_ts": last_tick,
        "tick_ms": tick_ms,
        "source": "journal",
        # Ticks are journaled only when something is due, so a quiet journal proves nothing:
        # without a liveness record the verdict is unknown (None), never a guess.
        "down": None,
    }
    if not getattr(args, "file", None):
        bootstrap = resolve_bootstrap(args.bootstrap)
        scheduler["lag"] = asyncio.run(_lag(bootstrap, topics, group))
        # A scheduler that publishes its liveness knows better than the journal's last record.
        liveness = asyncio.run(_liveness(bootstrap, args.topic_prefix, args.cluster))
        if liveness is not None:
            scheduler |= from_liveness(liveness, now)
    projections: dict[str, Any] = {"api": api}
    if api:
        try:
            health = _fetch(api, "/health")
            projections |= {
                "seq": health.get("seq"),
                "behind": state.seq - int(health.get("seq") or 0),
            }
        except CliError as exc:
            projections |= {"error": str(exc)}
    nodes = [
        {
            "node": n["node"],
            "lost": n["lost"],
            "last_heartbeat_ts": n["last_heartbeat_ts"],
            "gpu": n["capacity"]["gpu"],
        }
        for n in nodes_view(view)["nodes"]
    ]
    return {"now_ts": now, "scheduler": scheduler, "projections": projections, "nodes": nodes}


def _status(args: argparse.Namespace) -> int:
    down: bool | None = False

    def draw() -> str:
        nonlocal down
        body = status_body(args)
        down = body["scheduler"]["down"]
        if args.json:
            _print_json(body)
            return ""
        return render_status(body)

    if args.json and args.watch is not None:
        raise CliError("--watch and --json do not go together", EXIT_USAGE)
    if args.json:
        draw()
    else:
        watch.run(args.watch, draw)
    return EXIT_DOWN if down is True else 0


def rejected_body(args: argparse.Namespace) -> list[dict[str, Any]]:
    from streams.kafka_io import read_to_end

    since = parse_time(args.since, "--since")
    topic = Topics.for_prefix(args.topic_prefix).rejected
    records = asyncio.run(read_to_end(resolve_bootstrap(args.bootstrap), topic))[topic]
    raws = [r.value or b"" for r in records]
    out = []
    for raw in raws:
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError:
            continue
        if not isinstance(body, dict):
            continue
        if since is not None and int(body.get("ts") or 0) < since:
            continue
        out.append(body)
    return out[-args.limit :]


def _rejected(args: argparse.Namespace) -> int:
    def draw() -> str:
        rows = rejected_body(args)
        if args.json:
            _print_json(rows)
            return ""
        return render_rejected(rows)

    if args.json and args.watch is not None:
        raise CliError("--watch and --json do not go together", EXIT_USAGE)
    if args.json:
        draw()
        return 0
    sys.stdout.flush()
    return watch.run(args.watch, draw)
