"""The view model: rebuilt from the journal alone, deaf to redelivery, usage and timelines right."""

from __future__ import annotations

import orjson

from projections import api
from projections.read_models import jobs_view, queues_view, usage_view
from projections.view import View, build
from tests.domain.harness import job, node, queue
from tests.projections.journal import Journal


def scenario() -> Journal:
    j = Journal()
    j.at(1_000, queue("a", 4), queue("b", 4), node("n1", gpu=8))
    j.at(2_000, job("a1", "a", gpu=6), job("a2", "a", gpu=4), job("a3", "a", gpu=1))
    j.obey(2_000 + 1)
    j.at(5_000, job("b1", "b", gpu=1))
    j.obey(5_001)
    j.finish_job(12_000, "a1")
    j.obey(12_001)
    return j


def dump(view: View) -> bytes:
    return orjson.dumps(
        {
            "queues": queues_view(view),
            "usage": usage_view(view, points=True),
            "timelines": view.timelines,
        },
        option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS,
    )


def test_rebuilding_from_the_journal_gives_the_same_view_every_time() -> None:
    j = scenario()
    assert dump(build(j.records)) == dump(build(j.records)) == dump(j.view)


def test_records_delivered_twice_are_skipped() -> None:
    j = scenario()
    view = View()
    half = len(j.records) // 2
    for record in j.records[:half] + j.records[: half + 3] + j.records:  # a re-read after a restart
        view.apply(record)
    view.finish()
    assert view.duplicates == half + (half + 3)
    assert dump(view) == dump(build(j.records))


def test_timeline_has_submit_dispatch_start_finish_in_order() -> None:
    j = scenario()
    events = [(e["event"], e.get("node"), e.get("attempt")) for e in j.view.timelines["a1"]]
    assert events == [
        ("submitted", None, None),
        ("dispatched", "n1", 1),
        ("started", "n1", 1),
        ("finished", "n1", 1),
    ]
    [dispatch] = [e for e in j.view.timelines["a2"] if e["event"] == "dispatched"]
    assert (dispatch["ts"], dispatch["reason"]) == (12_000, "quota")


def test_usage_is_allocated_over_capacity_integrated_over_time() -> None:
    j = scenario()
    usage = usage_view(j.view)
    # a held 6 GPUs from 2 s to 12 s, then a2 and a3: 5 GPUs from 12 s.
    a = j.view.queue_usage["a"]
    allocated, capacity = a.totals_until(12_001)
    assert allocated[0] == 6_000 * 10_000 + 5_000 * 1  # milli-GPU x ms
    assert capacity[0] == 8_000 * (12_001 - 1_000)  # since the queue was configured
    assert usage["queues"]["a"]["allocated"]["gpu"] == 5
    assert usage["nodes"]["n1"]["allocated"]["gpu"] == 6  # a2 4 + a3 1 + b1 1
    assert usage["cluster"]["utilisation"] == 0.75


def test_jobs_view_shows_positions_and_status() -> None:
    j = Journal()
    j.at(1, queue("a", 8), node("n1", gpu=8))
    j.at(2, job("big", "a", gpu=6), job("head", "a", gpu=4), job("small", "a", gpu=1))
    rows = {r["job"]: r for r in jobs_view(j.view, "a")}
    assert rows["big"]["status"] == "running" and rows["big"]["position"] is None
    assert (rows["head"]["position"], rows["small"]["position"]) == (1, 2)


def test_commands_read_from_the_topic_are_checked_against_the_fold() -> None:
    j = scenario()
    view = View()
    derived = []
    for record in j.records:
        derived += view.apply(record)
    derived += view.finish()
    for command in derived:
        view.observe_command(orjson.loads(orjson.dumps(command.to_wire())))
    assert view.unmatched() == (0, 0)
    view.observe_command({"type": "Dispatch", "job": "ghost"})
    assert view.unmatched() == (0, 1)


