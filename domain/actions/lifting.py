"""Whether moving one job off some node could let it hold one more task of a shape, remembered per node (pure).

Consolidation (domain/actions/consolidate.py) keeps a move only if it raises how many of the
blocked job's tasks fit, and only the moved job's old nodes can gain room: a move is worth
trying only where lifting that one job would let its node hold one more task
(`Room.could_grow_lifting`, which `plan_moves` asks of every resident). Whether some job
placed on a node could, for a task shape, reads only that node: its room, labels and
liveness, and the tasks placed on it. So it is kept in the node's lifting memo, which every
change to the node's room starts anew (and a statement's rollback restores), as its copies
memo. When no node has such a job that could go somewhere, a plan would pass over every
resident of every node: it is known to move nothing before any node is sorted or any
resident looked at.
"""

from __future__ import annotations

from domain.actions.landing import Landing
from domain.cycle.room import freeing_needed
from domain.entities import COPIES_MEMO_MAX, Node, Selector
from domain.lifting_kept import LiftingKept, TaskShape
from domain.resources import Resources
from domain.state import Job, State

LIFTING_KEYS_KEPT = 64  # shapes whose nodes with a job worth lifting the node index keeps


def some_node_could_grow(state: State, job: Job, landing: Landing) -> bool:
    """Whether some live node the job may use, able to hold one of its tasks at all, runs a
    job whose lifting alone would let it hold one more of them. A superset of what
    `plan_moves` tries (every placed job counts, movable or not): False means it moves none.

    Reads only the jobs kept as worth lifting (`_kept`), and of those only the landing
    groups where one task could go at all: fewer copies of a shape fit than of one task, so
    a group where one task could go nowhere has no job that could (each listed job has a
    task placed). The memo keys are plain values (ints and the selector), which hash and
    compare without a Python call, where a key holding `Resources` calls its generated
    `__hash__` and `__eq__` at every lookup."""
    kept = _kept(state, job)
    jobs = state.jobs
    listed, holders = kept.listed, state.holders
    fewer, more = (listed, holders) if len(listed) <= len(holders) else (holders, listed)
    if any(job_id in more and jobs[job_id].held for job_id in fewer):
        return True  # `Landing.could_land`: room it holds widens where it may go
    # Whether a job could go anywhere reads of it only its group and tasks.
    lands: dict[tuple[TaskShape, int], bool] = {}
    for group, members in kept.groups.items():  # any order: the answer reads none
        if not landing.could_land(jobs[next(iter(members))], 1):
            continue
        for job_id in members:
            placed = jobs[job_id].placed_tasks
            could = lands.get((group, placed))
            if could is None:
                could = lands[group, placed] = landing.could_land(jobs[job_id], placed)
            if could:
                return True
    return False


def _kept(state: State, job: Job) -> LiftingKept:
    """The nodes with a job worth lifting for one more task of the job's shape
    (`worth_lifting`), kept per shape in the node index and brought up to date from the
    nodes refiled since (every change to a node's room, labels or liveness, a rollback
    included, refiles it and starts its lifting memo anew), so a full cluster, where few
    nodes have such a job, is not read whole at every plan."""
    per_task, selector = job.per_task, job.node_selector
    key = (per_task.gpu, per_task.cpu, per_task.memory, selector)
    index = state.node_index
    kept = index.lifting_kept.get(key)
    refiled, now = index.refiled_since(-1 if kept is None else kept.mark)
    if kept is None or refiled is None:  # never asked, or before the log's start: read all
        kept, refiled = LiftingKept(now), dict.fromkeys(state.nodes)
    for node_id in refiled:
        node = state.nodes.get(node_id)
        worth = () if node is None else _lifting_memo(state, node, key, per_task)
        kept.refile(node_id, worth, state.jobs)
    kept.mark = now
    if key not in index.lifting_kept and len(index.lifting_kept) >= LIFTING_KEYS_KEPT:
        index.lifting_kept.clear()
    index.lifting_kept[key] = kept
    return kept


def _lifting_memo(state: State, node: Node, key: TaskShape, per_task: Resources) -> tuple[str, ...]:
    """`worth_lifting` on the node for the key's shape, from the node's memo when it has it."""
    memo = node.lifting_memo
    known = memo.get(key)
    if known is None:
        if len(memo) >= COPIES_MEMO_MAX:
            memo.clear()
        known = memo[key] = worth_lifting(state, node, per_task, key[3])
    return known


def worth_lifting(
    state: State, node: Node, per_task: Resources, selector: Selector
) -> tuple[str, ...]:
    """The jobs placed on the node whose lifting alone would let it hold one more task of
    `per_task` for a job selecting `selector` (`Room.could_grow_lifting` of each, counted on
    the node as it is now): none if the job may not use the node or fit there when empty."""
    if node.lost or not node.matches(selector) or not per_task.fits_in(node.capacity):
        return ()
    free = node.free
    need = freeing_needed(per_task, (free.gpu, free.cpu, free.memory), node.copies(per_task))
    if need is None:
        return ()
    found = []
    jobs = state.jobs
    for job_id in node.jobs:
        placed_job = jobs[job_id]
        placed = placed_job.placements.get(node.id, 0)
        asked = placed_job.per_task
        if (
            placed
            and asked.gpu * placed >= need[0]
            and asked.cpu * placed >= need[1]
            and asked.memory * placed >= need[2]
        ):
            found.append(job_id)
    return tuple(found)
