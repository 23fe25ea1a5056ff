"""Projections end to end on a real broker: the HTTP API and the CLI show queue positions, reasons,
usage and timelines; a killed projections process rebuilds the same views; whatif on the Alibaba trace."""

from __future__ import annotations

import csv
import time
import uuid
from pathlib import Path
from typing import Any

import orjson
import pytest
from aiokafka import AIOKafkaProducer

from domain.codec import encode_journal
from domain.events import JournalRecord, Tick
from streams.kafka_io import Topics, ensure_topics
from streams.replay import read_journal
from tests.e2e.projections_process import (
    ROOT,
    WAIT_S,
    Agent,
    Projections,
    cli,
    free_port,
    http,
    stable,
)
from tests.streams.test_sequencer import wait_for

# The traces beside the repository, as the benchmarks read them (a user's clone has none).
TRACE = ROOT.parent / "shared" / "traces" / "alibaba-gpu-v2023"


# -- the scenario -----------------------------------------------------------------------------------


async def test_projections_api_cli_and_restart(kafka_bootstrap: str, tmp_path: Path) -> None:
    from tests.streams.test_sequencer import running_scheduler

    topics = Topics.for_prefix(f"proj-{uuid.uuid4().hex[:8]}.")
    await ensure_topics(kafka_bootstrap, topics)
    port = free_port()
    projections = Projections(kafka_bootstrap, topics, port, tmp_path / "projections.log")
    agent = Agent(kafka_bootstrap, topics)
    await agent.start()
    projections.start()
    try:
        async with running_scheduler(kafka_bootstrap, topics):
            await agent.send(
                topics.admin, "default", {"type": "ClusterConfigured", "heartbeat_timeout_s": 3600}
            )
            for name in ("a", "b"):
                queue = {
                    "type": "QueueConfigured",
                    "queue": name,
                    "resources": {"gpu": {"quota": 2, "limit": -1}},
                }
                await agent.send(topics.admin, name, queue)
            capacity = {"gpu": 4, "cpu": 64000, "memory": 256000}
            await agent.send(
                topics.nodes, "n1", {"type": "NodeHeartbeat", "node": "n1", "capacity": capacity}
            )
            for i in range(4):
                submit = {
                    "type": "JobSubmitted",
                    "job": f"b{i}",
                    "queue": "b",
                    "resources": {"gpu": 1},
                }
                await agent.send(topics.jobs, f"b{i}", submit)
            await agent.expect(4)  # b borrows a's idle quota: 4 GPUs
            await agent.send(
                topics.jobs,
                "a0",
                {"type": "JobSubmitted", "job": "a0", "queue": "a", "resources": {"gpu": 1}},
            )
            [preempt] = await agent.expect(1)
            assert (preempt["type"], preempt["reason"], preempt["by"]) == (
                "Preempt",
                "reclaim",
                "a0",
            )
            victim = preempt["job"]
            [dispatch] = await agent.expect(1)
            assert dispatch["job"] == "a0"
            # Two more for b: both wait behind the requeued victim (b is at its fair share).
            for name in ("b4", "b5"):
                await agent.send(
                    topics.jobs,
                    name,
                    {"type": "JobSubmitted", "job": name, "queue": "b", "resources": {"gpu": 1}},
                )
            await agent.finish(dispatch)

            quiet: dict[str, float] = {}

            async def a0_done() -> list[JournalRecord] | None:
                # No Tick marks a quiet moment any more (none is written while no timer is
                # due): wait for the finish, then for the journal to stay still for a second.
                records = await read_journal(kafka_bootstrap, topics.prefix)
                if not any(r.event.type == "JobFinished" for r in records):
                    return None
                now = time.monotonic()
                if quiet.get("length") != len(records):
                    quiet.update(length=len(records), since=now)
                return records if now - quiet["since"] >= 1.0 else None

            await wait_for(a0_done, "a0's finish in the journal", timeout_s=WAIT_S)
        # The scheduler has stopped: the journal is frozen from here on.
        records = await read_journal(kafka_bootstrap, topics.prefix)
        last_seq = records[-1].seq
        health = await projections.caught_up(last_seq)
        assert health["errors"] == []
        assert health["derived_not_yet_observed"] == 0 and health["observed_not_derived"] == 0

        # -- the API --------------------------------------------------------------------------
        queues = http(port, "/queues")
        b = next(q for q in queues["queues"] if q["queue"] == "b")
        assert b["resources"]["gpu"]["deserved"] == 2
        assert b["preemptions"] == 1
        # a0's finish let the requeued victim run again; b4 and b5 wait, in submission order.
        assert [(p["position"], p["job"]) for p in b["pending"]] == [(1, "b4"), (2, "b5")]
        assert all(p["reason"] for p in b["pending"])
        job = http(port, f"/jobs/{victim}")
        events = [(e["event"], e.get("attempt")) for e in job["timeline"]]
        assert events[:3] == [("submitted", None), ("dispatched", 1), ("started", 1)]
        assert (
            ("preempted", 1) in events and ("stopped", 1) in events and ("dispatched", 2) in events
        )
        preempted = next(e for e in job["timeline"] if e["event"] == "preempted")
        assert (preempted["reason"], preempted["by"]) == ("reclaim", "a0")
        a0 = http(port, "/jobs/a0")
        assert [e["event"] for e in a0["timeline"]][-1] == "finished"
        assert any(e["event"] == "preempting" and e["victim"] == victim for e in a0["timeline"])
        usage = http(port, "/usage")
        assert usage["nodes"]["n1"]["capacity"]["gpu"] == 4
        nodes = http(port, "/nodes")
        assert nodes["nodes"][0]["allocated"]["gpu"] == usage["nodes"]["n1"]["allocated"]["gpu"]
        assert "/queues/{id}" in http(port, "/openapi.json")["paths"]

        # -- the CLI: from the journal, and through the API -----------------------------------
        kafka = ["--bootstrap", kafka_bootstrap, "--topic-prefix", topics.prefix]
        out = cli("jobs", "--queue", "b", *kafka)
        assert out.returncode == 0, out.stderr
        line = next(row for row in out.stdout.splitlines() if row.startswith("b4 "))
        assert " pending " in line and " 1 " in line
        assert (
            cli("jobs", "--queue", "b", "--api", f"http://127.0.0.1:{port}").stdout.splitlines()[1:]
            == out.stdout.splitlines()[1:]
        )
        explained = cli("explain", victim, *kafka)
        assert explained.returncode == 0, explained.stderr
        assert "is running (attempt 2)" in explained.stdout
        assert "reason 'reclaim'" in explained.stdout and "by a0" in explained.stdout
        before = cli("explain", victim, "--at", str(preempted["ts"] - 1), *kafka)
        assert "is running (attempt 1)" in before.stdout and "reclaim" not in before.stdout
        stopped = next(e for e in job["timeline"] if e["event"] == "stopped")
        between = cli("explain", victim, "--at", str(stopped["ts"]), *kafka)
        assert "is pending in queue b, position 1" in between.stdout, between.stdout
        assert cli("queues", *kafka).returncode == 0
        assert "n1" in cli("usage", *kafka).stdout
        # The audit: the whole journal reproduces every command; --until rebuilds the past.
        audit = cli("replay", *kafka)
        assert audit.returncode == 0 and "every command reproduced" in audit.stdout, (
            audit.stdout + audit.stderr
        )
        past = cli("replay", *kafka, "--until", str(stopped["ts"]))
        assert past.returncode == 0, past.stderr
        past_line = next(row for row in past.stdout.splitlines() if row.startswith(victim + " "))
        assert " pending " in past_line
        saved = tmp_path / "journal.jsonl"
        saved.write_bytes(b"".join(encode_journal(r) + b"\n" for r in records))
        from_file = cli("replay", "--file", str(saved), "--until", str(stopped["ts"]))
        assert from_file.stdout.split("state at", 1)[1] == past.stdout.split("state at", 1)[1]
        bad = cli("explain", victim, "--at", "yesterday", *kafka)
        assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1

        # -- an aborted transaction on the journal is never seen ----------------------------------
        aborted = AIOKafkaProducer(
            bootstrap_servers=kafka_bootstrap, transactional_id=f"test-abort-{uuid.uuid4().hex}"
        )
        await aborted.start()
        try:
            await aborted.begin_transaction()
            garbage = JournalRecord(seq=last_seq + 1, ts=records[-1].ts + 1, event=Tick())
            await aborted.send_and_wait(topics.journal, encode_journal(garbage), key=b"default")
            await aborted.abort_transaction()
        finally:
            await aborted.stop()

        # -- kill and restart: resumed from the checkpoint, the same views ----------------------
        paths = ["/queues", f"/jobs/{victim}", "/jobs/a0", "/nodes", "/usage?points=1", "/jobs"]
        first = {path: stable(http(port, path)) for path in paths}
        await projections.checkpointed(last_seq)
        projections.kill()
        projections.start()
        again = await projections.caught_up(last_seq)
        assert again["seq"] == last_seq  # the aborted record was not read
        assert again["errors"] == []
        assert again["resumed_from"]["seq"] == last_seq
        assert again["read_since_start"]["journal"] == 0  # nothing before the checkpoint re-read
        second = {path: stable(http(port, path)) for path in paths}
        assert second == first

        # -- the journal grows while it is down: a restart reads only the tail ------------------
        projections.kill()
        tail = [
            JournalRecord(seq=last_seq + i, ts=records[-1].ts + 1000 * i, event=Tick())
            for i in (1, 2, 3)
        ]
        writer = AIOKafkaProducer(
            bootstrap_servers=kafka_bootstrap, transactional_id=f"test-tail-{uuid.uuid4().hex}"
        )
        await writer.start()
        try:
            async with writer.transaction():
                for record in tail:
                    await writer.send(topics.journal, encode_journal(record), key=b"default")
        finally:
            await writer.stop()
        projections.start()
        resumed = await projections.caught_up(last_seq + 3)
        assert resumed["resumed_from"]["seq"] == last_seq
        assert resumed["read_since_start"]["journal"] == 3
        assert resumed["errors"] == [] and resumed["records"] == again["records"] + 3
        third = {path: stable(http(port, path)) for path in paths}
        await projections.checkpointed(last_seq + 3)

        # -- a damaged checkpoint: set aside, the views rebuilt from offset 0, the same -----------
        projections.stop()
        projections.checkpoint.write_bytes(b"QUOTAFLOW-PROJECTIONS-CHECKPOINT\n{torn")
        projections.start()
        rebuilt = await projections.caught_up(last_seq + 3)
        assert rebuilt["resumed_from"] is None and "header" in rebuilt["rebuilt_because"]
        assert rebuilt["read_since_start"]["journal"] == len(records) + 3
        assert {path: stable(http(port, path)) for path in paths} == third
    finally:
        projections.stop()
        await agent.stop()


