"""Bounds on how many tasks a victim search could make room for, from what its queues may release in all (pure).

A fairness rule bounds what each victim queue may release (`ReleaseLedger`: a walk never
takes more of a queue than its cap, per resource, over all nodes together). The count per
node in `Room.most_if_emptied` caps each queue's share of a node, but a queue running on
many nodes may still free up to its cap on each. These two bounds spend the caps once:

- `most_released`: every live node's free room plus all the caps, in total, in resources
  alone;
- `most_paid_for`: node by node, what each more task still lacks there is paid from the
  caps' total, cheapest first. Where free room is scattered (a GPU here, two there) a job
  of whole nodes needs nearly a node's worth freed for each task, which the totals cannot
  see.

Both count only a resource on which every queue has a cap (one without may free anything),
so a job that asks for no such resource gets MANY_COPIES. A walk's result, as `Node.copies`
counts it, is never above either: see each function.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Protocol

from domain.resources import MANY_COPIES, Resources
from domain.state import Job, State

NO_CAP = 1 << 62  # more than any queue could release of a resource
Cap = tuple[int, int, int]  # per resource, the most a queue may release (NO_CAP: no bound)
Freeable = Sequence[tuple[Mapping[str, Resources], Cap]]  # per queue: placed per node, cap


class Room(Protocol):
    """What the bounds read of domain.cycle.room.Room: the job, the state, how many tasks
    the nodes hold now in all and per node, and which nodes count."""

    @property
    def job(self) -> Job: ...

    @property
    def state(self) -> State: ...

    @property
    def total(self) -> int: ...

    def copies(self, node_id: str) -> int: ...

    def usable(self, node_id: str) -> bool: ...


def capped_per_node(queues: Freeable) -> Iterator[tuple[str, tuple[int, int, int]]]:
    """Per node, what the queues may free there: what each runs there, capped by what it may
    release in all (`Room.most_if_emptied`, `_paid_for`)."""
    if len(queues) == 1:  # the usual case: one candidate queue, nothing to add up
        per_node, (most_gpu, most_cpu, most_memory) = queues[0]
        for node_id, placed in per_node.items():
            yield (
                node_id,
                (
                    min(placed.gpu, most_gpu),
                    min(placed.cpu, most_cpu),
                    min(placed.memory, most_memory),
                ),
            )
        return
    freed: dict[str, tuple[int, int, int]] = {}
    for per_node, (most_gpu, most_cpu, most_memory) in queues:
        for node_id, placed in per_node.items():
            gpu = min(placed.gpu, most_gpu)
            cpu = min(placed.cpu, most_cpu)
            memory = min(placed.memory, most_memory)
            earlier = freed.get(node_id)
            if earlier is not None:
                gpu, cpu, memory = earlier[0] + gpu, earlier[1] + cpu, earlier[2] + memory
            freed[node_id] = (gpu, cpu, memory)
    yield from freed.items()


def capped_resources(room: Room, queues: Freeable) -> list[tuple[int, int]]:
    """(resource index, amount per task) for each resource the job asks for on which every
    queue has a cap."""
    asked = room.job.per_task.as_tuple()
    return [
        (resource, asked[resource])
        for resource in range(3)
        if asked[resource] > 0 and all(cap[resource] < NO_CAP for _, cap in queues)
    ]


def most_released(room: Room, queues: Freeable) -> int:
    """How many tasks what every live node has free and the most the queues may release in
    all could hold, in resources alone: no walk frees more than the caps' sum of a resource,
    and no node holds more than its free room plus what is freed there allows."""
    free = room.state.node_index.free_total.as_tuple()
    most = MANY_COPIES
    for resource, want in capped_resources(room, queues):
        total = free[resource] + sum(cap[resource] for _, cap in queues)
        most = min(most, total // want)
    return most


def most_paid_for(room: Room, queues: Freeable) -> int:
    """An upper bound of the tasks the room could hold once the queues release what they
    may, paying per node for each task more (see `_paid_for`)."""
    most = MANY_COPIES
    for resource, want in capped_resources(room, queues):
        most = min(most, _paid_for(room, queues, resource, want))
    return most


def _paid_for(room: Room, queues: Freeable, resource: int, want: int) -> int:
    """`room.total` plus the most tasks that freeing, in all, at most the caps' sum of the
    resource could add, each node freeing at most what the queues run there (each queue's
    share capped, as in `Room.most_if_emptied`).

    A usable node with free room `f` that holds `c` tasks now holds at most
    `(f + freed) // want` once `freed` is freed there (`Node.copies` is at most what its
    resources hold), and never fewer than `c`. Its k-th task more therefore costs
    `max(0, (c + k) * want - f)`: a cost that grows with k, so spending the budget on the
    cheapest tasks first, over all nodes, gains the most any walk could. Those costs are:
    none while `f` already holds them (devices may hold fewer than resources), then what
    the node lacks of one more task (at most `want`), then `want` for each further one;
    counting the later ones without their node's first only raises the bound."""
    budget = sum(cap[resource] for _, cap in queues)
    free_of = room.state.node_index.free_of
    gained = 0
    firsts: list[int] = []  # per node, what its first task more that costs anything costs
    further = 0  # tasks more costing `want` each
    for node_id, freed in capped_per_node(queues):
        if not room.usable(node_id):
            continue
        amount = freed[resource]
        free = free_of(node_id)[resource]
        holds = room.copies(node_id)
        top = (free + amount) // want - holds
        if top <= 0:
            continue
        costless = min(top, max(0, free // want - holds))
        gained += costless
        if top > costless:
            firsts.append(min(want, (holds + costless + 1) * want - free))
            further += top - costless - 1
    firsts.sort()
    for cost in firsts:
        if cost > budget:
            break
        budget -= cost
        gained += 1
    return room.total + gained + min(further, budget // want)
