"""The standard Kafka client security settings every QuotaFlow client takes (I/O shell configuration).

Protocol, SASL mechanism, user, password and TLS files come from flags, the environment
(``SECURITY_ENV``) or a config file's values (``KafkaSecurity.from_mapping``); the client
factories in ``streams.kafka_io`` turn them into aiokafka's keyword arguments. See
docs/kafka.md, "Production security".
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

# The environment variables every client reads when no flag or config file says otherwise.
SECURITY_ENV: dict[str, str] = {
    "protocol": "QUOTAFLOW_SECURITY_PROTOCOL",
    "sasl_mechanism": "QUOTAFLOW_SECURITY_SASL_MECHANISM",
    "username": "QUOTAFLOW_SECURITY_USERNAME",
    "password": "QUOTAFLOW_SECURITY_PASSWORD",
    "ca_file": "QUOTAFLOW_SECURITY_CA_FILE",
    "cert_file": "QUOTAFLOW_SECURITY_CERT_FILE",
    "key_file": "QUOTAFLOW_SECURITY_KEY_FILE",
}
PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


@dataclass(frozen=True, slots=True)
class KafkaSecurity:
    """The standard Kafka client security settings; the default is plaintext without a user.

    Every client factory takes one (explicitly, or the process default set once by the
    command line with ``use_security``, or else the environment, ``SECURITY_ENV``).
    """

    protocol: str = "PLAINTEXT"
    sasl_mechanism: str | None = None
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    ca_file: str | None = None  # PEM: the CA that signed the brokers' certificates
    cert_file: str | None = None  # PEM client certificate (SSL client authentication)
    key_file: str | None = None

    @classmethod
    def from_mapping(cls, values: Mapping[str, str | None]) -> KafkaSecurity:
        """From field names (``protocol``, ``username``, ...); missing or empty values are unset.

        A SASL mechanism or user without a protocol means SASL_SSL with a CA file, SASL_PLAINTEXT
        without one; a CA file alone means SSL. Raises ValueError on unknown values.
        """
        given = {key: value for key, value in values.items() if value}
        unknown = sorted(set(given) - set(SECURITY_ENV))
        if unknown:
            raise ValueError(f"unknown Kafka security settings: {', '.join(unknown)}")
        protocol = (given.pop("protocol", None) or "").upper()
        sasl = bool(given.get("sasl_mechanism") or given.get("username"))
        if not protocol:
            tls = bool(given.get("ca_file"))
            protocol = {(False, False): "PLAINTEXT", (True, False): "SSL"}.get(
                (tls, sasl), "SASL_SSL" if tls else "SASL_PLAINTEXT"
            )
        if protocol not in PROTOCOLS:
            raise ValueError(
                f"security protocol {protocol!r}: expected one of {', '.join(PROTOCOLS)}"
            )
        mechanism = given.pop("sasl_mechanism", None)
        if protocol.startswith("SASL_"):
            mechanism = (mechanism or "SCRAM-SHA-512").upper()
            if mechanism not in SASL_MECHANISMS:
                raise ValueError(
                    f"SASL mechanism {mechanism!r}: expected one of {', '.join(SASL_MECHANISMS)}"
                )
            if not given.get("username") or not given.get("password"):
                raise ValueError(f"{protocol} needs a user and a password")
        return cls(protocol=protocol, sasl_mechanism=mechanism, **given)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> KafkaSecurity:
        env = os.environ if environ is None else environ
        return cls.from_mapping({name: env.get(var) for name, var in SECURITY_ENV.items()})

    def client_options(self) -> dict[str, Any]:
        """Keyword arguments for aiokafka's producers, consumers and admin clients."""
        if self.protocol == "PLAINTEXT":
            return {}
        options: dict[str, Any] = {"security_protocol": self.protocol}
        if self.protocol in ("SSL", "SASL_SSL"):
            from aiokafka.helpers import create_ssl_context

            options["ssl_context"] = create_ssl_context(
                cafile=self.ca_file, certfile=self.cert_file, keyfile=self.key_file
            )
        if self.protocol.startswith("SASL_"):
            options |= {
                "sasl_mechanism": self.sasl_mechanism,
                "sasl_plain_username": self.username,
                "sasl_plain_password": self.password,
            }
        return options

    def environment(self) -> dict[str, str]:
        """These settings as ``SECURITY_ENV`` variables, for a child process."""
        return {
            var: str(value)
            for name, var in SECURITY_ENV.items()
            if (value := getattr(self, name)) is not None
        }


_process_security: KafkaSecurity | None = None


def use_security(security: KafkaSecurity | None) -> None:
    """Sets the settings every client of this process uses unless given others (None: environment)."""
    global _process_security
    _process_security = security


def current_security(security: KafkaSecurity | None = None) -> KafkaSecurity:
    """The settings a client uses: the ones given, else the process default, else the environment."""
    if security is not None:
        return security
    return _process_security if _process_security is not None else KafkaSecurity.from_env()


def security_options(security: KafkaSecurity | None = None) -> dict[str, Any]:
    """aiokafka keyword arguments for ``current_security(security)``."""
    return current_security(security).client_options()
