"""Why a job is pending, or was preempted, by whom and under which rule, from folded state (pure).

Pending positions and reasons come from the core's query `domain.pending.pending_view`, in
the order the next cycle tries the jobs; a job behind a blocked head that stopped its queue
was not tried, so being behind the head is its reason. Preemptions are explained from the
job's timeline: the Preempt command's reason and `by`, the rule that reason names, and the
queues' numbers in the cycle that issued it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from domain.events import JournalRecord
from domain.pending import Standing, pending_view
from domain.plugins import preemption_explanations
from domain.state import JobStatus, State
from projections.view import View

# What each contract preemption reason means, so an explanation names the rule it applied:
# each registered rule explains itself, and the core's own stop reasons are in domain.reasons.
PREEMPTION_RULES: dict[str, str] = preemption_explanations()


def pending_jobs(state: State, queue_id: str, now: int) -> list[dict[str, Any]]:
    """Each pending job of the queue: position (from 1), effective priority, reason and its kind.

    Positions, sentences and kinds come from the core's own query (domain.pending): the kind
    says what the reason is about (capacity, quota, limit) so views can group and tests can
    check; being behind a blocked head is `blocked_behind_head` (or `balance_wait`).
    """
    if queue_id not in state.queues:
        return []
    entries = pending_view(state, queue_id, now)
    head = next((e for e in entries if e.standing is Standing.BLOCKING), None)
    rows = []
    for entry in entries:
        job = state.jobs[entry.job]
        if entry.standing is Standing.BEHIND:
            balance = head is not None and head.skip_in_s is not None
            kind = "balance_wait" if balance else "blocked_behind_head"
            reason = entry.reason.text
            if balance and head is not None:
                reason += f"; balance skips {head.job} in {head.skip_in_s:g} s"
        else:  # the core's own kind: capacity, quota, limit, preempting or new
            kind, reason = entry.reason.kind.value, entry.reason.text
        rows.append(
            {
                "job": entry.job,
                "position": entry.position,
                "priority": entry.priority,
                "effective_priority": entry.effective_priority,
                "interactive": entry.interactive,
                "standing": entry.standing.value,
                "kind": kind,
                "reason": reason,
                "blocked_since": entry.blocked_since,
                "skip_in_s": entry.skip_in_s,
                "waiting_ms": max(0, now - job.submitted_ts),
                "request": job.request.to_wire(),
                "attempts": job.attempt,
            }
        )
    return rows


# -- explain --------------------------------------------------------------------------------


def _last_preemption(timeline: Iterable[dict[str, Any]]) -> dict[str, Any] | None:
    last = None
    for entry in timeline:
        if entry["event"] == "preempted":
            last = entry
    return last


def describe_preemption(entry: dict[str, Any]) -> str:
    reason = str(entry.get("reason"))
    by = entry.get("by")
    rule = PREEMPTION_RULES.get(reason, reason)
    who = f" by {by}" if by else ""
    text = (
        f"preempted at ts {entry['ts']} on {entry['node']} (attempt {entry['attempt']}){who}, "
        f"reason {reason!r}; rule: {rule}"
    )
    context = entry.get("context") or {}
    numbers = []
    for side in ("preemptor_queue", "victim_queue"):
        q = context.get(side)
        if q:
            gpu = q["resources"]["gpu"]
            numbers.append(
                f"{side.replace('_', ' ')} {q['queue']}: gpu allocated {gpu['allocated']}, "
                f"deserved {gpu['deserved']}, fair share {gpu['fair_share']}"
            )
    if "preemptor_priority" in context:
        numbers.append(
            f"preemptor priority {context['preemptor_priority']}, module {context['preemptor_module']}"
        )
    for key in ("preemptor_queue_rules", "parent_rules"):
        if key in context:
            numbers.append(f"{key.replace('_', ' ')}: {context[key]}")
    if numbers:
        text += " [" + "; ".join(numbers) + "]"
    return text


def explain_job(view: View, job_id: str) -> dict[str, Any]:
    """Status, the reason for it, and every preemption with its rule, as of the view's position."""
    state: State = view.state
    timeline: list[dict[str, Any]] = view.timelines.get(job_id, [])
    out: dict[str, Any] = {"job": job_id, "as_of_ts": state.ts, "as_of_seq": state.seq}
    preemptions = [describe_preemption(e) for e in timeline if e["event"] == "preempted"]
    made_room = [
        f"preempted {e['victim']} on {e['node']} at ts {e['ts']} ({e['reason']})"
        for e in timeline
        if e["event"] == "preempting"
    ]
    job = state.jobs.get(job_id)
    if job is None:
        ended = state.ended_jobs.get(job_id)
        if ended is None:
            out["status"] = "unknown"
            out["summary"] = f"job {job_id} is not in the journal (up to ts {state.ts})"
            return out
        out["status"] = ended.value
        finished = [e for e in timeline if e["event"] == "finished"]
        when = f" at ts {finished[-1]['ts']}" if finished else ""
        exits = [
            f"exit {e['exit_code']}"
            + (f" ({e['reason']})" if e.get("reason") else "")
            + f" on {e['node']}"
            for e in finished
            if e.get("exit_code") is not None and e["attempt"] == finished[-1]["attempt"]
        ]
        how = f" ({', '.join(exits)})" if exits else ""
        out["summary"] = f"{job_id} has ended: {ended.value}{when}{how}{_ending(view, job_id)}"
    elif job.id in state.waiting:
        deps = sorted(state.waiting[job.id])
        out["status"] = "pending"
        out["kind"] = "dependency"
        out["waiting_for"] = deps
        out["summary"] = f"{job_id} waits for {', '.join(deps)} to succeed (after_ok)"
    elif job.status is JobStatus.PENDING:
        rows = pending_jobs(state, job.queue, state.ts)
        row = next((r for r in rows if r["job"] == job_id), None)
        out["status"] = "pending"
        if row is not None:
            out["position"] = row["position"]
            out["kind"] = row["kind"]
            out["reason"] = row["reason"]
            out["summary"] = (
                f"{job_id} is pending in queue {job.queue}, position {row['position']} of {len(rows)}: "
                f"{row['reason']}"
            )
        last = _last_preemption(timeline)
        if last is not None:
            out["requeued_after"] = describe_preemption(last)
    elif job.status in (JobStatus.STOPPING, JobStatus.CANCELLING) or job.stopping:
        last = _last_preemption(timeline)
        out["status"] = job.status.value
        out["summary"] = f"{job_id} is being stopped: " + (
            describe_preemption(last) if last else "cancel requested"
        )
    else:
        dispatches = [
            e for e in timeline if e["event"] == "dispatched" and e["attempt"] == job.attempt
        ]
        reasons = sorted({str(e["reason"]) for e in dispatches})
        out["status"] = job.status.value
        out["summary"] = (
            f"{job_id} is running (attempt {job.attempt}) on "
            f"{', '.join(f'{n} x{t}' for n, t in sorted(job.placements.items()))}, "
            f"dispatched as {'/'.join(reasons) or '?'}"
        )
    attempts = attempt_outcomes(timeline)
    if attempts:
        out["attempts"] = attempts
    if preemptions:
        out["preemptions"] = preemptions
    if made_room:
        out["made_room_by"] = made_room
    return out


