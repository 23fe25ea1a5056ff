"""The agent's per-node state file: one holder per node, incarnations, leftover processes."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from streams.agent_state import AgentState, NodeHeldError, _alive_as_recorded, hold_node


def test_the_first_start_makes_an_instance_and_each_start_is_the_next_incarnation(
    tmp_path: Path,
) -> None:
    with hold_node(tmp_path, "p.", "n1") as state:
        state.begin_incarnation(kill_grace_s=1)
        instance = state.instance
        assert state.incarnation == 1
    with hold_node(tmp_path, "p.", "n1") as state:
        state.begin_incarnation(kill_grace_s=1)
        assert (state.instance, state.incarnation) == (instance, 2)
    with hold_node(tmp_path, "other.", "n1") as state:  # another cluster's n1: its own file
        assert state.instance != instance


def test_a_second_holder_of_the_same_node_fails_at_once_naming_the_first(tmp_path: Path) -> None:
    held = r"node n1 is already run by another agent on this machine \(pid \d+"
    with hold_node(tmp_path, "", "n1"):
        with pytest.raises(NodeHeldError, match=held), hold_node(tmp_path, "", "n1"):
            pass
        with hold_node(tmp_path, "", "n2"):  # another node is no conflict
            pass
    with hold_node(tmp_path, "", "n1"):  # released when the holder is done
        pass


def test_a_restart_stops_the_process_groups_its_previous_incarnation_left(tmp_path: Path) -> None:
    orphan = subprocess.Popen(["sleep", "600"], start_new_session=True)
    try:
        with hold_node(tmp_path, "", "n1") as state:
            state.begin_incarnation(kill_grace_s=1)
            state.record_process(orphan.pid, "train", 1)
        with hold_node(tmp_path, "", "n1") as state:
            lines = state.begin_incarnation(kill_grace_s=5)
            assert lines == [
                f"stopped process group {orphan.pid} of train attempt 1, left by incarnation 1"
            ]
            assert orphan.wait(timeout=30) != 0
            assert state.processes == {}
    finally:
        orphan.kill()
        orphan.wait()


def test_a_recorded_pid_now_used_by_another_process_is_left_alone(tmp_path: Path) -> None:
    other = subprocess.Popen(["sleep", "600"], start_new_session=True)
    try:
        assert not _alive_as_recorded(other.pid, start=1)  # a different start time: not ours
        state = AgentState(tmp_path / "n1.json", "i", 1, {other.pid: {"pgid": other.pid,
                           "start": 1, "job": "j", "attempt": 1}})  # fmt: skip
        assert state.begin_incarnation(kill_grace_s=1) == []
        assert other.poll() is None
    finally:
        other.kill()
        other.wait()


def test_an_unreadable_state_file_says_how_to_start_afresh(tmp_path: Path) -> None:
    (tmp_path / "n1.json").write_text("{not json")
    afresh = "move it away to start this node as a new agent"
    with pytest.raises(RuntimeError, match=afresh), hold_node(tmp_path, "", "n1"):
        pass
