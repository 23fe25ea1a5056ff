"""What `quotaflow status` concludes from a liveness record (pure)."""

from __future__ import annotations

from streams.status import STALE_AFTER_S, verdict


def test_a_fresh_active_record_is_up() -> None:
    assert verdict({"published_s": 100.0, "active": True}, now_s=101.0) == "up"


def test_a_record_older_than_the_limit_is_stale() -> None:
    assert (
        verdict({"published_s": 100.0, "active": True}, now_s=100.0 + STALE_AFTER_S + 1) == "stale"
    )


def test_a_scheduler_that_said_it_stopped_is_stopped() -> None:
    assert verdict({"published_s": 100.0, "active": False}, now_s=101.0) == "stopped"


def test_a_record_without_a_time_is_stale() -> None:
    assert verdict({"active": True}, now_s=101.0) == "stale"
