"""What an --exec agent gives a job: its environment from the Dispatch, how its end is read, the node's devices."""

from __future__ import annotations

import signal

from domain.agent import Run
from streams.agent_devices import Gpu, declared, parse_nvidia_smi
from streams.agent_process import Exit
from streams.agent_runs import Launch, launch_of, task_environment


def run(tasks: int = 2) -> Run:
    return Run("train", "n1", 3, tasks, None, {"command": "python train.py"}, 0, 1)


def test_a_dispatch_with_devices_gives_each_task_its_own_and_the_process_their_union() -> None:
    launch = launch_of(
        {"type": "Dispatch", "resources": {"gpu": 2}, "devices": [[0, 1], [2, 3]], "tasks": 2}
    )
    env = task_environment(run(), "n1", launch)
    assert env["CUDA_VISIBLE_DEVICES"] == "0,1,2,3"
    assert env["QUOTAFLOW_TASK_DEVICES"] == "0,1;2,3"
    assert "QUOTAFLOW_GPU_FRACTION" not in env
    assert (env["QUOTAFLOW_JOB"], env["QUOTAFLOW_ATTEMPT"], env["QUOTAFLOW_TASKS"]) == (
        "train",
        "3",
        "2",
    )


def test_a_fractional_task_names_its_shared_device_and_its_fraction() -> None:
    launch = launch_of({"resources": {"gpu": 0.5}, "devices": [[5]], "tasks": 1})
    env = task_environment(run(1), "n1", launch)
    assert env["CUDA_VISIBLE_DEVICES"] == "5"
    assert env["QUOTAFLOW_GPU_FRACTION"] == "0.5"


def test_a_job_without_gpus_sees_none_and_an_older_dispatch_leaves_the_variable_alone() -> None:
    cpu_only = task_environment(run(1), "n1", launch_of({"resources": {"cpu": 1000}}))
    assert cpu_only["CUDA_VISIBLE_DEVICES"] == ""
    no_devices = task_environment(run(1), "n1", launch_of({"resources": {"gpu": 1}}))
    assert "CUDA_VISIBLE_DEVICES" not in no_devices


def test_the_grace_period_comes_from_the_dispatch_when_it_has_one() -> None:
    assert launch_of({"resources": {}, "preempt_grace_s": 30}).grace_s == 30
    assert launch_of({"resources": {}}) == Launch(grace_s=None)


def test_an_exit_by_signal_reads_as_the_shell_reports_it() -> None:
    assert Exit.of(0) == Exit(0) and Exit.of(0).succeeded
    assert Exit.of(3).describe() == "exit 3"
    killed = Exit.of(-signal.SIGKILL)
    assert (killed.code, killed.reason, killed.succeeded) == (137, "SIGKILL", False)
    assert Exit.of(-signal.SIGTERM).describe() == "exit 143 (SIGTERM)"


def test_devices_come_from_the_flags_or_from_nvidia_smi() -> None:
    assert declared(2, "a100", 81920) == [Gpu(0, "a100", 81920), Gpu(1, "a100", 81920)]
    listed = "1, NVIDIA H100 80GB HBM3, 81559\n0, NVIDIA H100 80GB HBM3, 81559\n"
    assert parse_nvidia_smi(listed) == [
        Gpu(0, "NVIDIA H100 80GB HBM3", 85520),
        Gpu(1, "NVIDIA H100 80GB HBM3", 85520),
    ]
    assert parse_nvidia_smi("garbage") is None
