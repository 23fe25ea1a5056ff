"""What every command group shares: exit codes, the one-line error, argument types, the broker address, producing events (I/O shell)."""

from __future__ import annotations

import argparse
import asyncio
import gc
import signal
import sys
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, NoReturn

import orjson
import yaml

from domain.codec import decode_ingress
from domain.events import Event

BOOTSTRAP_ENV = "QUOTAFLOW_BOOTSTRAP"
PREFIX_ENV = "QUOTAFLOW_TOPIC_PREFIX"
DEBUG_ENV = "QUOTAFLOW_DEBUG"
FALLBACK_BOOTSTRAP = "127.0.0.1:9092"
SEND_TIMEOUT_S = 30.0

EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_NOT_RUNNING = 3  # `kafka status` when no broker runs (the LSB status convention)
EXIT_INTERRUPTED = 130


# A long fold (simulate, replay) allocates many small objects that live as long as the state
# (jobs, tasks, decoded events) and makes few reference cycles: collecting the youngest
# generation every 700 allocations, as CPython does by default, rescans them for nothing.
# Collected every 50,000 instead, with the imported modules frozen out of every collection
# (bench/README.md: decode + fold 7,900 -> 9,900 records/s).
FOLD_GC_THRESHOLD = (50_000, 20, 20)


def tune_gc_for_folding() -> None:
    """Sets the process's garbage collection for a long fold (see FOLD_GC_THRESHOLD)."""
    gc.freeze()
    gc.set_threshold(*FOLD_GC_THRESHOLD)


class CliError(Exception):
    """A failure the user can act on; its message is printed as one line."""

    def __init__(self, message: str, code: int = EXIT_ERROR) -> None:
        super().__init__(message)
        self.code = code


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line on stderr (plus where to find help)."""

    def error(self, message: str) -> NoReturn:
        raise CliError(f"{self.prog}: {message} (see {self.prog} --help)", EXIT_USAGE)


def _number(text: str, cast: Callable[[str], Any], what: str, ok: Callable[[Any], bool]) -> Any:
    try:
        value = cast(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not {what}") from None
    if not ok(value):
        raise argparse.ArgumentTypeError(f"{text!r} is not {what}")
    return value


def _positive_int(text: str) -> int:
    return int(_number(text, int, "a whole number >= 1", lambda v: v >= 1))


def _non_negative_int(text: str) -> int:
    return int(_number(text, int, "a whole number >= 0", lambda v: v >= 0))


def _non_negative_float(text: str) -> float:
    return float(
        _number(text, float, "a number >= 0", lambda v: v >= 0 and v == v and v != float("inf"))
    )


def _positive_float(text: str) -> float:
    return float(_number(text, float, "a number > 0", lambda v: v > 0 and v != float("inf")))


def parse_pairs(pairs: Iterable[str], flag: str) -> dict[str, str]:
    """`k=v` flags to a dict; a later key wins."""
    result: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise CliError(f"{flag} {pair!r}: expected KEY=VALUE", EXIT_USAGE)
        result[key.strip()] = value
    return result


def resolve_bootstrap(explicit: str | None) -> str:
    """--bootstrap, else $QUOTAFLOW_BOOTSTRAP, else the config file, else the running `kafka start` broker, else the default."""
    from cli.config import setting

    configured = setting("bootstrap", explicit)
    if configured:
        return configured
    from devtools.detached import read_state
    from devtools.detached_cluster import read_cluster_state
    from devtools.kafka_home import BrokerError, project_root

    try:
        root = project_root()
    except BrokerError:  # installed without a checkout (e.g. in a container): no local broker
        return FALLBACK_BOOTSTRAP
    for handle in (read_cluster_state(root), read_state(root)):
        if handle is not None and handle.is_alive():
            return handle.bootstrap
    return FALLBACK_BOOTSTRAP


def topic_name(prefix: str, name: str) -> str:
    """The real topic name under a prefix (the same rule as streams.kafka_io.Topics)."""
    from streams.kafka_io import Topics

    return Topics.for_prefix(prefix).name(name)


def _run_until_signalled(factory: Callable[[asyncio.Event], Any]) -> int:
    """Runs a service coroutine until SIGINT/SIGTERM, which ask it to stop cleanly."""

    async def runner() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, stop.set)
        await factory(stop)

    asyncio.run(runner())
    return 0


def validate(topic: str, body: dict[str, Any]) -> Event:
    """The scheduler's own decoding, run locally so a mistake is reported before sending."""
    return decode_ingress(topic, orjson.dumps(body))


def _read_source(path: str) -> str:
    if path == "-":
        return sys.stdin.read()
    try:
        return Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise CliError(f"{path}: no such file", EXIT_USAGE) from None
    except IsADirectoryError:
        raise CliError(f"{path}: is a directory, not a file", EXIT_USAGE) from None
    except UnicodeDecodeError:
        raise CliError(f"{path}: not UTF-8 text", EXIT_USAGE) from None
    except OSError as exc:
        raise CliError(f"{path}: cannot read: {exc.strerror or exc}", EXIT_USAGE) from None


def load_yaml_documents(path: str) -> list[Any]:
    """Every YAML document of a file (JSON is YAML too); a syntax error names its line."""
    text = _read_source(path)
    try:
        return list(yaml.safe_load_all(text))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        raise CliError(f"{path}: not valid YAML{where}: {problem}", EXIT_USAGE) from None


def _load_documents(path: str) -> Iterator[tuple[str, Any]]:
    """Objects of a JSON/YAML file: each document, and each item of a document that is a list."""
    for number, document in enumerate(load_yaml_documents(path), start=1):
        if document is None:
            continue
        items = document if isinstance(document, list) else [document]
        for index, item in enumerate(items, start=1):
            where = f"document {number}" + (f" item {index}" if isinstance(document, list) else "")
            yield where, item


def _topic_settings(args: argparse.Namespace, command_partitions: int = 1) -> Any:
    from streams.kafka_io import TopicSettings

    if args.min_insync_replicas > args.replication_factor:
        raise CliError(
            f"--min-insync-replicas {args.min_insync_replicas} exceeds --replication-factor "
            f"{args.replication_factor}: no write could ever succeed",
            EXIT_USAGE,
        )
    return TopicSettings(
        replication_factor=args.replication_factor,
        min_insync_replicas=args.min_insync_replicas,
        command_partitions=command_partitions,
    )