def attempt_outcomes(timeline: Iterable[dict[str, Any]]) -> list[str]:
    """One line per node report of an attempt's end: outcome, exit code and reason."""
    lines = []
    for entry in timeline:
        if entry["event"] != "finished":
            continue
        code = entry.get("exit_code")
        why = entry.get("reason")
        detail = "" if code is None else f", exit code {code}"
        detail += "" if why is None else f" ({why})"
        lines.append(
            f"attempt {entry['attempt']} {entry['outcome']} on {entry['node']} "
            f"at ts {entry['ts']}{detail}"
        )
    return lines


def _ending(view: View, job_id: str) -> str:
    """Why an ended job ended, where the journal says more than its status."""
    dep = view.state.dependency_failed.get(job_id)
    if dep is not None:
        return f"; its dependency {dep} did not succeed (after_ok)"
    timeline = view.timelines.get(job_id, [])
    last = _last_preemption(timeline)
    if last is not None and last.get("reason") == "time_limit":
        return f"; stopped at its time limit (ts {last['ts']})"
    return ""


def explain_at(
    records: Iterable[JournalRecord], job_id: str, at: int | None = None
) -> dict[str, Any]:
    """Folds the journal up to and including time `at` (all of it when None) and explains."""
    view = View()
    for record in records:
        if at is not None and record.ts > at:
            break
        view.apply(record)
    view.finish()
    return explain_job(view, job_id)


def render(explanation: dict[str, Any]) -> str:
    """The explanation as lines a person reads."""
    lines = [explanation.get("summary", "")]
    if "requeued_after" in explanation:
        lines.append("last preemption: " + explanation["requeued_after"])
    for item in explanation.get("preemptions", []):
        if item != explanation.get("requeued_after"):
            lines.append("history: " + item)
    for item in explanation.get("made_room_by", []):
        lines.append("made room: " + item)
    for item in explanation.get("attempts", []):
        lines.append("attempt: " + item)
    lines.append(f"(as of ts {explanation['as_of_ts']}, journal seq {explanation['as_of_seq']})")
    return "\n".join(line for line in lines if line)
