"""The view commands' warning when the scheduler is down: their answer may be stale (I/O shell, one pure helper).

`queues`, `jobs`, `usage` and `explain` fold the journal, which only the scheduler extends:
with the scheduler down, inputs wait unjournaled and the answer shows the cluster as it was.
The scheduler's liveness record on quotaflow.status (streams/status.py) tells: when no
`scheduler/<cluster>` record is up (none at all, none newer than 15 s, or each says it
stopped), one line goes to stderr. The answer itself is still printed on stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from typing import Any

from cli.common import resolve_bootstrap
from streams.status import STATUS, read_status, verdict

SCHEDULER = "scheduler/"
_checked: list[bool] = []  # once per command: --watch redraws would repeat it


def scheduler_down(records: dict[str, dict[str, Any]], now_s: float) -> str | None:
    """Why the journal may be behind its inputs, or None when a scheduler is up (pure)."""
    schedulers = {k: v for k, v in sorted(records.items()) if k.startswith(SCHEDULER)}
    if not schedulers:
        return f"no scheduler has published its liveness on {STATUS}"
    if any(verdict(record, now_s) == "up" for record in schedulers.values()):
        return None
    stamps = [r["published_s"] for r in schedulers.values() if _is_time(r.get("published_s"))]
    if stamps and all(verdict(r, now_s) == "stopped" for r in schedulers.values()):
        return f"the scheduler stopped {_ago(now_s - max(stamps))}"
    if not stamps:
        return f"the scheduler's liveness record on {STATUS} has no time"
    return f"the scheduler's last liveness record on {STATUS} is {_ago(now_s - max(stamps))}"


def warn_if_scheduler_down(args: argparse.Namespace) -> None:
    """After a view was answered from Kafka: one line on stderr when no scheduler is up.

    Not for --file (a saved journal), --at (the past) or --api (the API's /health tells);
    never an error of its own: an unreadable status topic says nothing either way.
    """
    if getattr(args, "file", None) or getattr(args, "at", None) or getattr(args, "api", None):
        return
    if _checked:
        return
    _checked.append(True)
    try:
        bootstrap = resolve_bootstrap(args.bootstrap)
        records = asyncio.run(read_status(bootstrap, args.topic_prefix, timeout_s=5.0))
    except Exception:
        return
    reason = scheduler_down(records, time.time())
    if reason is not None:
        print(
            f"quotaflow: warning: {reason}; the journal may be behind its inputs, so this "
            "answer may be stale (`quotaflow status` tells more)",
            file=sys.stderr,
        )


def _is_time(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _ago(seconds: float) -> str:
    seconds = max(0, int(seconds))
    if seconds < 120:
        return f"{seconds} s ago"
    if seconds < 7200:
        return f"{seconds // 60} min ago"
    if seconds < 172_800:
        return f"{seconds // 3600} h ago"
    return f"{seconds // 86_400} days ago"
