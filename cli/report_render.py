"""Tables for the job list, accounting, rejections and status (I/O shell: formats what it is given)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from cli.tables import table


def when(ts: int | None) -> str:
    """A journal time (ms since the epoch) as a readable UTC date."""
    if ts is None:
        return "-"
    return datetime.fromtimestamp(ts / 1000, tz=UTC).strftime("%Y-%m-%d %H:%M:%S")


def ago(ts: int | None, now_ms: int) -> str:
    if ts is None:
        return "never"
    seconds = max(0, now_ms - ts) / 1000
    if seconds < 120:
        return f"{seconds:.1f}s ago"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m ago"
    return f"{seconds / 3600:.1f}h ago"


def _n(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def _hours(value: float) -> str:
    return f"{value:.2f}"


def _as_of(body: dict[str, Any]) -> str:
    as_of = body.get("as_of") or {}
    return f"as of journal seq {as_of.get('seq')} ({when(as_of.get('ts'))} UTC); times in UTC"


def render_job_list(body: dict[str, Any]) -> str:
    rows = []
    for j in body["jobs"]:
        status = j.get("status") or j["state"]
        rows.append(
            [
                j["job"],
                j.get("user") or "-",
                j["queue"],
                status if status == j["state"] else f"{j['state']} ({status})",
                _n(j.get("priority")),
                _n(j["request"]["gpu"]),
                _n(j.get("position")),
                ",".join(f"{n}x{t}" for n, t in (j.get("nodes") or {}).items()) or "-",
                when(j.get("submitted_ts")),
                when(j.get("ended_ts")),
                _hours(j.get("gpu_hours") or 0.0),
                j.get("reason") or "",
            ]
        )
    headers = [
        "JOB",
        "USER",
        "QUEUE",
        "STATE",
        "PRIO",
        "GPU",
        "POS",
        "NODES",
        "SUBMITTED",
        "ENDED",
        "GPU-H",
        "WHY",
    ]
    return _as_of(body) + "\n" + table(headers, rows)


def render_accounting(body: dict[str, Any]) -> str:
    by = body["by"]
    rows = [
        [
            row[by],
            str(row["jobs"]),
            _hours(row["gpu_hours"]),
            _hours(row["cpu_hours"]),
            _hours(row["memory_gb_hours"]),
        ]
        for row in body["rows"]
    ]
    if rows:
        total = [
            sum(row[k] for row in body["rows"])
            for k in ("gpu_hours", "cpu_hours", "memory_gb_hours")
        ]
        rows.append(
            ["(total)", str(sum(row["jobs"] for row in body["rows"]))] + [_hours(t) for t in total]
        )
    since = when(body.get("since")) if body.get("since") is not None else "the journal's start"
    head = f"{_as_of(body)}\nresource-hours allocated from {since} to {when(body.get('until'))}"
    return head + "\n" + table([by.upper(), "JOBS", "GPU-HOURS", "CPU-HOURS", "MEM GB-HOURS"], rows)


def _clip(text: str, width: int) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 3] + "..."


def render_rejected(rows: list[dict[str, Any]]) -> str:
    table_rows = [
        [
            when(row.get("ts")),
            f"{row.get('topic')}:{row.get('partition')}@{row.get('offset')}",
            _clip(str(row.get("reason")), 100),
            _clip(str(row.get("input")), 60),
        ]
        for row in rows
    ]
    return table(["TIME (UTC)", "INPUT AT", "REASON", "INPUT"], table_rows)


def render_status(body: dict[str, Any]) -> str:
    now = body["now_ts"]
    s = body["scheduler"]
    if s.get("source") == "journal":
        state = "unknown"
        said = "it publishes no liveness on quotaflow.status; the journal's last write is below"
    else:
        state = "DOWN (stopped, or no liveness for too long)" if s["down"] else "up"
        said = f"instance {s.get('instance')}, active {s.get('active')}, "
        said += f"said {ago(s.get('published_ts'), now)} on {s['source']}"
    lines = [
        f"scheduler {s['cluster']}: {state} ({said})",
        f"  last journal write  {when(s['last_journal_ts'])} UTC ({ago(s['last_journal_ts'], now)}), seq {s['journal_seq']}",
        f"  last tick           {when(s['last_tick_ts'])} UTC ({ago(s['last_tick_ts'], now)}), every {s['tick_ms']} ms",
    ]
    lag = s.get("lag")
    if lag is not None:
        per = ", ".join(f"{topic} {n}" for topic, n in sorted(lag["per_topic"].items()))
        lines.append(f"  inputs waiting      {lag['inputs_waiting']} ({per})")
    p = body["projections"]
    if not p.get("api"):
        lines.append("projections: not asked (give --api URL or set QUOTAFLOW_API)")
    elif "error" in p:
        lines.append(f"projections at {p['api']}: unreachable ({p['error']})")
    else:
        lines.append(
            f"projections at {p['api']}: seq {p['seq']}, {p['behind']} records behind the journal"
        )
    rows = [
        [
            n["node"],
            "lost" if n["lost"] else "live",
            _n(n["gpu"]),
            f"{when(n['last_heartbeat_ts'])} ({ago(n['last_heartbeat_ts'], now)})",
        ]
        for n in body["nodes"]
    ]
    lines.append(table(["NODE", "STATE", "GPU", "LAST HEARTBEAT (UTC)"], rows))
    return "\n".join(lines)
