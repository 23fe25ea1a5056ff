"""The HTTP API's bearer-token rule (projections/http_security.py)."""

from __future__ import annotations

import pytest

from projections.http_security import authorized


@pytest.mark.parametrize(
    ("path", "header", "allowed"),
    [
        ("/health", None, True),
        ("/jobs", None, False),
        ("/jobs", "Bearer wrong", False),
        ("/jobs", "Basic s3cret", False),
        ("/jobs", "Bearer s3cret", True),
        ("/openapi.json", "bearer s3cret", True),
    ],
)
def test_everything_but_health_needs_the_token(
    path: str, header: str | None, allowed: bool
) -> None:
    assert authorized(path, header, "s3cret") is allowed


def test_no_token_configured_means_an_open_api() -> None:
    assert authorized("/jobs", None, None)
