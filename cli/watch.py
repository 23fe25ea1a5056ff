"""`--watch S` for the views: redraw every S seconds until interrupted (I/O shell)."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime

from cli.common import EXIT_USAGE, CliError


def run(interval: float | None, draw: Callable[[], str]) -> int:
    """Prints draw() once, or every `interval` seconds (clearing a terminal first) until Ctrl-C."""
    if interval is None:
        print(draw())
        return 0
    if not interval > 0:
        raise CliError(f"--watch {interval:g}: must be > 0 seconds", EXIT_USAGE)
    while True:
        text = draw()
        if sys.stdout.isatty():
            sys.stdout.write("\x1b[H\x1b[2J")
        stamp = datetime.now(tz=UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
        print(f"every {interval:g}s, at {stamp} (Ctrl-C stops)\n{text}", flush=True)
        time.sleep(interval)
