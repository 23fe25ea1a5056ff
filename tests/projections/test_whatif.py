"""What-if against a small case computed by hand."""

from __future__ import annotations

import orjson
import pytest

from domain.codec import event_to_wire
from domain.events import QueueConfigured
from domain.simulation import Simulator
from projections import whatif, whatif_render
from tests.domain.harness import job, node, queue
from tests.projections.journal import Journal


def journal() -> Journal:
    """One 8-GPU node; queue a gets 6, 4 and 1 GPU jobs of 10 s at 2 s, queue b a 1 GPU job of 5 s at 3 s."""
    j = Journal()
    j.at(1_000, queue("a", 4), queue("b", 4), node("n1", gpu=8))
    j.at(2_000, *(job(n, "a", gpu=g, duration_s=10) for n, g in (("a1", 6), ("a2", 4), ("a3", 1))))
    j.at(3_000, job("b1", "b", gpu=1, duration_s=5))
    return j


def test_fifo_vs_round_robin_by_hand() -> None:
    overrides = whatif.parse_overrides({"queues": {"a": {"policy": {"kind": "round_robin"}}}})
    comparison = whatif.compare(journal().records, overrides)
    summary = comparison.summary()
    # fifo: a1 runs 2-12 s; a2 (4 GPUs) cannot fit and stops the queue, so a3 waits too.
    # Both start at 12 s: waits a1 0, a2 10, a3 10.  round_robin: a3 skips past a2 at 2 s.
    base, alt = summary["baseline"]["a"], summary["whatif"]["a"]
    assert base["mean_wait_s"] == pytest.approx(20 / 3)
    assert alt["mean_wait_s"] == pytest.approx(10 / 3)
    assert (base["p95_wait_s"], alt["p95_wait_s"]) == (10, 10)  # nearest rank of 3 values
    # GPU time: a1 6x10 + a2 4x10 + a3 1x10 = 110 GPU-s over 8 GPUs from 1 s to 22 s (168 GPU-s).
    assert base["utilisation"] == pytest.approx(110 / 168)
    assert alt["utilisation"] == pytest.approx(110 / 168)  # a2 still ends at 22 s
    assert summary["baseline"]["b"]["mean_wait_s"] == 0
    assert summary["baseline"]["*"]["preemptions"] == 0
    [row] = comparison.job_rows()
    assert (row["job"], row["wait_s_before"], row["wait_s_after"], row["delta_s"]) == (
        "a3",
        10,
        0,
        -10,
    )
    text = whatif_render.render(comparison)
    assert "a3" in text and "6.7 -> 3.3" in text


def test_durations_come_from_the_journal_when_jobs_have_none() -> None:
    j = Journal()
    j.at(1_000, queue("a", 8), node("n1", gpu=8))
    j.at(2_000, job("x", "a", gpu=8))
    j.obey(2_000 + 1)
    j.finish_job(9_001, "x")
    [(_, submitted)] = [(ts, e) for ts, e in whatif.workload(j.records) if e.type == "JobSubmitted"]
    assert submitted.duration_s == 7  # started at 2.001 s, finished at 9.001 s


def test_wildcard_override_applies_to_every_queue_and_bad_files_say_why() -> None:
    overrides = whatif.parse_overrides({"queues": {"*": {"policy": {"kind": "intelligent"}}}})
    items = whatif.with_overrides(whatif.workload(journal().records), overrides)
    kinds = {e.queue: e.policy.kind for _, e in items if isinstance(e, QueueConfigured)}
    assert kinds == {"a": "intelligent", "b": "intelligent"}
    with pytest.raises(whatif.WhatIfError, match="not in the journal: zz"):
        whatif.compare(
            journal().records, whatif.parse_overrides({"queues": {"zz": {"priority": 1}}})
        )
    with pytest.raises(whatif.WhatIfError, match=r"queue a: policy\.kind"):
        whatif.compare(
            journal().records,
            whatif.parse_overrides({"queues": {"a": {"policy": {"kind": "lifo"}}}}),
        )
    with pytest.raises(whatif.WhatIfError, match="unknown key"):
        whatif.parse_overrides({"queue": {}})