def test_api_routes_and_openapi() -> None:
    j = scenario()
    status, body = api.route(j.view, "/queues")
    assert status == 200 and [q["queue"] for q in body["queues"]] == ["a", "b"]
    assert api.route(j.view, "/queues/b")[1]["resources"]["gpu"]["allocated"] == 1
    assert api.route(j.view, "/queues/zzz")[0] == 404
    assert api.route(j.view, "/jobs/a1")[1]["status"] == "finished"
    assert api.route(j.view, "/jobs/nope")[0] == 404
    assert api.route(j.view, "/nodes")[1]["nodes"][0]["node"] == "n1"
    assert "points" in api.route(j.view, "/usage", {"points": "1"})[1]["cluster"]
    spec = api.route(j.view, "/openapi.json")[1]
    for path in ("/queues", "/queues/{id}", "/jobs/{id}", "/nodes", "/usage", "/openapi.json"):
        assert path in spec["paths"]


def one_gpu_jobs(count: int, duration_s: int) -> list[dict[str, object]]:
    """`count` one-GPU jobs of queue a, j0 first, submitted 1 ms apart from ts 1000."""
    return [
        {
            "type": "JobSubmitted",
            "job": f"j{i}",
            "queue": "a",
            "ts": 1000 + i,
            "duration_s": duration_s,
            "resources": {"gpu": 1},
        }
        for i in range(count)
    ]


def test_synthetic_journal_is_a_sequencer_journal_that_runs_every_job_to_its_end() -> None:
    from domain.audit import expected_commands
    from domain.codec import decode_timed
    from projections import synthetic

    lines = [
        {
            "type": "QueueConfigured",
            "queue": "a",
            "ts": 0,
            "resources": {"gpu": {"quota": 2, "limit": -1}},
        },
        {"type": "NodeHeartbeat", "node": "n1", "ts": 0, "capacity": {"gpu": 2}},
        *one_gpu_jobs(5, duration_s=30),
    ]
    records = list(synthetic.journal(decode_timed(orjson.dumps(line)) for line in lines))
    stamps = [r.ts for r in records]
    assert stamps == sorted(stamps) and [r.seq for r in records] == list(range(1, len(records) + 1))
    view = build(records)
    assert sorted(view.state.ended_jobs) == [f"j{i}" for i in range(5)] and not view.state.jobs
    commands, _, _ = expected_commands(records)
    assert sum(1 for r in records if r.event.type == "JobStarted") == len(commands) == 5
    # Two GPUs, five 30 s one-GPU jobs submitted 1 ms apart: three waves, 30 s apart; each
    # agent answer and each finish comes 1 ms after what caused it.
    starts = sorted(e["ts"] for j in view.timelines.values() for e in j if e["event"] == "started")
    assert [s - 1001 for s in starts] == [0, 1, 30_001, 30_002, 60_002]


def test_synthetic_journal_notes_quiet_heartbeats_as_the_sequencer_does() -> None:
    from domain.audit import expected_commands
    from domain.codec import decode_timed
    from projections import synthetic

    # Given two nodes whose agents heartbeat every 5 s under a 30 s timeout, and jobs that
    # keep them busy for five minutes
    lines: list[dict[str, object]] = [
        {"type": "ClusterConfigured", "heartbeat_timeout_s": 30, "ts": 0},
        {"type": "QueueConfigured", "queue": "a", "ts": 0, "resources": {"gpu": {"quota": 2}}},
        {"type": "NodeHeartbeat", "node": "n1", "ts": 0, "capacity": {"gpu": 1}},
        {"type": "NodeHeartbeat", "node": "n2", "ts": 0, "capacity": {"gpu": 1}},
        *one_gpu_jobs(10, duration_s=60),
    ]
    timed = (decode_timed(orjson.dumps(line)) for line in lines)
    # When the journal is written
    records = list(synthetic.journal(timed, heartbeat_ms=5_000))
    kinds = [record.event.type for record in records]
    # Then only the registrations are journaled as heartbeats; the others arrive as a few
    # NodesAlive records, at least one per half timeout
    assert kinds.count("NodeHeartbeat") == 2
    alive = [record for record in records if record.event.type == "NodesAlive"]
    assert 20 <= len(alive) < 120  # 5 minutes / 15 s, against 120 heartbeats journaled before
    # And no node was lost: every job ran once, in turn, and a replay gives the same commands
    view = build(records)
    assert sorted(view.state.ended_jobs) == [f"j{i}" for i in range(10)]
    assert not any(node.lost for node in view.state.nodes.values())
    commands, _, _ = expected_commands(records)
    assert [command.type for command in commands] == ["Dispatch"] * 10
