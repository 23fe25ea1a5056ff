"""A journal written the way the sequencer writes it, for pure projection tests (pure)."""

from __future__ import annotations

from domain.commands import NodeCommand
from domain.decider import accept
from domain.events import Event, JournalRecord
from projections.view import View
from tests.domain.harness import event


class Journal:
    """Appends accepted events at a time (one group per call) and folds them into a view."""

    def __init__(self) -> None:
        self.records: list[JournalRecord] = []
        self.view = View()
        self.ts = -1
        self.last: list[NodeCommand] = []
        self.rejections: list[str] = []

    def at(self, ts: int, *events: Event) -> list[NodeCommand]:
        assert ts > self.ts, "the sequencer never reuses a ts once its group is closed"
        self.ts = ts
        for item in events:
            reason = None if item.type == "Tick" else accept(self.view.state, item)
            if reason is not None:
                self.rejections.append(reason)
                continue
            record = JournalRecord(seq=len(self.records) + 1, ts=ts, event=item)
            self.records.append(record)
            self.view.apply(record)
        self.last = self.view.finish()
        return self.last

    def obey(self, ts: int) -> list[NodeCommand]:
        """Agents answer the last group's commands at `ts`."""
        answers = [
            event(
                "JobStarted" if c.type == "Dispatch" else "JobPreempted",
                job=c.job,
                node=c.node,
                attempt=c.attempt,
            )
            for c in self.last
        ]
        return self.at(ts, *answers)

    def finish_job(self, ts: int, job_id: str, outcome: str = "succeeded") -> list[NodeCommand]:
        job = self.view.state.jobs[job_id]
        return self.at(
            ts,
            *(
                event("JobFinished", job=job_id, node=n, attempt=job.attempt, outcome=outcome)
                for n in sorted(job.placements)
            ),
        )

    def tick(self, ts: int) -> list[NodeCommand]:
        return self.at(ts, event("Tick"))
