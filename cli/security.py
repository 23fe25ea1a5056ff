"""The Kafka security flags every command that talks to Kafka shares, and the API token (I/O shell).

Flags win over the environment (``streams.kafka_security.SECURITY_ENV``); whatever is set
becomes the process's default (``streams.kafka_io.use_security``), which every client
factory uses. Passwords are better given through the environment or a file than a flag,
which other users of the machine can see in the process list.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from cli.common import EXIT_USAGE, CliError

TOKEN_ENV = "QUOTAFLOW_API_TOKEN"

# flag -> KafkaSecurity field
_FLAGS = {
    "--security-protocol": "protocol",
    "--sasl-mechanism": "sasl_mechanism",
    "--kafka-user": "username",
    "--kafka-password": "password",
    "--ca-file": "ca_file",
    "--cert-file": "cert_file",
    "--key-file": "key_file",
}
_HELP = {
    "protocol": "PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL (default: inferred from the others)",
    "sasl_mechanism": "SCRAM-SHA-512 (default), SCRAM-SHA-256 or PLAIN",
    "username": "SASL user",
    "password": "SASL password (prefer $QUOTAFLOW_SECURITY_PASSWORD or --kafka-password-file)",
    "ca_file": "PEM file of the CA that signed the brokers' certificates",
    "cert_file": "PEM client certificate (TLS client authentication)",
    "key_file": "PEM key of the client certificate",
}


def add_kafka_security(parser: argparse.ArgumentParser) -> None:
    """Adds the standard Kafka security flags (defaults: the QUOTAFLOW_SECURITY_* environment)."""
    from streams.kafka_security import SECURITY_ENV

    group = parser.add_argument_group("Kafka security (default: the environment)")
    for flag, name in _FLAGS.items():
        group.add_argument(
            flag, dest=f"kafka_{name}", help=f"{_HELP[name]} (${SECURITY_ENV[name]})"
        )
    group.add_argument(
        "--kafka-password-file", type=Path, help="read the SASL password from this file"
    )


def apply_kafka_security(args: argparse.Namespace) -> Any:
    """Builds the security settings from flags over the environment and makes them the default."""
    if not hasattr(args, "kafka_protocol"):
        return None  # a command that talks to no broker (simulate, schema) loads no client
    from cli.config import section
    from streams.kafka_io import use_security
    from streams.kafka_security import SECURITY_ENV, KafkaSecurity

    # The config file's [security] table, each key overridden by its QUOTAFLOW_SECURITY_ variable.
    configured = section("security")
    values: dict[str, str | None] = {name: configured.get(name) for name in SECURITY_ENV}
    for name in _FLAGS.values():
        given = getattr(args, f"kafka_{name}", None)
        if given:
            values[name] = given
    password_file = getattr(args, "kafka_password_file", None)
    if password_file is not None:
        try:
            values["password"] = password_file.read_text().strip()
        except OSError as exc:
            raise CliError(
                f"--kafka-password-file {password_file}: {exc.strerror or exc}", EXIT_USAGE
            ) from None
    try:
        security = KafkaSecurity.from_mapping(values)
    except ValueError as exc:
        raise CliError(f"Kafka security: {exc}", EXIT_USAGE) from None
    use_security(security)
    return security


def api_token(explicit: str | None) -> str | None:
    """--token, else $QUOTAFLOW_API_TOKEN, else none."""
    return explicit or os.environ.get(TOKEN_ENV) or None
