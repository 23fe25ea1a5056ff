"""One ingress record to an admitted event or a refusal with its kind (I/O shell).

Split from streams/sequencer.py along the ingress seam: decoding (domain/codec.py, which
parses and validates the bytes in one pass and keeps the documented reasons for what it
refuses), a team topic's bounds (domain/teams.py) and the core's acceptance. What the
sequencer then journals, rejects or only notes is streams/transaction.py's business.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from aiokafka import ConsumerRecord

from domain.codec import DecodeError, decode_ingress
from domain.decider import accept
from domain.events import Event, NodeHeartbeat
from domain.liveness import changes_view
from domain.state import State
from domain.teams import team_refusal
from streams.batch import CoreFailure, InputKey, key_of
from streams.topics import JOBS, NODES

__all__ = ["Admission", "admit", "quiet_heartbeats"]


@dataclass(frozen=True, slots=True)
class Admission:
    """An input's verdict: its event, and the reason it is refused (None: accepted)."""

    event: Event | None
    reason: str | None
    kind: str  # the kind of refusal, for metrics (docs/operations.md)


def admit(
    state: State,
    record: ConsumerRecord[bytes, bytes],
    logical: str,
    team: tuple[str, str] | None,
    key: InputKey,
) -> Admission:
    """Decodes the record from its contract topic `logical` and asks the core to accept it;
    `team` is (team, the queue its jobs must stay at or below) for a team's job topic."""
    try:
        # decode_ingress refuses an input over limits.INPUT_BYTES_MAX before parsing it.
        event = decode_ingress(JOBS if team else logical, record.value or b"")
        reason = team_refusal(state, team[0], team[1], event) if team is not None else None
        return Admission(event, reason or accept(state, event), "refused")
    except DecodeError as exc:
        return Admission(None, str(exc), "invalid")
    except Exception as exc:
        raise CoreFailure(key, exc) from exc


def quiet_heartbeats(
    state: State, records: Sequence[ConsumerRecord[bytes, bytes]], nodes_topic: str
) -> list[NodeHeartbeat] | None:
    """The batch's heartbeats when every record is an admitted heartbeat (from `nodes_topic`)
    that changes nothing the core sees but time (domain/liveness.py); else None. Noting one
    changes no state, so each is admitted against the same state as in sequence."""
    heard: list[NodeHeartbeat] = []
    for record in records:
        if record.topic != nodes_topic:
            return None
        admission = admit(state, record, NODES, None, key_of(record))
        event = admission.event
        if admission.reason is not None or not isinstance(event, NodeHeartbeat):
            return None
        if changes_view(state, event):
            return None
        heard.append(event)
    return heard
