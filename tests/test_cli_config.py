"""Client settings from one place: a flag, else the environment, else the config file."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from cli import config


@pytest.fixture
def config_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    path = tmp_path / "config.toml"
    monkeypatch.setenv(config.CONFIG_ENV, str(path))
    for variable in ("QUOTAFLOW_BOOTSTRAP", "QUOTAFLOW_TOPIC_PREFIX", "QUOTAFLOW_WAIT_S"):
        monkeypatch.delenv(variable, raising=False)
    config._file.cache_clear()
    yield path
    config._file.cache_clear()


def test_a_flag_beats_the_environment_which_beats_the_file(
    config_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config_file.write_text('bootstrap = "file:9092"\ntopic_prefix = "prod."\nwait_s = 7\n')
    assert config.setting("bootstrap") == "file:9092"
    assert config.topic_prefix_default() == "prod."
    assert config.wait_default(5.0) == 7.0
    monkeypatch.setenv("QUOTAFLOW_BOOTSTRAP", "env:9092")
    assert config.setting("bootstrap") == "env:9092"
    assert config.setting("bootstrap", "flag:9092") == "flag:9092"


def test_sections_plug_in_with_their_own_environment_prefix(
    config_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config_file.write_text('[security]\nprotocol = "SSL"\ncafile = "/etc/ca.pem"\n')
    monkeypatch.setenv("QUOTAFLOW_SECURITY_PROTOCOL", "SASL_SSL")
    assert config.section("security") == {"protocol": "SASL_SSL", "cafile": "/etc/ca.pem"}


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("bootstrap = \n", "not valid TOML"),
        ('bootsrap = "x"\n', "unknown setting 'bootsrap'"),
        ("[secrity]\nx = 1\n", "unknown table [secrity]"),
    ],
)
def test_a_bad_file_is_an_error_naming_it(config_file: Path, text: str, needle: str) -> None:
    config_file.write_text(text)
    with pytest.raises(config.ConfigError, match=r"config .*config\.toml") as error:
        config.setting("bootstrap")
    assert needle in str(error.value)


def test_a_named_file_that_is_missing_is_an_error(config_file: Path) -> None:
    with pytest.raises(config.ConfigError, match="no such file"):
        config.setting("bootstrap")


def test_the_config_files_security_table_sets_every_clients_kafka_security(
    config_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import argparse

    from cli.security import apply_kafka_security
    from streams.kafka_security import SECURITY_ENV, use_security

    for variable in SECURITY_ENV.values():
        monkeypatch.delenv(variable, raising=False)
    config_file.write_text(
        '[security]\nprotocol = "SASL_SSL"\nsasl_mechanism = "SCRAM-SHA-512"\n'
        'username = "agent"\npassword = "from-file"\n'
    )
    monkeypatch.setenv("QUOTAFLOW_SECURITY_PASSWORD", "from-env")
    args = argparse.Namespace(kafka_protocol=None)
    try:
        security = apply_kafka_security(args)
        assert security.protocol == "SASL_SSL"
        assert security.username == "agent"
        assert security.password == "from-env"  # the environment beats the file
    finally:
        use_security(None)
