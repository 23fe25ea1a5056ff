"""The numbers behind /metrics and the dashboard, from a journal: gauges per queue and node, recent
preemptions, recent rejections, and the routes that serve them (pure)."""

from __future__ import annotations

import orjson
import pytest
from prometheus_client.parser import text_string_to_metric_families

from domain.gauges import state_gauges
from projections.api import PATHS, route
from projections.metrics import exposition, registry_for
from projections.recent import Rejections, recent_preemptions
from tests.domain.harness import job, node, queue
from tests.projections.journal import Journal


def samples(journal: Journal) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    registry = registry_for(lambda: journal.view, lambda: {"lag": 0, "last_record_s": 1.0})
    text = exposition(registry).decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def reclaimed() -> Journal:
    """Given a 4-GPU node and a burst queue that took it all, when team submits within its
    quota, then one burst job is reclaimed."""
    journal = Journal()
    journal.at(1, node("n1", gpu=4))
    journal.at(
        2,
        queue("org", gpu_quota=4),
        queue("team", gpu_quota=2, gpu_limit=4, parent="org"),
        queue("burst", gpu_quota=0, parent="org"),
    )
    journal.at(3, job("burst-1", "burst", gpu=2), job("burst-2", "burst", gpu=2))
    journal.obey(4)
    journal.at(5, job("t-1", "team", gpu=2), job("t-2", "team", gpu=2))
    journal.obey(6)
    return journal


def test_gauges_follow_the_workload() -> None:
    journal = reclaimed()
    s = samples(journal)
    assert s[("quotaflow_queue_jobs", (("queue", "team"), ("status", "running")))] == 1
    assert s[("quotaflow_queue_jobs", (("queue", "team"), ("status", "pending")))] == 1
    assert s[("quotaflow_queue_jobs", (("queue", "burst"), ("status", "running")))] == 1
    assert s[("quotaflow_queue_jobs", (("queue", "burst"), ("status", "pending")))] == 1
    assert s[("quotaflow_queue_deserved", (("queue", "team"), ("resource", "gpu")))] == 2
    assert s[("quotaflow_queue_limit", (("queue", "team"), ("resource", "gpu")))] == 4
    assert s[("quotaflow_queue_allocated", (("queue", "org"), ("resource", "gpu")))] == 4
    # The same fair shares the API and `quotaflow queues` show.
    for shown in route(journal.view, "/queues")[1]["queues"]:
        key = ("quotaflow_queue_fair_share", (("queue", shown["queue"]), ("resource", "gpu")))
        assert s[key] == pytest.approx(shown["resources"]["gpu"]["fair_share"], abs=0.001)
    assert s[("quotaflow_nodes", (("state", "live"),))] == 1
    assert s[("quotaflow_projections_preemptions_total", (("queue", "burst"),))] == 1
    assert s[("quotaflow_projections_journal_seq", ())] == journal.view.state.seq
    assert s[("quotaflow_projections_lag_records", ())] == 0


def test_gauges_are_the_same_for_the_same_journal() -> None:
    assert state_gauges(reclaimed().view.state) == state_gauges(reclaimed().view.state)


def test_recent_preemptions_name_the_victim_the_rule_and_the_preemptor() -> None:
    journal = reclaimed()
    [preemption] = recent_preemptions(journal.view.timelines)
    assert preemption["reason"] == "reclaim"
    assert preemption["job"].startswith("burst-") and preemption["by"] == "t-1"
    assert preemption["node"] == "n1"
    status, body = route(journal.view, "/preemptions")
    assert status == 200 and body["preemptions"] == [preemption]


def test_recent_rejections_are_newest_first_and_bounded() -> None:
    rejections = Rejections(keep=3)
    for offset in range(5):
        wire = {"ts": offset, "reason": f"reason {offset}", "input": "x" * 1000, "topic": "t"}
        rejections.add(offset, orjson.dumps(wire))
    rejections.add(5, b"not json")
    newest = rejections.newest()
    assert [r["offset"] for r in newest] == [4, 3, 2]
    assert len(newest[0]["input"]) == 300
    assert rejections.unreadable == 1 and rejections.read == 6
    status, body = route(reclaimed().view, "/rejections", None, rejections)
    assert status == 200 and body["rejections"] == newest


def test_the_new_routes_are_listed_and_described() -> None:
    view = reclaimed().view
    for path in ("/preemptions", "/rejections"):
        assert path in PATHS
        assert path in route(view, "/openapi.json")[1]["paths"]