def test_jobs_left_waiting_are_counted_by_the_core_reason_kind() -> None:
    """A 9-GPU job never fits one 8-GPU node; with a limit of 2 on queue b it is the limit
    that keeps it out: what-if says which, from the core's structured reasons."""
    j = Journal()
    j.at(1_000, queue("a", 4), queue("b", 4), node("n1", gpu=8))
    j.at(2_000, job("huge", "a", gpu=9, duration_s=10), job("b1", "b", gpu=3, duration_s=10))
    limit = {"resources": {"gpu": {"quota": 2, "limit": 2}}}
    overrides = whatif.parse_overrides({"queues": {"b": limit}})
    summary = whatif.compare(j.records, overrides).summary()
    assert summary["baseline"]["a"]["waiting_for"] == {"capacity": 1}
    assert summary["baseline"]["b"]["waiting_for"] == {}
    assert summary["whatif"]["b"]["waiting_for"] == {"limit": 1}
    assert summary["whatif"]["*"]["waiting_for"] == {"capacity": 1, "limit": 1}


def two_nodes() -> Journal:
    """Two 4-GPU nodes; queue a runs x (on n1) and y (on n2), 4 GPUs for 100 s each, from 2 s."""
    j = Journal()
    j.at(1_000, queue("a", 8), node("n1", gpu=4), node("n2", gpu=4))
    j.at(2_000, job("x", "a", gpu=4, duration_s=100), job("y", "a", gpu=4, duration_s=100))
    return j


def test_nodes_down_fails_a_node_on_the_whatif_side_exactly_as_simulate_does() -> None:
    overrides = whatif.parse_overrides({"nodes_down": [{"node": "n1", "ts": 10_000}]})
    items = whatif.with_overrides(whatif.workload(two_nodes().records), overrides)
    comparison = whatif.compare(two_nodes().records, overrides)
    # The same input as a simulate file, the directive spelled as contract section 7 says.
    lines = [
        orjson.dumps(event_to_wire(e) | {"ts": ts})
        for ts, e in whatif.workload(two_nodes().records)
    ]
    lines.append(orjson.dumps({"type": "NodeDown", "ts": 10_000, "node": "n1"}))
    out = list(Simulator().run(lines))
    dispatched = [(o["job"], o["node"], o["ts"]) for o in out if o["type"] == "Dispatch"]
    # x's node fails at 10 s and is lost a heartbeat timeout later; x waits for y's node.
    assert dispatched[-1] == ("x", "n2", 102_000)
    assert comparison.changed.jobs["x"].first_dispatch == 2_000
    assert comparison.changed.jobs["x"].preemptions == sum(
        1 for o in out if o["type"] == "Preempt" and o["job"] == "x"
    )
    assert comparison.changed.jobs["x"].finished == 202_000
    assert comparison.baseline.jobs["x"].finished == 102_000
    assert [type(item).__name__ for _, item in items][-1] == "NodeDown"


def test_nodes_down_must_name_nodes_of_the_journal_and_times() -> None:
    with pytest.raises(whatif.WhatIfError, match="not in the journal: n9"):
        whatif.compare(
            two_nodes().records, whatif.parse_overrides({"nodes_down": [{"node": "n9", "ts": 1}]})
        )
    for bad in ([{"node": "n1"}], {"node": "n1", "ts": 1}, [{"node": "n1", "ts": "soon"}]):
        with pytest.raises(whatif.WhatIfError, match="nodes_down"):
            whatif.parse_overrides({"nodes_down": bad})
    iso = whatif.parse_overrides({"nodes_down": [{"node": "n1", "ts": "1970-01-01T00:00:10Z"}]})
    assert iso.nodes_down == ((10_000, "n1"),)
