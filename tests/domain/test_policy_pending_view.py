"""The pending view of each queue policy (contract §5): every pending job's position,
standing and reason, read without O(pending) work in the cycle; given / when / then over the
pure core."""

from __future__ import annotations

from domain.decider import fold
from domain.events import JournalRecord
from domain.pending import Standing, pending_view
from domain.reasons import ReasonKind
from tests.domain.harness import event, job
from tests.domain.test_policies import S, blocked_head


def test_pending_view_explains_a_stopped_fifo_queue() -> None:
    cluster = blocked_head("fifo")
    cluster.when(3 * S, job("later", "q", gpu=1))
    entries = pending_view(cluster.state, "q", 3 * S)
    assert [(e.position, e.job, e.standing) for e in entries] == [
        (1, "head", Standing.BLOCKING),
        (2, "small", Standing.BEHIND),
        (3, "later", Standing.BEHIND),
    ]
    assert entries[0].reason.kind is ReasonKind.CAPACITY
    assert entries[0].reason.text.startswith("blocked at the head of a fifo queue: ")
    assert (entries[1].reason.kind, entries[1].reason.fact("blocked_by")) == (
        ReasonKind.BEHIND,
        "head",
    )
    assert (
        entries[1].reason.text
        == "waiting behind job head, which is blocked and stops this fifo queue"
    )


def test_pending_view_counts_down_the_balance_timeout() -> None:
    cluster = blocked_head("balance", balance_timeout_s=60)
    entries = pending_view(cluster.state, "q", 20 * S)
    assert entries[0].standing is Standing.BLOCKING
    assert entries[0].skip_in_s == 42
    assert entries[0].reason.text.startswith(
        "blocked at the head of a balance queue, 42 s left before balance skips it: "
    )
    cluster.when(62 * S, event("Tick"))
    entries = pending_view(cluster.state, "q", 62 * S)
    assert [(e.job, e.standing) for e in entries] == [("head", Standing.SKIPPED)]
    assert entries[0].reason.text.startswith("blocked for over 60 s, so balance skips it: ")


def test_pending_view_round_robin_and_intelligent_reasons() -> None:
    cluster = blocked_head("round_robin")
    cluster.when(3 * S, job("big", "q", gpu=3))
    entries = pending_view(cluster.state, "q", 3 * S)
    assert [(e.job, e.standing) for e in entries] == [
        ("head", Standing.SKIPPED),
        ("big", Standing.SKIPPED),
    ]
    cluster = blocked_head("intelligent", head_priority=8)
    entries = pending_view(cluster.state, "q", 3 * S)
    assert entries[0].reason.text.startswith(
        "blocked with priority 8 >= 7, so intelligent does not skip it: "
    )
    assert entries[1].standing is Standing.BEHIND


def test_pending_view_new_job_not_yet_tried() -> None:
    cluster = blocked_head("round_robin")
    cluster.seq += 1
    cluster.state, _ = fold(
        cluster.state, JournalRecord(seq=cluster.seq, ts=5 * S, event=job("fresh", "q", gpu=2))
    )
    entries = {e.job: e for e in pending_view(cluster.state, "q", 5 * S)}
    assert entries["fresh"].standing is Standing.NEW
