"""Shared pytest fixtures: a real Kafka broker, started lazily once per session (I/O shell)."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

BOOTSTRAP_ENV = "QUOTAFLOW_BOOTSTRAP"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test that uses the broker with ``kafka`` (so ``-m "not kafka"`` skips them)."""
    for item in items:
        if "kafka_bootstrap" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.kafka)


@pytest.fixture(scope="session")
def kafka_bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Bootstrap address of a real broker: ``$QUOTAFLOW_BOOTSTRAP`` or one started for this session."""
    external = os.environ.get(BOOTSTRAP_ENV)
    if external:
        yield external
        return
    from streams.broker import project_root, start_broker

    handle = start_broker(project_root(), data_dir=tmp_path_factory.mktemp("kafka"))
    try:
        yield handle.bootstrap
    finally:
        handle.stop()
