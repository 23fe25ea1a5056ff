"""Client security settings and the roles' ACL table, without a broker."""

from __future__ import annotations

import pytest

from streams.acls import DESCRIBE, PREFIXED, READ, TOPIC, TRANSACTIONAL_ID, WRITE, role_acls
from streams.kafka_io import KafkaSecurity, Topics, security_options, use_security


def test_plaintext_by_default_adds_no_client_options() -> None:
    assert KafkaSecurity.from_env({}) == KafkaSecurity()
    assert KafkaSecurity().client_options() == {}


def test_a_user_without_a_ca_file_means_sasl_plaintext_with_scram() -> None:
    security = KafkaSecurity.from_env(
        {"QUOTAFLOW_SECURITY_USERNAME": "agent", "QUOTAFLOW_SECURITY_PASSWORD": "pw"}
    )
    assert (security.protocol, security.sasl_mechanism) == ("SASL_PLAINTEXT", "SCRAM-SHA-512")
    options = security.client_options()
    assert options["sasl_plain_username"] == "agent"
    assert options["security_protocol"] == "SASL_PLAINTEXT"
    assert "pw" not in repr(security)  # the password never shows in logs or tracebacks


@pytest.mark.parametrize(
    ("values", "needle"),
    [
        ({"protocol": "TLS"}, "security protocol 'TLS'"),
        ({"protocol": "SASL_SSL", "username": "u"}, "needs a user and a password"),
        ({"username": "u", "password": "p", "sasl_mechanism": "GSSAPI"}, "SASL mechanism"),
        ({"pasword": "p"}, "unknown Kafka security settings: pasword"),
    ],
)
def test_bad_settings_are_one_clear_error(values: dict[str, str], needle: str) -> None:
    with pytest.raises(ValueError, match=needle):
        KafkaSecurity.from_mapping(values)


def test_the_process_default_wins_over_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    use_security(None)  # whatever an earlier in-process command line set
    monkeypatch.setenv("QUOTAFLOW_SECURITY_USERNAME", "from-env")
    monkeypatch.setenv("QUOTAFLOW_SECURITY_PASSWORD", "p")
    assert security_options()["sasl_plain_username"] == "from-env"
    use_security(KafkaSecurity())
    try:
        assert security_options() == {}
    finally:
        use_security(None)


def writers(topic: str, acls: list) -> set[str]:  # type: ignore[type-arg]
    return {
        a.principal
        for a in acls
        if a.resource_type == TOPIC and a.operation == WRITE and a.name == topic
    }


def test_roles_follow_the_contracts_topic_split() -> None:
    topics = Topics.for_prefix("p.")
    acls = role_acls(topics, ["team-a", "team-b"], {"team-a": "pa", "team-b": "pb"})
    for topic in (topics.journal, topics.commands, topics.rejected, topics.snapshots):
        assert writers(topic, acls) == {"User:scheduler"}
    assert writers(topics.admin, acls) == {"User:operator"}
    assert writers(topics.nodes, acls) == {"User:agent"}
    assert writers(topics.jobs, acls) == set()  # a secured cluster takes jobs per team only
    assert writers("p.quotaflow.jobs.team-a", acls) == {"User:pa"}
    assert writers("p.quotaflow.jobs.team-b", acls) == {"User:pb"}
    transactional = {a.principal for a in acls if a.resource_type == TRANSACTIONAL_ID}
    assert transactional == {"User:scheduler"}
    readers = {a.principal for a in acls if a.name == topics.journal and a.operation == READ}
    assert readers == {"User:scheduler", "User:reader"}
    team_topics = [a for a in acls if a.pattern == PREFIXED and a.resource_type == TOPIC]
    assert {a.principal for a in team_topics} == {"User:scheduler"}
    assert all(a.operation != WRITE for a in team_topics)
    assert any(a.operation == DESCRIBE for a in team_topics)
