"""Where the view commands get the journal: a JSON-lines file, Kafka, or a running projections process (I/O shell)."""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

from cli.common import EXIT_USAGE, CliError, resolve_bootstrap
from domain.events import JournalRecord

_UNITS_MS = {"s": 1_000, "m": 60_000, "h": 3_600_000, "d": 86_400_000, "w": 604_800_000}


def parse_time(text: str | None, flag: str = "--at") -> int | None:
    """Milliseconds since the epoch, an ISO 8601 time (UTC unless it says otherwise), or a
    duration ago (`90s`, `30m`, `2h`, `1d`, `1w`) measured from the wall clock."""
    if text is None:
        return None
    stripped = text.strip()
    if stripped.lstrip("-").isdigit():
        return int(stripped)
    unit = stripped[-1:].lower()
    if unit in _UNITS_MS and stripped[:-1].replace(".", "", 1).isdigit():
        ago = float(stripped[:-1]) * _UNITS_MS[unit]
        return int(time.time() * 1000 - ago)
    try:
        moment = datetime.fromisoformat(stripped.replace("Z", "+00:00"))
    except ValueError:
        raise CliError(
            f"{flag} {text!r}: expected milliseconds since the epoch, an ISO 8601 time "
            "or a duration ago such as 2h",
            EXIT_USAGE,
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)


def read_file(path: str) -> list[JournalRecord]:
    from domain.codec import DecodeError, decode_journal

    try:
        handle = sys.stdin.buffer if path == "-" else Path(path).open("rb")  # noqa: SIM115
    except FileNotFoundError:
        raise CliError(f"{path}: no such file", EXIT_USAGE) from None
    except OSError as exc:
        raise CliError(f"{path}: cannot read: {exc.strerror or exc}", EXIT_USAGE) from None
    records = []
    try:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                records.append(decode_journal(line))
            except DecodeError as exc:
                raise CliError(f"{path} line {number}: {exc}", EXIT_USAGE) from None
    finally:
        if handle is not sys.stdin.buffer:
            handle.close()
    return records


def read_records(args: argparse.Namespace) -> list[JournalRecord]:
    """The journal, from --file or from Kafka (committed records only)."""
    if getattr(args, "file", None):
        return read_file(args.file)
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
        raise CliError(f"{url}: HTTP {exc.code}") from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise CliError(f"{url}: cannot reach the projections process ({reason})") from None


def _body(args: argparse.Namespace, path: str, local: Callable[[Any], Any]) -> Any:
    if getattr(args, "api", None):
        if getattr(args, "at", None):
            raise CliError(
                "--at needs the journal (drop --api): the API serves the present", EXIT_USAGE
            )
        return _fetch(args.api, path)
    return local(_view(args))
