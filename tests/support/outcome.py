"""The lost / duplicated / reproduced checks of a run: what its journal, commands and replay audit say (test and chaos support, I/O)."""

from __future__ import annotations

import itertools
from collections import Counter
from dataclasses import dataclass

from domain.audit import AuditReport
from streams.kafka_io import Topics, read_to_end
from streams.replay import read_commands, read_journal, replay
from tests.support.flow import job


@dataclass(frozen=True, slots=True)
class Outcome:
    """What the journal, the commands and the replay audit say about a run."""

    jobs: int
    lost: int  # submitted but never journaled, or never dispatched
    duplicated: int  # journaled twice, or dispatched twice for one attempt and node
    gaps: int  # journal seqs that do not follow one another
    unordered: int  # journal records whose ts is below the previous record's
    split_attempts: int  # attempts whose Dispatches came from more than one cycle
    rejected: int  # records on quotaflow.rejected
    commands: int
    report: AuditReport

    @property
    def reproduced(self) -> int:
        return self.report.reproduced

    @property
    def audit_ok(self) -> bool:
        return self.report.ok

    @property
    def summary(self) -> str:
        return self.report.summary()

    @property
    def ok(self) -> bool:
        return (
            self.lost == 0
            and self.duplicated == 0
            and self.gaps == 0
            and self.unordered == 0
            and self.split_attempts == 0
            and self.audit_ok
            and self.reproduced == self.commands
        )


async def outcome(bootstrap: str, topics: Topics, cluster: str, jobs: int) -> Outcome:
    journal = await read_journal(bootstrap, topics.prefix, cluster)
    gaps = sum(1 for i, r in enumerate(journal) if r.seq != i + 1)
    unordered = sum(1 for a, b in itertools.pairwise(journal) if b.ts < a.ts)
    submitted = Counter(r.event.job for r in journal if r.event.type == "JobSubmitted")
    commands = await read_commands(bootstrap, topics.prefix)
    dispatch_commands = [c for c in commands if c["type"] == "Dispatch"]
    dispatches = Counter((c["job"], c["attempt"], c["node"]) for c in dispatch_commands)
    cycles: dict[tuple[str, int], set[int]] = {}
    for command in dispatch_commands:
        cycles.setdefault((command["job"], command["attempt"]), set()).add(command["seq"])
    dispatched = {key[0] for key in dispatches}
    wanted = {job(i)["job"] for i in range(jobs)}
    lost = len(wanted - set(submitted)) + len(wanted - dispatched)
    duplicated = sum(n - 1 for n in submitted.values()) + sum(n - 1 for n in dispatches.values())
    rejected = (await read_to_end(bootstrap, topics.rejected))[topics.rejected]
    report = await replay(bootstrap, topics.prefix, cluster)
    return Outcome(
        jobs=jobs,
        lost=lost,
        duplicated=duplicated,
        gaps=gaps,
        unordered=unordered,
        split_attempts=sum(1 for seqs in cycles.values() if len(seqs) > 1),
        rejected=sum(1 for r in rejected if r.value is not None),
        commands=len(commands),
        report=report,
    )
