"""CLI commands over the projections' views (I/O shell): registered into `quotaflow`."""

from __future__ import annotations

import argparse


def register(subcommands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Adds the view commands (queues, jobs, usage, explain, whatif) to the CLI."""
    return None
