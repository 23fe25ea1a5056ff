"""Resource amounts held exactly: gpu in thousandths of a device, cpu in millicores, memory in MB (pure)."""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

RESOURCE_NAMES: tuple[str, ...] = ("gpu", "cpu", "memory")
MANY_COPIES = 1 << 30  # how many copies of an amount that asks nothing fit anywhere
GPU_SCALE = 1000  # one device is 1000 milli-GPU, so 0.5 GPU is held exactly as 500


class ResourceError(ValueError):
    """A resource amount that cannot be held exactly."""


def gpu_to_milli(value: float | int) -> int:
    """Converts a wire GPU amount (devices, fractions allowed) to exact milli-GPU."""
    # Whole devices, the common case (validated wire amounts arrive as floats): exact
    # without Decimal.
    if type(value) is int:
        return value * GPU_SCALE
    if type(value) is float and value.is_integer():
        return int(value) * GPU_SCALE
    try:
        scaled = Decimal(str(value)) * GPU_SCALE
    except InvalidOperation as exc:  # pragma: no cover - pydantic already checked the type
        raise ResourceError(f"gpu amount {value!r} is not a number") from exc
    if scaled != scaled.to_integral_value():
        raise ResourceError(
            f"gpu amount {value} has more than 3 decimals (thousandths of a device)"
        )
    return int(scaled)


def milli_to_gpu(milli: int) -> int | float:
    """Converts milli-GPU back to the wire form: an int when whole, else a float."""
    whole, rest = divmod(milli, GPU_SCALE)
    return whole if rest == 0 else milli / GPU_SCALE


@dataclass(frozen=True, slots=True, init=False)
class Resources:
    """An amount of each resource; the unit of gpu is one thousandth of a device."""

    gpu: int = 0
    cpu: int = 0
    memory: int = 0

    def __init__(self, gpu: int = 0, cpu: int = 0, memory: int = 0) -> None:
        # Built millions of times a cycle: a frozen dataclass's own __init__ sets each field
        # through object.__setattr__, three times slower than the slots' own setters used
        # here; assigning a field afterwards still raises FrozenInstanceError.
        _SET_GPU(self, gpu)
        _SET_CPU(self, cpu)
        _SET_MEMORY(self, memory)

    def __add__(self, other: Resources) -> Resources:
        return Resources(self.gpu + other.gpu, self.cpu + other.cpu, self.memory + other.memory)

    def __sub__(self, other: Resources) -> Resources:
        return Resources(self.gpu - other.gpu, self.cpu - other.cpu, self.memory - other.memory)

    def __mul__(self, times: int) -> Resources:
        return Resources(self.gpu * times, self.cpu * times, self.memory * times)

    __rmul__ = __mul__

    def fits_in(self, available: Resources) -> bool:
        """True when every amount is at most the available one."""
        return (
            self.gpu <= available.gpu
            and self.cpu <= available.cpu
            and self.memory <= available.memory
        )

    def is_zero(self) -> bool:
        return self.gpu == 0 and self.cpu == 0 and self.memory == 0

    def clamp_at_zero(self) -> Resources:
        return Resources(max(self.gpu, 0), max(self.cpu, 0), max(self.memory, 0))

    def max_copies_in(self, available: Resources) -> int:
        """How many copies of this amount fit in `available` (a large number when nothing is asked)."""
        copies = MANY_COPIES
        if self.gpu > 0:
            copies = available.gpu // self.gpu
        if self.cpu > 0:
            copies = min(copies, available.cpu // self.cpu)
        if self.memory > 0:
            copies = min(copies, available.memory // self.memory)
        return max(0, copies)

    def get(self, name: str) -> int:
        value: int = getattr(self, name)
        return value

    def as_tuple(self) -> tuple[int, int, int]:
        return (self.gpu, self.cpu, self.memory)

    def to_wire(self) -> dict[str, Any]:
        return {"gpu": milli_to_gpu(self.gpu), "cpu": self.cpu, "memory": self.memory}

    @staticmethod
    def from_amounts(gpu: float | int = 0, cpu: int = 0, memory: int = 0) -> Resources:
        return Resources(gpu_to_milli(gpu), int(cpu), int(memory))

    def __str__(self) -> str:
        return f"gpu={milli_to_gpu(self.gpu)} cpu={self.cpu}m memory={self.memory}MB"


# The slots' setters (member descriptors) Resources.__init__ uses.
_SET_GPU = vars(Resources)["gpu"].__set__
_SET_CPU = vars(Resources)["cpu"].__set__
_SET_MEMORY = vars(Resources)["memory"].__set__

ZERO = Resources()
