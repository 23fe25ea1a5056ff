"""Tables and JSON for the view commands: queues, jobs, usage (I/O shell: prints)."""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from typing import Any

import orjson

from cli.tables import table


def _print_json(value: Any) -> None:
    sys.stdout.buffer.write(
        orjson.dumps(value, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS) + b"\n"
    )


def _n(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.1f}"


def _when(ts: int | None) -> str:
    if ts is None:
        return "-"
    return datetime.fromtimestamp(ts / 1000, tz=UTC).strftime("%Y-%m-%d %H:%M:%S")


def _as_of(body: dict[str, Any]) -> str:
    as_of = body.get("as_of") or {}
    return (
        f"as of journal seq {as_of.get('seq')} (ts {as_of.get('ts')}, {_when(as_of.get('ts'))} UTC)"
    )


def render_queues(body: dict[str, Any]) -> str:
    depth: dict[str, int] = {}
    rows = []
    for queue in body["queues"]:
        depth[queue["queue"]] = depth.get(queue["parent"], -1) + 1 if queue["parent"] else 0
        gpu = queue["resources"]["gpu"]
        rows.append(
            [
                "  " * depth[queue["queue"]] + queue["queue"],
                queue["policy"],
                _n(gpu["deserved"]),
                _n(gpu["fair_share"]),
                _n(gpu["allocated"]),
                "none" if gpu["limit"] is None else _n(gpu["limit"]),
                str(len(queue["pending"])),
                str(len(queue["running"])),
                str(queue["preemptions"]),
            ]
        )
    out = [
        _as_of(body),
        table(
            [
                "QUEUE",
                "POLICY",
                "GPU DESERVED",
                "FAIR SHARE",
                "ALLOCATED",
                "LIMIT",
                "PENDING",
                "RUNNING",
                "PREEMPTED",
            ],
            rows,
        ),
    ]
    for queue in body["queues"]:
        if queue["pending"]:
            out.append(f"\npending in {queue['queue']}:")
            out.append(
                table(
                    ["POS", "JOB", "PRIO", "GPU", "WHY"],
                    [
                        [
                            str(p["position"]),
                            p["job"],
                            f"{p['priority']}"
                            + (
                                f"->{p['effective_priority']}"
                                if p["effective_priority"] != p["priority"]
                                else ""
                            ),
                            _n(p["request"]["gpu"]),
                            f"[{p['kind']}] {p['reason']}",
                        ]
                        for p in queue["pending"]
                    ],
                )
            )
    return "\n".join(out)


def render_jobs(body: dict[str, Any]) -> str:
    rows = [
        [
            j["job"],
            j["queue"],
            j["status"],
            str(j["priority"]),
            _n(j["request"]["gpu"]),
            _n(j["position"]),
            ",".join(f"{n}x{t}" for n, t in j["nodes"].items()) or "-",
            j["reason"] or "",
        ]
        for j in body["jobs"]
    ]
    return (
        _as_of(body)
        + "\n"
        + table(["JOB", "QUEUE", "STATUS", "PRIO", "GPU", "POS", "NODES", "WHY"], rows)
    )


def render_usage(body: dict[str, Any]) -> str:
    def row(kind: str, name: str, usage: dict[str, Any]) -> list[str]:
        return [
            kind,
            name,
            _n(usage["allocated"]["gpu"]),
            _n(usage["capacity"]["gpu"]),
            _pct(usage["utilisation"]),
            _pct(usage["mean_utilisation"]),
            _when(usage["since_ts"]),
        ]

    rows = [row("cluster", "-", body["cluster"])]
    rows += [row("queue", name, usage) for name, usage in body["queues"].items()]
    rows += [row("node", name, usage) for name, usage in body["nodes"].items()]
    headers = [
        "KIND",
        "NAME",
        "GPU ALLOCATED",
        "GPU CAPACITY",
        "UTIL %",
        "MEAN UTIL %",
        "SINCE (UTC)",
    ]
    note = "(a queue's capacity and utilisation are the whole cluster's; a node's, its own)"
    return _as_of(body) + "\n" + table(headers, rows) + "\n" + note
