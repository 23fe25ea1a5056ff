"""The job list users expect and the accounting report, as JSON bodies from the view (pure)."""

from __future__ import annotations

from typing import Any

from projections.accounting import STATES, job_rows, usage_report
from projections.read_models import jobs_view
from projections.view import View

BY = ("queue", "user")


class FilterError(ValueError):
    """A filter that names something that cannot be: the message says which and why."""


def _set(values: list[str] | None) -> frozenset[str]:
    return frozenset(values or ())


def job_list(
    view: View,
    *,
    users: list[str] | None = None,
    states: list[str] | None = None,
    queues: list[str] | None = None,
    ended_since: int | None = None,
    include_ended: bool = False,
) -> dict[str, Any]:
    """Jobs in submission order: live ones with their queue position and reason, ended ones
    (with include_ended, or those that ended at or after ended_since) with their end."""
    unknown = sorted(set(states or ()) - set(STATES))
    if unknown:
        raise FilterError(f"unknown state {unknown[0]!r} (one of {', '.join(STATES)})")
    state = view.state
    live = {row["job"]: row for row in jobs_view(view)}
    rows = job_rows(
        view.ledger,
        now=state.ts,
        users=_set(users),
        states=_set(states),
        queues=_set(queues),
        ended_since=ended_since,
        include_ended=include_ended,
    )
    for row in rows:
        details = live.get(row["job"])
        row["priority"] = details["priority"] if details else None
        row["position"] = details["position"] if details else None
        row["reason"] = details["reason"] if details else None
        row["nodes"] = details["nodes"] if details else {}
        if details:
            row["status"] = details["status"]
    return {"as_of": {"seq": state.seq, "ts": state.ts}, "jobs": rows}


def accounting(view: View, *, by: str, since: int | None, until: int | None) -> dict[str, Any]:
    """Resource-hours per queue or user within [since, until) (until: the journal's last time)."""
    if by not in BY:
        raise FilterError(f"--by {by!r}: one of {', '.join(BY)}")
    now = view.state.ts
    end = now if until is None else min(until, now)
    if since is not None and since > end:
        raise FilterError("--since is after --until (or after the journal's last record)")
    return {
        "as_of": {"seq": view.state.seq, "ts": now},
        "by": by,
        "since": since,
        "until": end,
        "rows": usage_report(view.ledger, by=by, since=since, until=end),
    }


def _list(query: dict[str, str], name: str) -> list[str] | None:
    text = query.get(name)
    return [item for item in text.split(",") if item] if text else None


def _int(query: dict[str, str], name: str) -> int | None:
    text = query.get(name)
    if text is None or text == "":
        return None
    try:
        return int(text)
    except ValueError:
        raise FilterError(f"{name}={text!r}: expected milliseconds since the epoch") from None


def route(view: View, parts: list[str], query: dict[str, str]) -> tuple[int, Any]:
    """GET /accounting/jobs?user=&state=&queue=&since=&all= and /accounting/usage?by=&since=&until=
    (lists are comma-separated); a bad filter is a 400 naming it."""
    try:
        if parts == ["accounting", "jobs"]:
            return 200, job_list(
                view,
                users=_list(query, "user"),
                states=_list(query, "state"),
                queues=_list(query, "queue"),
                ended_since=_int(query, "since"),
                include_ended=query.get("all", "") in ("1", "true", "yes"),
            )
        if parts == ["accounting", "usage"]:
            return 200, accounting(
                view,
                by=query.get("by", "queue"),
                since=_int(query, "since"),
                until=_int(query, "until"),
            )
    except FilterError as exc:
        return 400, {"error": str(exc)}
    return 404, {"error": f"no such path /{'/'.join(parts)}"}
