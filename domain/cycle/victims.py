"""The one victim selector every preemption rule shares: steps, room, search, minimisation (pure).

Universal filters (preemptible, not interactive, no preemption cycles), least disruption
order (lowest priority, then most recently started), tentative releases in the cycle's
statement, a fit once the room freed could hold the job, minimisation, rollback, and only
then Preempt commands; the freed resources are held for the preemptor until it is placed.
See docs/preemption.md.
"""

from __future__ import annotations

from domain.cycle import node_sets
from domain.cycle.candidates import candidate_steps, release_cap, victim_queues
from domain.cycle.displacement import note_taken_back, superiors_key, takes_back
from domain.cycle.framework import Attempt, Cycle, PreemptionRule
from domain.cycle.release_room import ReleaseLedger, release_bound
from domain.cycle.room import Room, VictimStep, victim_steps, victims_of
from domain.cycle.room_bounds import AllTaken
from domain.cycle.victim_walk import Walk
from domain.state import Job, JobStatus

__all__ = ["Room", "VictimSearch", "VictimStep", "victim_steps", "victims_of"]

# Node sets a walk first asks for once the cheapest alone was not enough; four times as many
# each time after that (docs/preemption.md, "Cheapest nodes first").
RANKED_FIRST = 8


class VictimSearch:
    """Finds, for a blocked job and one rule, the least disruptive victims that let it run."""

    def __init__(self, cycle: Cycle, dispatched_now: set[str]) -> None:
        self._cycle = cycle
        self._dispatched_now = dispatched_now  # never victims in the same cycle
        # Searches that found nothing, by rule and job shape, with the cycle's lasting changes.
        self._failed: dict[tuple[object, ...], int] = {}

    def step_order(self, step: VictimStep) -> tuple[int, int, int, str, int]:
        """Lowest priority first; shrinking before stopping any whole job of that priority;
        then most recently started; then id, then the victim's own step order."""
        priority, recent, victim_id = least_disruption(step.victim, self._cycle.ts)
        return (priority, 0 if step.shrink else 1, recent, victim_id, step.index)

    def may_be_victim(self, job: Job, victim: Job, rule: PreemptionRule) -> bool:
        return self.may_stop(job, victim) and self.admitted(job, victim, rule)

    def may_stop(self, job: Job, victim: Job) -> bool:
        if victim.id == job.id or not victim.preemptible or victim.interactive:
            return False
        if victim.status is not JobStatus.RUNNING or victim.stopping or not victim.placements:
            return False
        # Dispatching and preempting a job in one breath is pure churn.
        return victim.id not in self._dispatched_now

    def admitted(self, job: Job, victim: Job, rule: PreemptionRule) -> bool:
        if not rule.admits(self._cycle, job, victim):
            return False
        return not self.could_preempt_back(victim, job, rule)

    def could_preempt_back(self, victim: Job, job: Job, rule: PreemptionRule) -> bool:
        """No preemption cycles: `victim` could, under any rule, preempt `job` right back.

        Explicit PAI rules dominate fairness: for an explicit rule's preemption the fairness
        rules are not counted, so the displaced do not reclaim from it. Asked before anything
        stops; the fairness rules, which read usage, are asked again once the preemption is
        issued (`takes_back`, in `_search`).
        """
        if not job.preemptible or job.interactive:
            return False
        for other in self._cycle.plugins.preemption_rules:
            if rule.explicit and other.fairness:
                continue
            if other.admits(self._cycle, victim, job):
                return True
        return False

    def preempt_for(self, job: Job, rule: PreemptionRule) -> bool:
        """Finds the least disruptive victims under `rule` that let the job run, stops them and
        holds what they free for the job. Issues nothing unless the job can then be placed.

        Victims are taken in steps (a whole job, or, cheaper, one halving of an elastic job
        towards min_tasks), least disruption first. A placement is only simulated once the
        room freed, counted incrementally per node, could hold the job; minimising then drops
        unneeded steps, newest choices kept, each check O(nodes it touches) before any fit.
        """
        # A job like one whose search already failed, with no lasting change since, fails
        # too: pending jobs of one queue often share a shape, and each search walks the
        # candidate queues' running jobs. Searches roll their trials back, so they are no
        # change; anything issued, freed or set in the cycle is. A job displaced by an
        # explicit rule is judged with those displacements (reclaim never takes them back).
        cycle = self._cycle
        shape = (type(rule).__name__, *job.shape(), superiors_key(cycle, job))
        before = cycle.lasting_changes()
        if before is not None and self._failed.get(shape) == before:
            return False
        if not self._search(job, rule):
            if before is not None:
                self._failed[shape] = before  # the search failed and changed nothing
            return False
        return True

    def _search(self, job: Job, rule: PreemptionRule) -> bool:
        cycle = self._cycle
        state = cycle.state
        statement = cycle.statement
        queues = victim_queues(cycle, job, rule, release_bound(state, rule))
        if not queues:
            return False
        room = Room(state, statement, job)
        # Not even every task the queues may release, stopped, would make room for the
        # job's smallest size: no walk over their victims could (`Room.most_if_emptied`).
        smallest = min(cycle.sizes(job))
        freeable = [
            (state.stoppable_on(queue_id), release_cap(release)) for queue_id, release in queues
        ]
        if room.most_if_emptied(freeable, smallest) < smallest:
            return False
        steps = candidate_steps(cycle, self, job, rule, queues)  # least disruption first
        if not steps:
            return False
        # The target is the largest size the steps could free room for, counted in resources
        # alone; if even every step taken leaves its devices short of it, no walk reaches it.
        all_taken = AllTaken(room, steps)
        target = next((size for size in cycle.sizes(job) if size <= all_taken.bound), None)
        if target is None or not all_taken.reaches(target):
            return False
        releases = self._releases(job, rule, steps)  # each walk below copies it
        checkpoint = statement.checkpoint()
        walk = Walk(self, job, rule, room, target, releases)
        # Cheapest nodes first: for each node, the least disruptive steps that let it hold one
        # more task; then every step left, in least disruption order, for what nodes alone
        # could not reach. A step the rule forbids is skipped, not the end of the search.
        # The cheapest node's set alone is usually enough, and costs no other node's trial.
        on_node = node_sets.by_node(steps)
        trial = self._trial_for(walk)
        first = node_sets.cheapest(on_node, trial, self.step_order)
        if first is not None:
            walk.take_all(first)
        if first is not None and walk.found is None:
            # Not enough: start again from where the search began, with the cheapest few
            # nodes' sets, then more (each time from the start, where nodes are costed):
            # the walk takes the sets in the order every node's costs would give.
            ranking = node_sets.Ranking(on_node, self.step_order)
            wanted = RANKED_FIRST
            while True:
                statement.rollback(checkpoint)
                room = Room(state, statement, job)
                checkpoint = statement.checkpoint()
                walk = Walk(self, job, rule, room, target, releases)
                ranked = ranking.first(wanted, self._trial_for(walk))
                for node_steps in ranked:
                    if walk.found is not None:
                        break
                    walk.take_all(node_steps)
                if walk.found is not None or (ranking.complete and ranking.ranked <= wanted):
                    break  # found, or every node's set walked
                wanted *= 4
        if walk.found is None:
            walk.take_all(steps)
        found = walk.found
        if found is not None and not rule.allows_after(cycle, job, walk.victims):
            found = None  # the whole set, judged once as the rule sees it
        if found is not None:
            found = self._minimise(job, rule, room, walk.chosen, target, found)
        statement.rollback(checkpoint)
        if found is None or found.plan is None:
            return False
        issued = statement.checkpoint()
        self._issue(job, rule, walk.chosen, found.plan)
        victims = victims_of(walk.chosen)
        if takes_back(cycle, job, rule, victims):
            statement.rollback(issued)  # a victim would take the room right back
            note_taken_back(cycle, job, victims)
            return False
        statement.accept(issued)
        return True

    def _releases(
        self, job: Job, rule: PreemptionRule, steps: list[VictimStep]
    ) -> ReleaseLedger | None:
        """What each victim queue may release, as the search begins (before any trial), for
        a rule that bounds it; None for a rule that does not."""
        bound = release_bound(self._cycle.state, rule)
        if bound is None:
            return None
        queues = sorted({step.victim.queue for step in steps})
        return ReleaseLedger(
            {queue_id: bound.release_room(self._cycle, job, queue_id) for queue_id in queues}
        )

    def allowed(self, job: Job, rule: PreemptionRule, victims: list[Job]) -> bool:
        return rule.allows_after(self._cycle, job, victims)

    def fit(self, job: Job, tasks: int) -> Attempt:
        return self._cycle.fit(job, tasks)

    def _trial_for(self, walk: Walk) -> node_sets.Trial:
        """Costs one node's steps for the walk's job and rule (`node_sets.Trial`): they are
        taken in order until the node holds one more task, then undone exactly (placements
        and devices as before), and every node a victim tried here runs on is recounted. A
        node whose free room plus all its steps free could not hold one more task is not
        tried (`Room.could_grow`). Cost: fewest of the highest priority disturbed, then
        fewest victims, then the least recent start, then node id."""
        room = walk.room
        statement = self._cycle.statement

        def trial(
            node_id: str, steps: list[VictimStep]
        ) -> tuple[node_sets.Cost, list[VictimStep]] | None:
            before = room.copies(node_id)
            if not room.could_grow(node_id, steps):
                return None  # even all its steps would not free room for one more task
            mark = statement.checkpoint()
            tried = Walk(self, walk.job, walk.rule, room, None, walk.releases)
            for step in steps:
                tried.take(step)
                if room.copies(node_id) > before:
                    break
            found: tuple[node_sets.Cost, list[VictimStep]] | None = None
            if room.copies(node_id) > before:
                orders = [self.step_order(step) for step in tried.chosen]
                top = max(order[0] for order in orders)
                at_top = sum(1 for order in orders if order[0] == top)
                cost = (top, at_top, len(tried.victims), max(orders), node_id)
                found = (cost, list(tried.chosen))
            statement.rollback(mark)
            touched = {n for step in steps for n in step.victim.placements}
            for touched_id in sorted(touched):
                room.recount(touched_id)
            return found

        return trial

    def _minimise(
        self,
        job: Job,
        rule: PreemptionRule,
        room: Room,
        chosen: list[VictimStep],
        target: int,
        found: Attempt,
    ) -> Attempt:
        """Drops steps the job turns out not to need (in place), latest choices kept first.

        A victim's chosen steps are a prefix of its steps, and only the last of them may be
        dropped (its remaining tasks cannot stop while its extra ones keep running); a fit
        is tried only when the room left could still hold the job."""
        last: dict[str, int] = {}
        for step in chosen:
            last[step.victim.id] = step.index
        kept = [True] * len(chosen)
        for position in range(len(chosen) - 2, -1, -1):
            step = chosen[position]
            if last[step.victim.id] != step.index:
                continue
            room.give_back(step)
            if room.total >= target:
                attempt = self._cycle.fit(job, target)
                if attempt.plan is not None:
                    kept[position] = False
                    trial = [s for s, keep in zip(chosen, kept, strict=True) if keep]
                    if rule.allows_after(self._cycle, job, victims_of(trial)):
                        found = attempt
                        last[step.victim.id] = step.index - 1
                        continue
                    kept[position] = True
            room.take(step)
        chosen[:] = [s for s, keep in zip(chosen, kept, strict=True) if keep]
        return found

    def _issue(
        self, job: Job, rule: PreemptionRule, chosen: list[VictimStep], plan: dict[str, int]
    ) -> None:
        cycle = self._cycle
        whole = {step.victim.id for step in chosen if not step.shrink}
        issued: set[str] = set()
        for step in chosen:
            victim = step.victim
            if victim.id in issued:
                continue
            issued.add(victim.id)
            if victim.id in whole:
                cycle.stop(victim, rule.reason, by=job.id)
            else:
                nodes: dict[str, int] = {}
                for shrink in chosen:
                    if shrink.victim is victim:
                        for node_id, tasks in shrink.nodes:
                            nodes[node_id] = nodes.get(node_id, 0) + tasks
                cycle.stop(victim, "shrink", by=job.id, requeue=False, nodes=nodes)
            cycle.statement.set(job, "awaiting", job.awaiting | {victim.id})
        for node_id in sorted(plan):
            cycle.statement.hold(job, node_id, job.per_task * plan[node_id])


def least_disruption(victim: Job, now: int) -> tuple[int, int, str]:
    """A victim's place, least disruptive first: lowest priority, then most recently started
    (one not started yet counts as started `now`), then id."""
    return (victim.priority, -victim.started_or(now), victim.id)
