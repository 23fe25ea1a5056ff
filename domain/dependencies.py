"""Job dependencies (JobSubmitted.after_ok): waiting, starting when all succeeded, failing fast (pure)."""

from __future__ import annotations

from typing import Any, Protocol

from domain.entities import Job, JobStatus


class State(Protocol):
    """What these functions use of domain.state.State (which calls them: no import back)."""

    jobs: dict[str, Job]
    ended_jobs: dict[str, JobStatus]
    queues: dict[str, Any]
    waiting: dict[str, set[str]]
    dependents: dict[str, list[str]]
    dependency_failed: dict[str, str]

    def add_demand(self, job: Job) -> None: ...

    def enqueue(self, job: Job) -> None: ...

    def end(self, job: Job, status: JobStatus) -> None: ...


def unmet(state: State, after_ok: list[str] | None) -> set[str]:
    """The jobs of `after_ok` that have not succeeded yet (acceptance saw that they exist)."""
    return {dep for dep in after_ok or () if state.ended_jobs.get(dep) is not JobStatus.FINISHED}


def wait(state: State, job: Job, deps: set[str]) -> None:
    """The job waits for `deps`: live, counted among its queue's jobs, not pending."""
    state.waiting[job.id] = set(deps)
    for dep in sorted(deps):
        state.dependents.setdefault(dep, []).append(job.id)
    state.queues[job.queue].jobs += 1


def forget_waiting(state: State, job_id: str) -> None:
    """A waiting job ends (cancelled, or one of its dependencies failed): it waits no more."""
    for dep in sorted(state.waiting.pop(job_id)):
        waiters = state.dependents.get(dep)
        if waiters is not None and job_id in waiters:
            waiters.remove(job_id)
            if not waiters:
                del state.dependents[dep]


def release_dependents(state: State, dep: str, status: JobStatus) -> None:
    """`dep` ended: its waiters whose last dependency it was become pending (keeping their
    submission order); if it did not succeed, every waiter fails, and so in turn theirs."""
    for job_id in sorted(state.dependents.pop(dep, [])):
        job = state.jobs.get(job_id)
        deps = state.waiting.get(job_id)
        if job is None or deps is None:
            continue
        if status is JobStatus.FINISHED:
            deps.discard(dep)
            if not deps:
                del state.waiting[job_id]
                state.queues[job.queue].jobs -= 1
                state.add_demand(job)
                state.enqueue(job)
        else:
            state.dependency_failed[job_id] = dep
            state.end(job, JobStatus.FAILED)
