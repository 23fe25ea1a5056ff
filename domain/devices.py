"""A node's GPU devices: which device indices a task gets, and how many tasks still fit (pure).

The one seam for device choice (docs/devices.md). Amounts are milli-GPU (1000 is one device).

- A task asking whole GPUs (1, 2, ...) gets that many whole devices nothing else touches:
  no task, no stopping task, no room held for a preemptor. The lowest free indices first.
- A fractional task (below 1) shares one device: the fullest device it still fits on
  (least room left, ties by lowest index), so a fresh device is opened only when no shared
  one has room. Fractions never land on a device a whole task uses (it has no room left).
- A task of more than one GPU that is not whole (only in journals from before devices; new
  ones are refused) takes the next whole number of whole devices.

Per device, as for the node's totals (domain/entities.Node.free_for), room held for a
preemptor is carved first out of what stopping tasks will free: a job that holds room on
the device counts its own hold as free.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from domain.resources import GPU_SCALE

WHOLE = GPU_SCALE  # one device
Assignment = tuple[int, ...]  # one task's device indices
Usage = dict[int, int]  # device index -> milli-GPU (zeros dropped)
NONE: Mapping[int, int] = {}
MANY = 1 << 30  # what "no limit" counts as (a task that asks no GPU)


def devices_per_task(gpu: int) -> int:
    """Whole devices a task of `gpu` milli-GPU takes (0 for a fraction or none)."""
    return 0 if gpu < WHOLE else -(-gpu // WHOLE)


def share(gpu: int) -> int:
    """What a task of `gpu` milli-GPU uses on each of its devices."""
    return gpu if gpu < WHOLE else WHOLE


def usage(assignments: Iterable[Assignment], gpu: int) -> Usage:
    """Milli-GPU per device that tasks of `gpu` each on `assignments` use."""
    used: Usage = {}
    amount = share(gpu)
    for assignment in assignments:
        for index in assignment:
            used[index] = used.get(index, 0) + amount
    return used


@dataclass(frozen=True, slots=True)
class DeviceLayout:
    """Which devices a node has: the indices its heartbeat listed, or, when it listed none,
    whole devices 0..whole-1 and, for a capacity that is not whole (e.g. 2.5), one last
    partial device `whole` of the rest (fractions may use it, whole tasks never)."""

    listed: tuple[int, ...] | None = None
    whole: int = 0
    partial: int = 0  # milli-GPU of the partial device, 0: none
    members: frozenset[int] = frozenset()  # `listed` as a set

    @staticmethod
    def of(capacity_gpu: int, listed: Iterable[int] | None = None) -> DeviceLayout:
        if listed is not None:
            indices = tuple(sorted(listed))
            return DeviceLayout(indices, members=frozenset(indices))
        whole, rest = divmod(capacity_gpu, WHOLE)
        return DeviceLayout(None, whole, rest)

    @property
    def whole_devices(self) -> int:
        return len(self.listed) if self.listed is not None else self.whole

    def whole_indices(self) -> Sequence[int]:
        """Every device of a whole GPU, lowest index first (all but the partial one)."""
        return self.listed if self.listed is not None else range(self.whole)

    def indices(self) -> Iterator[int]:
        """Every device, lowest index first."""
        if self.listed is not None:
            yield from self.listed
            return
        yield from range(self.whole)
        if self.partial:
            yield self.whole

    def capacity(self, index: int) -> int:
        if self.listed is not None:
            return WHOLE if index in self.members else 0
        if 0 <= index < self.whole:
            return WHOLE
        return self.partial if index == self.whole else 0  # 0: a device that is gone


@dataclass(slots=True)
class NodeDevices:
    """A node's devices and what its tasks use, are stopping and hold on each (sparse)."""

    layout: DeviceLayout = field(default_factory=DeviceLayout)
    used: Usage = field(default_factory=dict)  # placed and stopping tasks
    stopping: Usage = field(default_factory=dict)  # the part of `used` being stopped
    held: Usage = field(default_factory=dict)  # kept for preemptors

    # -- changes (the state's place / stop / release / hold go through these) -------------

    def add(self, kind: str, amounts: Mapping[int, int], sign: int = 1) -> None:
        target: Usage = getattr(self, kind)
        for index in sorted(amounts):
            value = target.get(index, 0) + sign * amounts[index]
            if value:
                target[index] = value
            else:
                target.pop(index, None)

    def save(self) -> tuple[Usage, Usage, Usage]:
        return dict(self.used), dict(self.stopping), dict(self.held)

    def restore(self, saved: tuple[Usage, Usage, Usage]) -> None:
        self.used, self.stopping, self.held = (dict(part) for part in saved)

    # -- room -------------------------------------------------------------------------------

    def room(self, index: int, own: Mapping[int, int] = NONE, future: bool = False) -> int:
        """Milli-GPU a job holding `own` may use on the device now, or, `future`, once every
        stopping task is gone (what a preemption may hold for its preemptor)."""
        held = self.held.get(index, 0) - own.get(index, 0)
        capacity, used = self.layout.capacity(index), self.used.get(index, 0)
        stopping = self.stopping.get(index, 0)
        if future:
            return capacity - used + stopping - held
        return capacity - used - max(0, held - stopping)

    def _touched(self) -> list[int]:
        return sorted(self.used.keys() | self.held.keys())

    def copies(self, gpu: int, own: Mapping[int, int] = NONE, future: bool = False) -> int:
        """How many tasks of `gpu` milli-GPU the devices hold now (or in the `future`)."""
        if gpu <= 0:
            return MANY
        layout = self.layout
        per_device = devices_per_task(gpu)
        whole_free = layout.whole_devices  # whole devices with all their room
        partial = layout.partial  # room on the partial device, if any
        fits = 0  # fractional tasks that fit on touched whole devices
        used = self.used
        for index in used.keys() | self.held.keys():  # order-free: only counted
            capacity = layout.capacity(index)
            if per_device and not future and capacity == WHOLE and used.get(index, 0) > 0:
                whole_free -= 1  # a task uses it now: not all its room (room() < WHOLE)
                continue
            room = self.room(index, own, future)
            if capacity == WHOLE:
                if room != WHOLE:
                    whole_free -= 1
                    if not per_device and room > 0:
                        fits += room // gpu
            elif capacity and index == layout.whole:
                partial = max(0, room)
        if per_device:
            return whole_free // per_device
        return fits + whole_free * (WHOLE // gpu) + partial // gpu

    def copies_freeing(self, gpu: int, freed: Mapping[int, int]) -> int:
        """`copies(gpu)` once tasks using `freed` (milli-GPU per device) are gone, as if
        released; nothing changes."""
        used = dict(self.used)
        for index, amount in freed.items():
            value = used.get(index, 0) - amount
            if value:
                used[index] = value
            else:
                used.pop(index, None)
        return NodeDevices(self.layout, used, self.stopping, self.held).copies(gpu)

    def choose(
        self, gpu: int, tasks: int, own: Mapping[int, int] = NONE, future: bool = False
    ) -> list[Assignment] | None:
        """Devices for `tasks` tasks of `gpu` milli-GPU each, or None when they do not fit."""
        if gpu <= 0:
            return [() for _ in range(tasks)]
        per_device = devices_per_task(gpu)
        if per_device:
            free = self._whole_free(own, future, per_device * tasks)
            if len(free) < per_device * tasks:
                return None
            return [
                tuple(free[start : start + per_device])
                for start in range(0, per_device * tasks, per_device)
            ]
        rooms = {index: self.room(index, own, future) for index in self._touched()}
        # Untouched devices: the lowest whole one and the partial one are the only candidates
        # beyond the touched ones (any other untouched device is just like the lowest).
        fresh = self._whole_free(own, future, 1, untouched_only=True)
        for index in fresh:
            rooms[index] = WHOLE
        partial_index = self.layout.whole if self.layout.listed is None else None
        if self.layout.partial and partial_index is not None and partial_index not in rooms:
            rooms[partial_index] = self.layout.partial
        chosen: list[Assignment] = []
        for _ in range(tasks):
            fitting = [(room, index) for index, room in rooms.items() if room >= gpu]
            if not fitting:
                return None
            room, index = min(fitting)
            chosen.append((index,))
            rooms[index] = room - gpu
            if fresh and index == fresh[0]:
                fresh = self._whole_free(own, future, 1, untouched_only=True, after=index)
                for later in fresh:
                    rooms.setdefault(later, WHOLE)
        return chosen

    def overbook(self, gpu: int, tasks: int, own: Mapping[int, int] = NONE) -> list[Assignment]:
        """Devices for tasks that do not fit (only after the node's capacity shrank under
        running tasks): each task takes the devices with the most room, ties lowest index."""
        per_device = max(1, devices_per_task(gpu))
        indices = list(self.layout.indices()) or sorted(self.used)
        rooms = {index: self.room(index, own) for index in indices}
        chosen: list[Assignment] = []
        for _ in range(tasks):
            best = sorted(rooms, key=lambda index: (-rooms[index], index))[:per_device]
            for index in best:
                rooms[index] -= share(gpu)
            chosen.append(tuple(sorted(best)))
        return chosen

    def _whole_free(
        self,
        own: Mapping[int, int],
        future: bool,
        wanted: int,
        untouched_only: bool = False,
        after: int = -1,
    ) -> list[int]:
        """Up to `wanted` whole devices with all their room, lowest index first."""
        found: list[int] = []
        used, held = self.used, self.held
        for index in self.layout.whole_indices():
            if len(found) >= wanted:
                break
            if index <= after:
                continue
            if index in used or index in held:
                if untouched_only or (not future and used.get(index, 0) > 0):
                    continue  # a task uses it now: not all its room (room() < WHOLE)
                if self.room(index, own, future) != WHOLE:
                    continue
            found.append(index)
        return found
