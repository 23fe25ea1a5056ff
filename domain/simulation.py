"""The offline simulator: fold timed events through the core with a built-in agent (pure).

Virtual time only: the built-in agent (the same model as the live agent's, domain/agent.py)
answers every Dispatch with JobStarted and every Preempt with JobPreempted at the same ts,
finishes each job `duration_s` after it starts, and heartbeats for every node it has heard
of (as a real agent would), until a `NodeDown` directive (contract section 7; only in a
simulate file, never on Kafka) says that a node fails: from then on the agent neither
heartbeats nor answers for it (its runs are gone), so the core declares it lost
`heartbeat_timeout_s` later; a later NodeHeartbeat line brings it back. Time also advances
to each policy timer (e.g. a balance timeout) and to a failed node's heartbeat deadline, as
the live scheduler's Ticks would.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import orjson

from domain.agent import AgentModel
from domain.codec import DecodeError, decode_timed
from domain.commands import Dispatch, NodeCommand, Rejected
from domain.decider import accept, apply, close_group, initial_state
from domain.events import ClusterConfigured, Event, NodeHeartbeat, Tick
from domain.limits import REASON_CHARS_MAX, REJECTED_INPUT_CHARS_MAX, clip
from domain.plugins import DEFAULT_PLUGINS, Plugins
from domain.state import State

MAX_ROUNDS_PER_TS = 10_000  # agent answer rounds at one ts; the core never oscillates


@dataclass(frozen=True)
class NodeDown:
    """Simulator directive: node `node` fails at `ts` (contract section 7)."""

    node: str


def decode_directive(text: str) -> tuple[int, NodeDown] | None:
    """A `{"type": "NodeDown", "ts": T, "node": N}` line, or None for any other line (a
    malformed directive is left to the event decoder, which refuses it with its reason)."""
    if '"NodeDown"' not in text:
        return None
    try:
        data = orjson.loads(text)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(data, dict) or data.get("type") != "NodeDown":
        return None
    ts, node = data.get("ts"), data.get("node")
    if set(data) - {"type", "ts", "node", "seq"}:
        return None
    if not isinstance(ts, int) or isinstance(ts, bool) or ts < 0:
        return None
    if not isinstance(node, str) or not node:
        return None
    return ts, NodeDown(node)


class Simulator:
    """Drives the core over a timed event stream; emits commands and rejections in order."""

    def __init__(self, plugins: Plugins = DEFAULT_PLUGINS) -> None:
        self.state: State = initial_state()
        self.plugins = plugins
        self.seq = 0
        self.now = 0
        self.agent = AgentModel()
        self._heartbeats: dict[str, NodeHeartbeat] = {}
        self._down: set[str] = set()  # nodes failed by NodeDown: no heartbeats, no answers
        # The core's heartbeat deadlines of failed nodes (`_first_down_deadline`), so a moment
        # is found without reading every node's deadline: a heap, pruned as it is read.
        self._down_deadlines: list[tuple[int, str]] = []
        # What the group or moment being worked on emitted, in order; handed out and emptied
        # at its end (`_emitted`), so memory follows the state, not the length of the run.
        self.output: list[NodeCommand | Rejected] = []
        self.accepted = 0  # input lines folded; every other non-blank line was rejected

    # -- inputs -------------------------------------------------------------------------

    def run(self, lines: Iterable[str | bytes]) -> Iterator[dict[str, Any]]:
        """Yields each command and rejection as a JSON-ready dict, in emission order."""
        group: list[tuple[str, Event | NodeDown | str]] = []
        group_ts: int | None = None
        for raw in lines:
            text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
            text = text.strip()
            if not text:
                continue
            # The file's time so far includes the group still being gathered.
            current = self.now if group_ts is None else max(self.now, group_ts)
            item: Event | NodeDown | str
            reason: str | None = None
            try:
                directive = decode_directive(text)
                ts, item = directive if directive is not None else decode_timed(text)
            except DecodeError as exc:
                # A readable time keeps the refusal in its own group, in file order.
                ts, item, reason = (exc.ts if exc.ts is not None else -1), str(exc), str(exc)
            if ts < current:  # no readable time, or before the file's time: refused now
                if reason is None:
                    reason = (
                        f"ts {ts} is before the simulation's current time {current}: "
                        "lines must be in time order"
                    )
                yield from self._flush_group(group_ts, group)
                group, group_ts = [], None
                self._reject(self.now, text, reason)
                yield from self._emitted()
                continue
            if group_ts is not None and ts != group_ts:
                yield from self._flush_group(group_ts, group)
                group = []
            group_ts = ts
            group.append((text, item))
        yield from self._flush_group(group_ts, group)
        yield from self._drain(None)

    def _flush_group(
        self, ts: int | None, group: list[tuple[str, Event | NodeDown | str]]
    ) -> Iterator[dict[str, Any]]:
        if ts is None or not group:
            return
        yield from self._drain(ts)
        self.now = ts
        for text, item in group:
            if isinstance(item, str):
                self._reject(ts, text, item)  # a line that failed validation
            else:
                self._fold_input(ts, text, item)
        self._cycle_and_answer(ts)
        yield from self._emitted()

    def _fold_input(self, ts: int, text: str, event: Event | NodeDown) -> None:
        if isinstance(event, NodeDown):
            self._node_down(ts, text, event)
            return
        if isinstance(event, Tick):
            self._append(ts, event)
            self.accepted += 1
            return
        reason = accept(self.state, event, tuple(self.plugins.queue_policies))
        if reason is not None:
            self._reject(ts, text, reason)
            return
        if isinstance(event, NodeHeartbeat):
            self._heartbeats[event.node] = event
            self._down.discard(event.node)
        self._append(ts, event)
        if isinstance(event, ClusterConfigured) and self._down:
            self._note_down_deadlines(self._down)  # the core made its deadlines anew
        self.accepted += 1

    def _node_down(self, ts: int, text: str, directive: NodeDown) -> None:
        if directive.node not in self.state.nodes:
            self._reject(ts, text, f"NodeDown: unknown node {directive.node}")
            return
        self._down.add(directive.node)
        self._note_down_deadlines({directive.node})
        # Its processes are gone with it: nothing it ran finishes or answers any more.
        for key in sorted(self.agent.runs):
            if key[0] == directive.node:
                del self.agent.runs[key]
        self.accepted += 1

    def _append(self, ts: int, event: Event) -> None:
        self.seq += 1
        apply(self.state, event, self.seq, ts)

    def _emitted(self) -> Iterator[dict[str, Any]]:
        """What was emitted since the last hand-out, in order, as JSON-ready dicts."""
        emitted, self.output = self.output, []
        return (item.to_wire() for item in emitted)

    def _reject(self, ts: int, text: str, reason: str) -> None:
        # Bounded echoes: a refused line of any size prints as one short line.
        rejected = Rejected(
            ts=ts,
            # Not counted: a reader may have handed over only the first bytes of a long line.
            input=clip(text, REJECTED_INPUT_CHARS_MAX, counted=False),
            reason=clip(reason, REASON_CHARS_MAX),
        )
        self.output.append(rejected)

    # -- virtual time ---------------------------------------------------------------------

    def _next_moment(self) -> int | None:
        moments = []
        due = self.agent.next_due()
        if due is not None:
            moments.append(due)
        if self.state.timers:
            moments.append(self.state.timers[0][0])
        if self._down:  # a failed node's deadline: the core then declares it lost
            deadline = self._first_down_deadline()
            if deadline is not None:
                moments.append(deadline)
        return min(moments) if moments else None

    def _note_down_deadlines(self, nodes: set[str]) -> None:
        """Copies the core's deadlines of `nodes` (failed) into `_down_deadlines`: one read of
        every deadline per NodeDown line, and per ClusterConfigured while a node is down."""
        if len(nodes) == len(self._down):
            self._down_deadlines = []  # all of them read again
        for entry in self.state.heartbeat_expiry:
            if entry[1] in nodes:
                heapq.heappush(self._down_deadlines, entry)

    def _first_down_deadline(self) -> int | None:
        """The earliest of the core's deadlines (a lazy heap) that names a failed node.

        A failed node's deadlines are only ever taken out of the core's heap: nothing
        heartbeats for it (a heartbeat line ends its failure), and a ClusterConfigured, which
        makes every deadline anew, is read again (`_note_down_deadlines`). One taken out is
        gone for good once the core's cycle has taken out every deadline due then, after which
        every deadline left, and every one added later (a later ts plus the timeout), is
        greater; the heartbeats renewed before that cycle put the failed nodes' back. So a
        failed node's deadline is still in the core's heap exactly when it is not below the
        heap's top, and those that are are dropped here."""
        expiry = self.state.heartbeat_expiry
        kept = self._down_deadlines
        while kept and (not expiry or kept[0] < expiry[0] or kept[0][1] not in self._down):
            heapq.heappop(kept)
        return kept[0][0] if kept else None

    def _drain(self, until: int | None) -> Iterator[dict[str, Any]]:
        """Advances virtual time through finishes and timers due before `until` (all if None)."""
        while True:
            moment = self._next_moment()
            if moment is None or (until is not None and moment >= until):
                return
            moment = max(moment, self.now)
            self.now = moment
            self._keep_nodes_alive(moment)
            for finished in self.agent.finish_due(moment):
                self._append(moment, finished)
            if self.state.group_open is False:
                self._append(moment, Tick())
            self._cycle_and_answer(moment)
            yield from self._emitted()

    def _keep_nodes_alive(self, ts: int) -> None:
        expiry = self.state.heartbeat_expiry
        refreshed: set[str] = set()
        failed: list[tuple[int, str]] = []
        while expiry and expiry[0][0] <= ts:
            entry = heapq.heappop(expiry)
            node_id = entry[1]
            if node_id in self._down:
                failed.append(entry)  # left for the core to find: the node is lost
                continue
            beat = self._heartbeats.get(node_id)
            if beat is not None and node_id not in refreshed:
                refreshed.add(node_id)
                self._append(ts, beat)
        for entry in failed:
            heapq.heappush(expiry, entry)

    def _cycle_and_answer(self, ts: int) -> None:
        self._keep_nodes_alive(ts)
        for _ in range(MAX_ROUNDS_PER_TS):
            self.state, commands = close_group(self.state, self.plugins)
            if not commands:
                return
            self.output.extend(commands)
            for command in commands:
                self._answer(ts, command)

    def _answer(self, ts: int, command: NodeCommand) -> None:
        if command.node in self._down:
            return  # a failed node's agent answers nothing
        reaction = (
            self.agent.dispatch(command, ts)
            if isinstance(command, Dispatch)
            else self.agent.preempt(command)
        )
        if reaction.report is not None:
            self._append(ts, reaction.report)


def simulate_lines(
    lines: Iterable[str | bytes], plugins: Plugins = DEFAULT_PLUGINS
) -> Iterator[bytes]:
    """The `quotaflow simulate` output: one JSON line per command or rejection."""
    for item in Simulator(plugins).run(lines):
        yield orjson.dumps(item)
