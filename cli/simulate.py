"""`quotaflow simulate FILE`: the offline simulator, commands as JSON lines (I/O shell)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from cli.common import EXIT_USAGE, CliError, tune_gc_for_folding


def register(commands: Any) -> None:
    simulate = commands.add_parser(
        "simulate", help="fold a JSON-lines event file offline and print commands (contract §7)"
    )
    simulate.add_argument("file", metavar="FILE", help="JSON-lines events with ts, or - for stdin")
    simulate.set_defaults(handler=_simulate)


def _bounded_lines(source: IO[bytes], limit: int) -> Iterator[bytes]:
    """Each line, but at most its first `limit` + 1 bytes: a longer line (refused anyway) is
    read on and dropped, so one huge line cannot take the memory of the process."""
    while line := source.readline(limit + 1):
        if len(line) > limit and not line.endswith(b"\n"):
            while (rest := source.readline(1 << 16)) and not rest.endswith(b"\n"):
                pass
        yield line


def _simulate(args: argparse.Namespace) -> int:
    from domain.limits import LINE_BYTES_MAX
    from domain.simulation import simulate_lines

    tune_gc_for_folding()

    source: IO[bytes]
    if args.file == "-":
        source = sys.stdin.buffer
    else:
        try:
            source = Path(args.file).open("rb")  # noqa: SIM115 - closed below
        except FileNotFoundError:
            raise CliError(f"simulate: {args.file}: no such file", EXIT_USAGE) from None
        except OSError as exc:
            raise CliError(
                f"simulate: {args.file}: cannot read: {exc.strerror or exc}", EXIT_USAGE
            ) from None
    out = sys.stdout.buffer
    try:
        write = out.write
        for line in simulate_lines(_bounded_lines(source, LINE_BYTES_MAX)):
            write(line)
            write(b"\n")
        out.flush()
    finally:
        if source is not sys.stdin.buffer:
            source.close()
    return 0
