"""What a victim search's room would hold once every listed step is taken, nothing taken (pure).

Split from domain/cycle/room.py: the search picks its target size from `AllTaken.bound` and
walks only if `AllTaken.reaches` it (docs/preemption.md, 3d).
"""

from __future__ import annotations

from domain.cycle.room import Room, VictimStep, resource_copies
from domain.state import Job

__all__ = ["AllTaken"]


class AllTaken:
    """What a room would hold once every one of a search's steps is taken, nothing taken.

    `bound` counts each node in resources alone (an upper bound, from which the search picks
    its target size); `reaches` counts exactly, as `Node.copies` does with the devices the
    steps' tasks leave free, and only the nodes whose resources could grow."""

    __slots__ = ("_gains", "_room", "_steps", "bound")

    def __init__(self, room: Room, steps: list[VictimStep]) -> None:
        self._room = room
        self._steps = steps
        freed: dict[str, list[int]] = {}  # per node, gpu, cpu and memory the steps free
        for step in steps:
            per_task = step.victim.per_task
            for node_id, tasks in step.nodes:
                amounts = freed.get(node_id)
                if amounts is None:
                    amounts = freed[node_id] = [0, 0, 0]
                amounts[0] += per_task.gpu * tasks
                amounts[1] += per_task.cpu * tasks
                amounts[2] += per_task.memory * tasks
        self.bound = room.total
        # Nodes whose count could grow; the others keep theirs (freeing never lowers it,
        # and the resources bound what the devices hold).
        self._gains: list[str] = []
        asked = room.job.per_task
        free_of = room.state.node_index.free_of  # Node.free of a live node, as filed
        for node_id, (gpu, cpu, memory) in freed.items():  # sums: order-free
            if room.usable(node_id):
                gain = resource_copies(asked, free_of(node_id), (gpu, cpu, memory))
                gain -= room.copies(node_id)
                if gain > 0:
                    self.bound += gain
                    self._gains.append(node_id)

    def reaches(self, target: int) -> bool:
        """Whether the room, every step taken, would hold `target` tasks (devices counted)."""
        room = self._room
        total = room.total
        if total >= target or not self._gains:
            return total >= target
        gains = set(self._gains)
        victims: dict[str, Job] = {}
        tasks_on: dict[str, dict[str, int]] = {}  # per node that could grow, victims' tasks
        for step in self._steps:
            victim = step.victim
            for node_id, tasks in step.nodes:
                if node_id in gains:
                    victims[victim.id] = victim
                    on_node = tasks_on.setdefault(node_id, {})
                    on_node[victim.id] = on_node.get(victim.id, 0) + tasks
        for node_id in self._gains:
            if total >= target:
                break
            once_freed = room.copies_once_freed(node_id, tasks_on[node_id], victims)
            total += once_freed - room.copies(node_id)
        return total >= target