# -- whatif on the Alibaba trace ----------------------------------------------------------------------

QOS_PRIORITY = {"LS": 7, "Guaranteed": 6, "Burstable": 5, "BE": 3}


def alibaba_journal(path: Path, jobs: int = 400, nodes: int = 24) -> Path:
    """A journal from the trace's first GPU jobs and nodes (read in place, never copied into the repo)."""
    from domain.codec import decode_timed
    from projections import synthetic

    events: list[dict[str, Any]] = []
    with (TRACE / "openb_node_list_gpu_node.csv").open() as handle:
        rows = list(csv.DictReader(handle))[:nodes]
    gpus = sum(int(r["gpu"]) for r in rows)
    for qos in QOS_PRIORITY:
        queue = qos.lower()
        events.append(
            {
                "type": "QueueConfigured",
                "queue": queue,
                "ts": 0,
                "resources": {"gpu": {"quota": gpus // 4, "limit": -1}},
            }
        )
    for row in rows:
        capacity = {
            "gpu": int(row["gpu"]),
            "cpu": int(row["cpu_milli"]),
            "memory": int(row["memory_mib"]) * 1048576 // 10**6,
        }
        events.append({"type": "NodeHeartbeat", "node": row["sn"], "capacity": capacity, "ts": 0})
    with (TRACE / "openb_pod_list_default.csv").open() as handle:
        taken = 0
        for row in csv.DictReader(handle):
            num_gpu = int(row["num_gpu"])
            if num_gpu == 0 or row["qos"] not in QOS_PRIORITY:
                continue
            gpu = int(row["gpu_milli"]) / 1000 if num_gpu == 1 else num_gpu
            start = int(row["scheduled_time"] or row["creation_time"])
            duration = max(1, int(row["deletion_time"]) - start)
            events.append(
                {
                    "type": "JobSubmitted", "job": row["name"], "queue": row["qos"].lower(),
                    "priority": QOS_PRIORITY[row["qos"]], "duration_s": duration / 1000,
                    "resources": {"gpu": gpu, "cpu": int(row["cpu_milli"]), "memory": int(row["memory_mib"]) * 1048576 // 10**6},
                    # Compressed: one trace second is one millisecond, so months fit in hours.
                    "ts": 1 + int(row["creation_time"]),
                }
            )  # fmt: skip
            taken += 1
            if taken == jobs:
                break
    events.sort(key=lambda e: e["ts"])
    inputs = (decode_timed(orjson.dumps(e)) for e in events)
    records = list(synthetic.journal(inputs, heartbeat_ms=10_000))
    out = path / "alibaba-journal.jsonl"
    out.write_bytes(b"".join(encode_journal(r) + b"\n" for r in records))
    return out


def test_whatif_on_the_alibaba_trace_fifo_vs_intelligent(tmp_path: Path) -> None:
    if not (TRACE / "openb_pod_list_default.csv").is_file():
        pytest.skip(f"the Alibaba GPU trace is not at {TRACE}")
    journal = alibaba_journal(tmp_path)
    policy = tmp_path / "intelligent.yaml"
    policy.write_text("queues:\n  '*':\n    policy: {kind: intelligent, aging_interval_s: 600}\n")
    out = cli("whatif", "--file", str(journal), "--policy", str(policy))
    assert out.returncode == 0, out.stderr
    print(out.stdout)
    summary = out.stdout.split("\n\n")[0]
    for queue in ("be", "burstable", "guaranteed", "ls", "(all)"):
        assert any(line.startswith(queue + " ") for line in summary.splitlines()), summary
    as_json = orjson.loads(
        cli("whatif", "--file", str(journal), "--policy", str(policy), "--json").stdout
    )
    assert as_json["summary"]["baseline"]["*"]["jobs"] == 400
