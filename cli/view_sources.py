"""Where the view commands get the journal: a JSON-lines file, Kafka, or a running projections process (I/O shell)."""

from __future__ import annotations

import argparse
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
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
    return list(iter_file(path))


def iter_file(path: str) -> Iterator[JournalRecord]:
    """A journal file's records, one line at a time."""
    from domain.codec import DecodeError, decode_journal

    try:
        handle = sys.stdin.buffer if path == "-" else Path(path).open("rb")  # noqa: SIM115
    except FileNotFoundError:
        raise CliError(f"{path}: no such file", EXIT_USAGE) from None
    except OSError as exc:
        raise CliError(f"{path}: cannot read: {exc.strerror or exc}", EXIT_USAGE) from None
    try:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                record = decode_journal(line)
            except DecodeError as exc:
                raise CliError(f"{path} line {number}: {exc}", EXIT_USAGE) from None
            yield record
    finally:
        if handle is not sys.stdin.buffer:
            handle.close()


def read_records(args: argparse.Namespace) -> Iterator[JournalRecord]:
    """The journal, from --file or from Kafka (committed records only), streamed: memory stays
    bounded by what the caller folds, not by the journal's length."""
    if getattr(args, "file", None):
        return iter_file(args.file)
    from streams.journal_reader import iter_journal
    from streams.kafka_io import Topics

    bootstrap = resolve_bootstrap(args.bootstrap)
    return iter_journal(bootstrap, Topics.for_prefix(args.topic_prefix).journal)


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


def _fetch(base: str, path: str, token: str | None = None) -> Any:
    url = base.rstrip("/") + path
    request = urllib.request.Request(url)
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return orjson.loads(response.read())
    except urllib.error.HTTPError as exc:
        hint = (
            " (the API needs a bearer token: --token or $QUOTAFLOW_API_TOKEN)"
            if exc.code == 401
            else ""
        )
        raise CliError(f"{url}: HTTP {exc.code}{hint}") from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise CliError(f"{url}: cannot reach the projections process ({reason})") from None


def _body(args: argparse.Namespace, path: str, local: Callable[[Any], Any]) -> Any:
    if getattr(args, "api", None):
        if getattr(args, "at", None):
            raise CliError(
                "--at needs the journal (drop --api): the API serves the present", EXIT_USAGE
            )
        from cli.security import api_token

        return _fetch(args.api, path, api_token(getattr(args, "token", None)))
    return local(_view(args))
