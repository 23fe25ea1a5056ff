"""A secured local broker's files: a CA and certificates, SCRAM users, and its TLS/SASL/ACL settings (developer tool, I/O).

``prepare`` writes (once per data dir, kept across restarts) into ``<data dir>/security``:

- ``ca.pem`` / ``ca-key.pem``: a self-signed CA made with the ``cryptography`` package;
- ``broker.pem``: the broker's key and certificate (CN ``quotaflow-broker``, valid for
  127.0.0.1 and localhost) signed by that CA, in the PEM form Kafka reads directly;
- ``users.json``: the SCRAM users and their random passwords (mode 0600).

``broker_overrides`` gives the server properties a secured broker runs with (clients on a
SASL_SSL listener, the controller listener on mutual TLS, StandardAuthorizer with no access
unless an ACL grants it) and ``scram_format_args`` the ``kafka-storage format --add-scram``
arguments that create the users in KRaft's metadata before any client connects. ACLs are
granted by the command line once the broker runs (``streams/acls.py``). See docs/kafka.md,
"Production security".
"""

from __future__ import annotations

import datetime
import json
import os
import re
import secrets
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SECURITY_DIR = "security"
ADMIN_USER = "admin"
BROKER_CN = "quotaflow-broker"
# The roles of the contract's topic split; producers are per team ("producer-<team>").
ROLE_USERS = ("scheduler", "operator", "agent", "reader")
SCRAM_MECHANISM = "SCRAM-SHA-512"
_VALID_DAYS = 825
_TEAM = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}$")


def producer_user(team: str) -> str:
    """The SCRAM user of a team's producers."""
    return f"producer-{team}"


@dataclass(frozen=True)
class SecureSetup:
    """Where a secured broker's CA, certificate and users live, and the users' passwords."""

    directory: Path
    passwords: dict[str, str]
    teams: tuple[str, ...]

    @property
    def ca_file(self) -> Path:
        return self.directory / "ca.pem"

    @property
    def broker_pem(self) -> Path:
        return self.directory / "broker.pem"

    @property
    def users_file(self) -> Path:
        return self.directory / "users.json"

    def client_options(self, user: str = ADMIN_USER) -> dict[str, Any]:
        """aiokafka keyword arguments for ``user`` over SASL_SSL (devtools' own admin calls)."""
        from aiokafka.helpers import create_ssl_context

        return {
            "security_protocol": "SASL_SSL",
            "ssl_context": create_ssl_context(cafile=str(self.ca_file)),
            "sasl_mechanism": SCRAM_MECHANISM,
            "sasl_plain_username": user,
            "sasl_plain_password": self.passwords[user],
        }


def load(directory: Path) -> SecureSetup | None:
    """The setup ``prepare`` wrote in ``directory``, or None when there is none."""
    try:
        saved = json.loads((directory / "users.json").read_text())
        return SecureSetup(directory, dict(saved["passwords"]), tuple(saved["teams"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def prepare(data_dir: Path, teams: Iterable[str]) -> SecureSetup:
    """Creates (or finds) the CA, the broker certificate and the users of a secured data dir.

    Users are created in KRaft's metadata when the data dir is formatted, so the teams of a
    data dir are fixed by its first secured start; asking for others later is an error.
    """
    wanted = tuple(sorted(set(teams)))
    for team in wanted:
        if not _TEAM.match(team):
            raise ValueError(f"team {team!r}: use a queue-like id ([a-z0-9][a-z0-9-]*)")
    directory = data_dir / SECURITY_DIR
    existing = load(directory)
    if existing is not None:
        if wanted and wanted != existing.teams:
            raise ValueError(
                f"{data_dir} was first secured for teams {', '.join(existing.teams) or '(none)'}; "
                "its users cannot change (start a new --data-dir for other teams)"
            )
        return existing
    directory.mkdir(parents=True, exist_ok=True)
    os.chmod(directory, 0o700)
    _write_certificates(directory)
    users = (ADMIN_USER, *ROLE_USERS, *(producer_user(team) for team in wanted))
    # Hex passwords: nothing the --add-scram syntax or a JAAS line would need to escape.
    setup = SecureSetup(directory, {user: secrets.token_hex(16) for user in users}, wanted)
    _write_private(
        setup.users_file,
        json.dumps({"passwords": setup.passwords, "teams": list(wanted)}, indent=2) + "\n",
    )
    return setup


def scram_format_args(setup: SecureSetup) -> list[str]:
    """``kafka-storage format`` arguments that create every user's SCRAM credential."""
    args: list[str] = []
    for user, password in sorted(setup.passwords.items()):
        args += ["--add-scram", f"{SCRAM_MECHANISM}=[name={user},password={password}]"]
    return args


def broker_overrides(setup: SecureSetup, port: int, controller_port: int) -> dict[str, str]:
    """The server properties that secure a single-node KRaft broker (replacing the plaintext ones)."""
    admin = setup.passwords[ADMIN_USER]
    jaas = (
        "org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="{ADMIN_USER}" password="{admin}";'
    )
    return {
        "listeners": f"SASL_SSL://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}",
        "advertised.listeners": (
            f"SASL_SSL://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}"
        ),
        "inter.broker.listener.name": "SASL_SSL",
        "listener.security.protocol.map": "CONTROLLER:SSL,SASL_SSL:SASL_SSL",
        "sasl.enabled.mechanisms": SCRAM_MECHANISM,
        "sasl.mechanism.inter.broker.protocol": SCRAM_MECHANISM,
        f"listener.name.sasl_ssl.{SCRAM_MECHANISM.lower()}.sasl.jaas.config": jaas,
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(setup.broker_pem),
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(setup.ca_file),
        # The controller listener takes only the broker itself, proven by its certificate.
        "listener.name.controller.ssl.client.auth": "required",
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "allow.everyone.if.no.acl.found": "false",
        "super.users": f"User:{ADMIN_USER};User:CN={BROKER_CN}",
    }


def apply_overrides(properties: str, overrides: dict[str, str]) -> str:
    """``properties`` with each overridden key's line replaced (or appended when absent)."""
    lines = []
    for line in properties.splitlines():
        key = line.partition("=")[0].strip()
        if not line.lstrip().startswith("#") and key in overrides:
            continue
        lines.append(line)
    lines.append("# Security (devtools/security.py)")
    lines += [f"{key}={value}" for key, value in overrides.items()]
    return "\n".join(lines) + "\n"


# --- certificates -------------------------------------------------------------------------


def _write_certificates(directory: Path) -> None:
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = datetime.datetime.now(datetime.UTC)
    until = now + datetime.timedelta(days=_VALID_DAYS)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "QuotaFlow local CA")])
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(until)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, BROKER_CN)]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(until)
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
        # Server for clients, client towards its own controller listener.
        .add_extension(
            x509.ExtendedKeyUsage(
                [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
            ),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    pkcs8 = serialization.PrivateFormat.PKCS8  # Kafka's PEM keystore reads PKCS#8 keys only
    plain = serialization.NoEncryption()
    (directory / "ca.pem").write_bytes(ca_cert.public_bytes(pem))
    _write_private(directory / "ca-key.pem", ca_key.private_bytes(pem, pkcs8, plain).decode())
    _write_private(
        directory / "broker.pem",
        key.private_bytes(pem, pkcs8, plain).decode()
        + cert.public_bytes(pem).decode()
        + ca_cert.public_bytes(pem).decode(),
    )


def _write_private(path: Path, text: str) -> None:
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as handle:
        handle.write(text)
