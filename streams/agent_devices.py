"""The node's GPU devices as its agent reports them: from --gpu (and --gpu-model, --gpu-memory) or from nvidia-smi (I/O shell)."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass

NVIDIA_SMI_TIMEOUT_S = 10.0


@dataclass(frozen=True, slots=True)
class Gpu:
    """One device: its index (what CUDA_VISIBLE_DEVICES names), model and memory in MB."""

    index: int
    model: str | None = None
    memory: int | None = None  # MB (10^6 bytes), as the contract's memory


def declared(count: int, model: str | None = None, memory: int | None = None) -> list[Gpu]:
    """`count` devices numbered 0..count-1, all of one model and memory (the --gpu flags)."""
    return [Gpu(index, model, memory) for index in range(count)]


def detect() -> list[Gpu] | None:
    """The devices nvidia-smi lists, or None when it is not installed or fails."""
    program = shutil.which("nvidia-smi")
    if program is None:
        return None
    query = "--query-gpu=index,name,memory.total"
    try:
        listed = subprocess.run(
            [program, query, "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=NVIDIA_SMI_TIMEOUT_S,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return parse_nvidia_smi(listed)


def parse_nvidia_smi(listed: str) -> list[Gpu] | None:
    """Lines of `index, name, memory.total` (MiB); None when one cannot be read."""
    gpus = []
    for line in listed.splitlines():
        if not line.strip():
            continue
        fields = [field.strip() for field in line.split(",")]
        if len(fields) != 3:
            return None
        index, name, mebibytes = fields
        try:
            memory = int(float(mebibytes) * 1.048576)  # MiB -> MB (10^6 bytes)
            gpus.append(Gpu(int(index), name or None, memory))
        except ValueError:
            return None
    return sorted(gpus, key=lambda gpu: gpu.index)
