"""Tables for the CLI on rich: colour and wrapping on a terminal, plain aligned text in a pipe (I/O shell).

On a terminal the table fits its width: the long free-text columns (a pending reason, a
rejection's reason) wrap inside their cell while ids and numbers never do, and headers are
bold (NO_COLOR turns colour off). Piped or redirected, there is no colour and no wrapping:
one row per line, so `grep` and `awk` see whole rows.
"""

from __future__ import annotations

import io
import os
import shutil
import sys
from collections.abc import Collection, Sequence

from rich.console import Console
from rich.table import Table

WRAPPED = frozenset({"WHY", "REASON", "INPUT"})  # free text: wraps on a terminal
PIPE_WIDTH = 100_000  # wide enough that nothing wraps


def _on_terminal() -> bool:
    return sys.stdout.isatty()


def table(
    headers: Sequence[str], rows: Sequence[Sequence[str]], wrapped: Collection[str] = WRAPPED
) -> str:
    """The rows under their headers; an empty table says `(none)`."""
    terminal = _on_terminal()
    width = shutil.get_terminal_size((120, 24)).columns if terminal else PIPE_WIDTH
    grid = Table(
        box=None,
        show_edge=False,
        pad_edge=False,
        padding=(0, 1),
        header_style="bold cyan" if terminal else "",
        expand=False,
    )
    for index, header in enumerate(headers):
        wraps = terminal and header in wrapped
        # Ids, numbers and dates keep their width; only free text gives way to the terminal.
        longest = max([len(header), *(len(row[index]) for row in rows)])
        grid.add_column(
            header,
            no_wrap=not wraps,
            overflow="fold" if wraps else "ignore",
            min_width=min(longest, 24) if wraps else longest,
        )
    for row in rows:
        grid.add_row(*row)
    out = io.StringIO()
    console = Console(
        file=out,
        width=width,
        force_terminal=terminal,
        no_color=not terminal or "NO_COLOR" in os.environ,
        highlight=False,
        soft_wrap=False,
        emoji=False,
        markup=False,
    )
    console.print(grid)
    text = "\n".join(line.rstrip() for line in out.getvalue().rstrip("\n").splitlines())
    return text + "\n(none)" if not rows else text
