"""Shared pytest fixtures: a real Kafka broker, started lazily once per session (I/O shell)."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from hypothesis import settings

BOOTSTRAP_ENV = "QUOTAFLOW_BOOTSTRAP"
BROKER_ENV = "QUOTAFLOW_TEST_BROKER"  # "maven" (default) or "docker" (testcontainers)

# Property tests draw the same examples on every run of the suite ("suite", the default), so
# a change passes or fails the same way here and in CI. `bench/property_hunt` explores fresh
# random examples ("explore") by hand, many seeds at a time; what it finds becomes a test.
# No deadlines: a loaded machine must not fail a property (timing lives in bench/).
settings.register_profile("suite", derandomize=True, database=None, print_blob=True, deadline=None)
settings.register_profile(
    "explore", derandomize=False, database=None, print_blob=True, deadline=None
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "suite"))


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
    if os.environ.get(BROKER_ENV, "maven") == "docker":
        yield from _docker_broker()
        return
    from devtools.broker import start_broker
    from devtools.kafka_home import project_root

    handle = start_broker(project_root(), data_dir=tmp_path_factory.mktemp("kafka"))
    try:
        yield handle.bootstrap
    finally:
        handle.stop()


def _docker_broker() -> Iterator[str]:
    """A KRaft broker in a container, for machines with a Docker engine (opt-in).

    The default is the Maven-fetched broker, which needs no Docker; single-broker
    transactions need the transaction log's replication factor and min ISR at 1.
    """
    from testcontainers.kafka import KafkaContainer

    container = (
        KafkaContainer("confluentinc/cp-kafka:7.6.0")
        .with_kraft()
        .with_env("KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR", "1")
        .with_env("KAFKA_TRANSACTION_STATE_LOG_MIN_ISR", "1")
    )
    with container:
        yield container.get_bootstrap_server()
