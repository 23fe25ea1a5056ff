"""Properties of retries and dependencies over random job graphs and outcomes (pure)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from domain.commands import Dispatch
from tests.domain.harness import Cluster, job, node, queue


@st.composite
def graphs(draw: st.DrawFn) -> tuple[list[tuple[list[int], int]], list[bool]]:
    """Jobs as (earlier jobs they wait for, max_retries), and a stream of attempt outcomes."""
    count = draw(st.integers(2, 6))
    jobs = [
        (
            sorted(draw(st.sets(st.integers(0, index - 1), max_size=2)) if index else set()),
            draw(st.integers(0, 2)),
        )
        for index in range(count)
    ]
    outcomes = draw(st.lists(st.booleans(), min_size=30, max_size=30))
    return jobs, outcomes


@settings(max_examples=60, deadline=None)
@given(graphs())
def test_dependencies_and_retries_hold_over_any_graph(
    case: tuple[list[tuple[list[int], int]], list[bool]],
) -> None:
    specs, outcomes = case
    cluster = Cluster()
    cluster.given(0, queue("a", gpu_quota=64), node("n1", gpu=64))
    submitted = [
        job(f"j{i}", "a", after_ok=[f"j{d}" for d in deps] or None, max_retries=retries)
        for i, (deps, retries) in enumerate(specs)
    ]
    deps_of = {f"j{i}": [f"j{d}" for d in deps] for i, (deps, _) in enumerate(specs)}

    def started_only_after_dependencies() -> None:
        for command in cluster.last:
            if isinstance(command, Dispatch):
                ended = cluster.state.ended_jobs
                assert all(ended.get(dep) is not None for dep in deps_of[command.job])
                assert all(ended[dep].value == "finished" for dep in deps_of[command.job])

    cluster.when(1, *submitted)
    started_only_after_dependencies()
    ts, draws = 1, iter(outcomes + [True] * 100)
    while cluster.job_ids() and ts < 200:
        ts += 1
        cluster.agents_obey(ts)
        started_only_after_dependencies()
        for job_id in [j for j in cluster.job_ids() if cluster.job(j).placements]:
            ts += 1
            cluster.finish(ts, job_id, "succeeded" if next(draws) else "failed")
            started_only_after_dependencies()
    assert cluster.job_ids() == []  # nothing is left waiting for ever
    state = cluster.state
    for i, (deps, retries) in enumerate(specs):
        attempts = [c for c in cluster.commands if isinstance(c, Dispatch) and c.job == f"j{i}"]
        assert len(attempts) <= retries + 1
        status = state.ended_jobs[f"j{i}"].value
        if any(state.ended_jobs[f"j{d}"].value != "finished" for d in deps):
            assert attempts == [] and status == "failed"  # failed fast, never started
        if status == "finished":
            assert all(state.ended_jobs[f"j{d}"].value == "finished" for d in deps)
