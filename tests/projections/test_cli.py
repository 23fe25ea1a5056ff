"""The view commands over a journal file: tables, explain, whatif, replay --until, one-line errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from cli.main import main
from cli.view_sources import parse_time
from domain.codec import encode_journal
from tests.domain.harness import job, node, queue
from tests.projections.journal import Journal


@pytest.fixture
def journal_file(tmp_path: Path) -> Path:
    j = Journal()
    j.at(1_000, queue("a", 8), node("n1", gpu=8))
    j.at(
        2_000,
        job("big", "a", gpu=6, duration_s=10),
        job("head", "a", gpu=4),
        job("small", "a", gpu=1),
    )
    j.obey(2_001)
    j.finish_job(12_001, "big")
    path = tmp_path / "journal.jsonl"
    path.write_bytes(b"".join(encode_journal(r) + b"\n" for r in j.records))
    return path


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_views_from_a_file(journal_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "jobs", "--file", str(journal_file), "--queue", "a", "--at", "5000")
    assert code == 0
    rows = {line.split()[0]: line for line in out.splitlines()[2:]}
    assert " running " in rows["big"] and " 1 " in rows["head"] and " 2 " in rows["small"]
    code, out, _ = run(capsys, "queues", "--file", str(journal_file))
    assert code == 0 and "pending in a" not in out  # all placed once big finished
    code, out, _ = run(capsys, "usage", "--file", str(journal_file))
    assert code == 0 and "n1" in out
    code, out, _ = run(capsys, "explain", "small", "--file", str(journal_file), "--at", "5000")
    assert code == 0 and "position 2 of 2" in out and "waiting behind job head" in out


def test_replay_until_rebuilds_the_past(
    journal_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(capsys, "replay", "--file", str(journal_file), "--until", "5000")
    assert code == 0
    assert "state at" in out and "head" in out and "pending" in out
    code, out, _ = run(capsys, "replay", "--file", str(journal_file))
    assert code == 0 and "the fold emits 3 commands" in out


def test_whatif_from_a_file(
    journal_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    policy = tmp_path / "rr.yaml"
    policy.write_text("queues:\n  a:\n    policy: {kind: round_robin}\n")
    code, out, _ = run(capsys, "whatif", "--file", str(journal_file), "--policy", str(policy))
    assert code == 0 and "small" in out  # round robin lets it skip past the blocked head


def test_whatif_with_a_node_down(
    journal_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The only node fails at 5 s (a NodeDown directive, as in `quotaflow simulate`): on the
    what-if side `big`, running then, is lost with it and waits again, nothing else starts,
    and GPU time ends at the failure (8 GPUs x 4 s offered, 6 x 3 s used)."""
    import json

    policy = tmp_path / "down.yaml"
    policy.write_text("nodes_down:\n  - {node: n1, ts: 5000}\n")
    argv = ["whatif", "--file", str(journal_file), "--policy", str(policy), "--json"]
    code, out, _ = run(capsys, *argv)
    summary = json.loads(out)["summary"]
    assert code == 0
    base, alt = summary["baseline"]["*"], summary["whatif"]["*"]
    assert (base["never_started"], alt["never_started"]) == (0, 2)
    assert alt["waiting_for"] == {"behind": 2, "capacity": 1}
    assert alt["utilisation"] == pytest.approx(18 / 32)
    bad = tmp_path / "bad.yaml"
    bad.write_text("nodes_down:\n  - {node: n7, ts: 5000}\n")
    code, _, err = run(capsys, "whatif", "--file", str(journal_file), "--policy", str(bad))
    assert code == 2 and "not in the journal: n7" in err


def test_errors_are_one_line(
    journal_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for argv in (
        ["queues", "--file", str(tmp_path / "missing.jsonl")],
        ["explain", "x", "--file", str(journal_file), "--at", "soon"],
        ["whatif", "--file", str(journal_file), "--policy", str(tmp_path / "none.yaml")],
        ["jobs", "--file", str(journal_file), "--queue", "nope"],
    ):
        code, _, err = run(capsys, *argv)
        assert code == 2, argv
        assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_parse_time() -> None:
    assert parse_time("1795313430000") == 1795313430000
    assert parse_time("2026-11-22T02:10:30Z") == 1795313430000
    assert parse_time("2026-11-22T02:10:30") == 1795313430000  # UTC when no zone is given
    assert parse_time(None) is None
