"""The fold: journal records in, commands out; a cycle runs after each group of equal ts (pure).

`fold(state, record)` applies one record. When the record opens a new group (its ts differs
from the open group's), the open group's cycle runs first and its commands are returned.
`close_group(state)` runs the open group's cycle now: the sequencer calls it after writing a
batch (it never reuses a ts), and a replay calls it at the end of the journal; both therefore
run exactly the same cycles and emit exactly the same commands.
"""

from __future__ import annotations

from domain import fairshare
from domain.acceptance import accept
from domain.commands import NodeCommand, Preempt
from domain.cycle.session import Session
from domain.events import Event, JournalRecord
from domain.evolve import evolve
from domain.plugins import DEFAULT_PLUGINS, Plugins
from domain.state import State

__all__ = ["accept", "close_group", "fold", "initial_state", "run_cycle"]


def initial_state() -> State:
    return State()


def fold(
    state: State, record: JournalRecord, plugins: Plugins = DEFAULT_PLUGINS
) -> tuple[State, list[NodeCommand]]:
    commands: list[NodeCommand] = []
    if state.group_open and record.ts != state.ts:
        state, commands = close_group(state, plugins)
    apply(state, record.event, record.seq, record.ts)
    return state, commands


def apply(state: State, event: Event, seq: int, ts: int) -> None:
    """Applies one accepted event without closing any group."""
    evolve(state, event, seq, ts)
    state.seq = seq
    state.ts = max(state.ts, ts)
    state.group_open = True


def close_group(
    state: State, plugins: Plugins = DEFAULT_PLUGINS
) -> tuple[State, list[NodeCommand]]:
    """Runs the scheduling cycle for the open group, if one is open."""
    if not state.group_open:
        return state, []
    state.group_open = False
    return state, run_cycle(state, plugins)


def run_cycle(state: State, plugins: Plugins = DEFAULT_PLUGINS) -> list[NodeCommand]:
    """One scheduling cycle at the state's position; skipped when nothing could change."""
    if not (state.needs_cycle or state.timers_due(state.ts) or _nodes_due(state)):
        return []
    state.needs_cycle = False
    session = Session(state, plugins, state.seq, state.ts)
    actions = list(plugins.actions)
    actions[0].execute(session)  # settle first: lost nodes change capacity and fair shares
    if state.fair_share_stale:
        # Recomputed when first read or before what they depend on first changes
        # (State.update_fair_shares), so the values are the same as if recomputed here; a
        # cycle that neither ranks queues nor judges victims (one queue's job placed, nothing
        # pending) leaves them stale for the next cycle or reader (fairshare.refresh).
        state.fair_share_due = fairshare.recompute
    for action in actions[1:]:
        action.execute(session)
    state.needs_cycle = False
    commands = session.commit()
    if state.fair_share_due is not None:
        if any(type(command) is Preempt for command in commands):
            state.update_fair_shares()  # the projections explain each Preempt with them
        state.fair_share_due = None
    return commands


def _nodes_due(state: State) -> bool:
    return bool(state.heartbeat_expiry) and state.heartbeat_expiry[0][0] <= state.ts
