"""The nodes with a job worth lifting for one task shape, kept as nodes are refiled (pure).

Consolidation asks, before a plan, whether some node runs a job whose lifting alone would
let it hold one more task of the blocked job's shape, and whether that job could go
anywhere (domain/actions/lifting.py). The node index keeps one `LiftingKept` per shape
asked, brought up to date from the nodes refiled since its mark (`NodeIndex.refiled_since`).
Besides the jobs per node it keeps the distinct jobs listed, grouped by what fixes where a
job could go (request and selector), so that a group none of whose jobs could go anywhere
costs one question, not one per job. Derived, never saved.
"""

from __future__ import annotations

from domain.entities import Job, Selector

# A task's request (gpu, cpu, memory) and node selector: what a lifting question is kept
# under, and what groups the jobs it lists (where a job could go reads that and its tasks).
TaskShape = tuple[int, int, int, Selector]


class LiftingKept:
    """Per node with any, the jobs worth lifting there (as of `mark`), and those jobs once
    each, by landing group."""

    __slots__ = ("by_node", "groups", "listed", "mark")

    def __init__(self, mark: int) -> None:
        self.mark = mark
        self.by_node: dict[str, tuple[str, ...]] = {}
        self.listed: dict[str, tuple[int, TaskShape]] = {}  # job -> (nodes listing it, group)
        self.groups: dict[TaskShape, dict[str, None]] = {}  # group -> its listed jobs

    def refile(self, node_id: str, worth: tuple[str, ...], jobs: dict[str, Job]) -> None:
        """The node now has `worth` (job ids, each in `jobs`) worth lifting."""
        for job_id in self.by_node.pop(node_id, ()):
            count, group = self.listed[job_id]
            if count > 1:
                self.listed[job_id] = (count - 1, group)
            else:
                del self.listed[job_id]
                members = self.groups[group]
                del members[job_id]
                if not members:
                    del self.groups[group]
        if not worth:
            return
        self.by_node[node_id] = worth
        for job_id in worth:
            known = self.listed.get(job_id)
            if known is not None:
                self.listed[job_id] = (known[0] + 1, known[1])
                continue
            per_task = jobs[job_id].per_task
            group = (per_task.gpu, per_task.cpu, per_task.memory, jobs[job_id].node_selector)
            self.listed[job_id] = (1, group)
            self.groups.setdefault(group, {})[job_id] = None
