"""What-if's comparison as text: a summary per queue and the jobs whose outcome differs (pure)."""

from __future__ import annotations

from typing import Any

from projections.tables import table
from projections.whatif import Comparison
from projections.whatif_overrides import WILDCARD


def _fmt(value: Any, digits: int = 1) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def render(comparison: Comparison, job_limit: int = 20) -> str:
    summary = comparison.summary()
    rows = []
    for queue in sorted(summary["baseline"], key=lambda q: (q == WILDCARD, q)):
        b, w = summary["baseline"][queue], summary["whatif"].get(queue, {})
        rows.append(
            [
                "(all)" if queue == WILDCARD else queue,
                str(b["jobs"]),
                f"{_fmt(b['mean_wait_s'])} -> {_fmt(w.get('mean_wait_s'))}",
                f"{_fmt(b['p95_wait_s'])} -> {_fmt(w.get('p95_wait_s'))}",
                f"{_fmt(_pct(b['utilisation']))} -> {_fmt(_pct(w.get('utilisation')))}",
                f"{b['preemptions']} -> {w.get('preemptions', 0)}",
                f"{b['never_started']} -> {w.get('never_started', 0)}",
            ]
        )
    out = [
        "summary per queue (baseline -> what-if):",
        table(
            [
                "QUEUE",
                "JOBS",
                "MEAN WAIT s",
                "P95 WAIT s",
                "GPU UTIL %",
                "PREEMPTIONS",
                "NEVER STARTED",
            ],
            rows,
        ),
    ]
    changed = comparison.job_rows()
    out.append("")
    if not changed:
        out.append("no job's outcome differs")
    else:
        shown = changed if job_limit <= 0 else changed[:job_limit]
        out.append(
            f"jobs whose outcome differs: {len(changed)}"
            + (f" (largest {len(shown)} shown)" if len(shown) < len(changed) else "")
        )
        out.append(
            table(
                ["JOB", "QUEUE", "WAIT s BEFORE", "WAIT s AFTER", "DELTA s", "PREEMPTED"],
                [
                    [
                        r["job"],
                        r["queue"],
                        _fmt(r["wait_s_before"]),
                        _fmt(r["wait_s_after"]),
                        _fmt(r["delta_s"]),
                        f"{r['preemptions_before']} -> {r['preemptions_after']}",
                    ]
                    for r in shown
                ],
            )
        )
    return "\n".join(out)


def _pct(value: float | None) -> float | None:
    return None if value is None else value * 100
