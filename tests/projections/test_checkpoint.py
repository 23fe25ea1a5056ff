"""The projections' checkpoint and projector: a restored view answers like the original, a damaged
checkpoint is refused, and a record that fails halfway never leaves a half-applied view."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import orjson
import pytest

from domain.codec import encode_journal
from domain.events import JournalRecord
from domain.plugins import DEFAULT_PLUGINS
from projections import api
from projections.checkpoint import CheckpointError, dump, header, load
from projections.projector import Projector
from projections.view import View, build
from tests.projections.test_views import scenario

CODE = "code-1"
TOPICS = ("t.quotaflow.journal", "t.quotaflow.commands")
WHERE = "t.quotaflow.journal:0"


def answers(view: View) -> bytes:
    """Every query the API answers, for every queue and job the view knows."""
    paths = ["/queues", "/jobs", "/nodes", "/usage?points=1", "/health"]
    paths += [f"/queues/{q}" for q in sorted(view.state.queues)]
    paths += [f"/jobs/{j}" for j in sorted(view.timelines)]
    out: dict[str, Any] = {}
    for path in paths:
        route, _, query = path.partition("?")
        out[path] = api.route(view, route, dict([query.split("=")]) if query else {})
    return orjson.dumps(out, option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS)


def fed(records: list[JournalRecord]) -> View:
    view = View()
    for offset, record in enumerate(records):
        view.apply(record)
        view.offsets[WHERE] = offset + 1
    return view


# -- round trip -------------------------------------------------------------------------------


@pytest.mark.parametrize("cut", [0, 1, 5, 9, -3, None])
def test_a_restored_view_answers_every_query_like_the_original_and_goes_on_alike(
    cut: int | None,
) -> None:
    # Given a view folded up to some record (its last group still open, as a live view's is)
    records = scenario().records
    head, tail = records[:cut], records[cut:] if cut is not None else []
    original = fed(head)
    # When it is saved and restored
    restored = load(dump(original, code=CODE, topics=TOPICS), code=CODE, topics=TOPICS).view
    # Then the restored view answers every query alike, offsets included
    assert restored.offsets == original.offsets
    assert answers(restored) == answers(original)
    # And both fold the rest of the journal into the same view
    for view in (original, restored):
        for record in tail:
            view.apply(record)
        view.finish()
    reference = build(records)
    reference.offsets = dict(original.offsets)  # built without reading Kafka
    assert answers(restored) == answers(original) == answers(reference)


def test_the_header_tells_the_seq_and_offsets_without_reading_the_view() -> None:
    view = fed(scenario().records)
    head = header(dump(view, code=CODE, topics=TOPICS))
    assert (head["seq"], head["offsets"], head["topics"]) == (
        view.state.seq,
        {WHERE: len(scenario().records)},
        list(TOPICS),
    )


# -- damaged or foreign checkpoints are refused --------------------------------------------------


def damaged(data: bytes) -> dict[str, bytes]:
    flipped = bytearray(data)
    flipped[-10] ^= 0x01
    return {
        "empty": b"",
        "garbage": b"\x00\x01 not a checkpoint",
        "truncated": data[: len(data) // 2],
        "flipped payload byte": bytes(flipped),
        "header only": data[: data.index(b"\n", len(b"QUOTAFLOW")) + 1],
    }


def test_a_damaged_checkpoint_is_refused_with_a_reason() -> None:
    data = dump(fed(scenario().records), code=CODE, topics=TOPICS)
    for name, bad in damaged(data).items():
        with pytest.raises(CheckpointError) as refused:
            load(bad, code=CODE, topics=TOPICS)
        assert str(refused.value), name


def test_a_checkpoint_of_other_code_or_other_topics_is_refused() -> None:
    data = dump(fed(scenario().records), code=CODE, topics=TOPICS)
    with pytest.raises(CheckpointError, match="another version of the code"):
        load(data, code="code-2", topics=TOPICS)
    with pytest.raises(CheckpointError, match="written for topics"):
        load(data, code=CODE, topics=("other.quotaflow.journal", "other.quotaflow.commands"))


# -- the projector: all or nothing per record -------------------------------------------------------


class FailsOnce:
    """An action that raises in the first cycle it sees with job `poison` live: after the
    earlier actions have already changed State, so the view is genuinely half-applied."""

    name = "fails_once"

    def __init__(self) -> None:
        self.failed = False

    def execute(self, session: Any) -> None:
        if not self.failed and "poison" in session.state.jobs:
            self.failed = True
            raise RuntimeError("the cycle broke halfway")


def test_a_record_that_fails_halfway_leaves_the_view_as_it_was_and_the_error_visible() -> None:
    # Given a journal in which a cycle fails once, at the group closed by record `bad`
    from tests.domain.harness import job
    from tests.projections.journal import Journal

    j = scenario()
    j.at(20_000, job("poison", "a", gpu=1), job("other", "b", gpu=1))
    j.tick(21_000)
    j.tick(22_000)
    records = j.records
    bad = next(i for i, r in enumerate(records) if r.ts == 21_000)
    plugins = replace(DEFAULT_PLUGINS, actions=[*DEFAULT_PLUGINS.actions, FailsOnce()])
    projector = Projector(code=CODE, topics=TOPICS, plugins=plugins)
    for offset, record in enumerate(records[:bad]):
        projector.journal(WHERE, offset, encode_journal(record))
    projector.checkpoint()
    before = answers(projector.view)
    # When the record that closes the group fails halfway through its cycle
    projector.journal(WHERE, bad, encode_journal(records[bad]))
    # Then the view answers exactly as before it, save the error, which /health shows
    health = api.route(projector.view, "/health")[1]
    assert len(health["errors"]) == 1
    assert (
        f"@{bad} seq {records[bad].seq}: RuntimeError: the cycle broke halfway"
        in (health["errors"][0])
    )
    projector.view.errors.clear()
    projector.view.offsets[WHERE] = bad
    assert answers(projector.view) == before
    projector.view.offsets[WHERE] = bad + 1
    # And the following records are folded as if the failed one had never been there
    for offset in range(bad + 1, len(records)):
        projector.journal(WHERE, offset, encode_journal(records[offset]))
    projector.view.finish()
    reference = Journal()
    reference.records = records[:bad] + records[bad + 1 :]
    expected = build(reference.records)
    assert projector.view.state.seq == records[-1].seq
    assert answers(replace_counts(projector.view)) == answers(replace_counts(expected))


def replace_counts(view: View) -> View:
    """The view without what only says how it was read (offsets, errors, records counted)."""
    view.offsets, view.errors, view.records = {}, [], 0
    return view


def test_an_undecodable_record_is_skipped_and_reported_without_touching_the_view() -> None:
    records = scenario().records
    projector = Projector(code=CODE, topics=TOPICS)
    for offset, record in enumerate(records[:4]):
        projector.journal(WHERE, offset, encode_journal(record))
    before = answers(projector.view)
    projector.journal(WHERE, 4, b"\xff not json")
    projector.command("t.quotaflow.commands:0", 0, b"[1, 2]")
    assert len(projector.view.errors) == 2
    assert projector.view.offsets == {WHERE: 5, "t.quotaflow.commands:0": 1}
    assert projector.unsaved == 6 and projector.fed == 6 and projector.journal_fed == 5
    projector.view.errors.clear()
    projector.view.offsets = {WHERE: 4}
    assert answers(projector.view) == before
