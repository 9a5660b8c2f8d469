"""The Kafka settings checked at start and the clients built from them: what every client is given."""

from __future__ import annotations

import asyncio
import ssl
from dataclasses import replace
from pathlib import Path
from typing import Any, cast

import pytest
from faust.auth import SASLCredentials, SSLCredentials
from faust.transport.drivers.aiokafka import credentials_to_aiokafka_auth
from faust.types.enums import ProcessingGuarantee

from streams.config import Settings
from streams.kafka import KafkaConfigError, check, kafka_clients
from streams.plane import create_app
from tests.kafka.certificates import Certificates, make_certificates


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    return make_certificates(tmp_path_factory.mktemp("certs"))


KAFKA = Settings(broker="kafka://b1:9093;b2:9093")


def test_the_default_is_plaintext_to_the_embedded_broker_and_every_producer_waits_for_all_replicas() -> None:
    clients = kafka_clients(Settings())
    assert clients.options() == {"bootstrap_servers": "127.0.0.1:9092", "security_protocol": "PLAINTEXT"}
    assert clients.producer_options(linger_ms=5) == {
        "bootstrap_servers": "127.0.0.1:9092",
        "security_protocol": "PLAINTEXT",
        "acks": "all",
        "linger_ms": 5,
    }
    assert clients.faust_credentials() is None
    with pytest.raises(TypeError, match="acks=all"):
        clients.producer_options(acks=1)


def test_sasl_scram_over_tls_reaches_every_client_and_faust_the_same_way(certs: Certificates) -> None:
    settings = replace(
        KAFKA,
        kafka_security_protocol="sasl_ssl",
        kafka_sasl_mechanism="scram-sha-512",
        kafka_sasl_username="flotilla",
        kafka_sasl_password="s3cret",
        kafka_ssl_cafile=str(certs.ca),
    )
    clients = kafka_clients(settings)
    options = clients.options()
    context = options.pop("ssl_context")
    assert options == {
        "bootstrap_servers": "b1:9093,b2:9093",
        "security_protocol": "SASL_SSL",
        "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_plain_username": "flotilla",
        "sasl_plain_password": "s3cret",
    }
    assert isinstance(context, ssl.SSLContext)
    assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname
    assert context.minimum_version >= ssl.TLSVersion.TLSv1_2
    assert [ca["subject"] for ca in context.get_ca_certs()] == [((("commonName", "flotilla test CA"),),)]
    # Faust's worker, consumer and producer get these credentials; its driver turns them into the same options.
    credentials = clients.faust_credentials()
    assert isinstance(credentials, SASLCredentials)
    expected = {key: value for key, value in options.items() if key != "bootstrap_servers"} | {"ssl_context": context}
    assert credentials_to_aiokafka_auth(credentials) == expected
    assert "s3cret" not in repr(clients) and "s3cret" not in clients.describe()
    assert clients.describe() == "SASL_SSL, SCRAM-SHA-512 as flotilla, hostname checked"


def test_one_context_is_built_per_settings_and_shared_by_every_client(certs: Certificates) -> None:
    settings = replace(KAFKA, kafka_security_protocol="SSL", kafka_ssl_cafile=str(certs.ca))
    assert kafka_clients(settings) is kafka_clients(replace(settings))
    assert kafka_clients(settings).ssl_context is kafka_clients(settings).options()["ssl_context"]


def test_sasl_plain_without_tls_and_the_password_from_a_file(tmp_path: Path) -> None:
    secret = tmp_path / "password"
    secret.write_text("from-a-secret\n")  # as a mounted Kubernetes Secret often holds it
    clients = kafka_clients(
        replace(
            KAFKA,
            kafka_security_protocol="SASL_PLAINTEXT",
            kafka_sasl_mechanism="PLAIN",
            kafka_sasl_username="u",
            kafka_sasl_password_file=str(secret),
        )
    )
    assert clients.options() == {
        "bootstrap_servers": "b1:9093,b2:9093",
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": "PLAIN",
        "sasl_plain_username": "u",
        "sasl_plain_password": "from-a-secret",
    }
    credentials = clients.faust_credentials()
    assert isinstance(credentials, SASLCredentials) and credentials.protocol.value == "SASL_PLAINTEXT"


def test_mutual_tls_loads_the_client_certificate_and_the_hostname_check_can_be_turned_off(certs: Certificates) -> None:
    settings = replace(
        KAFKA,
        kafka_security_protocol="SSL",
        kafka_ssl_cafile=str(certs.ca),
        kafka_ssl_certfile=str(certs.client_cert),
        kafka_ssl_keyfile=str(certs.client_key),
        kafka_ssl_check_hostname=False,
    )
    clients = kafka_clients(settings)
    assert clients.options()["security_protocol"] == "SSL" and "sasl_mechanism" not in clients.options()
    context = clients.ssl_context
    assert context is not None and not context.check_hostname and context.verify_mode == ssl.CERT_REQUIRED
    credentials = clients.faust_credentials()
    assert isinstance(credentials, SSLCredentials) and credentials.context is context
    assert clients.describe() == "SSL, hostname NOT checked"


def test_a_key_that_does_not_belong_to_the_certificate_is_refused_at_start(certs: Certificates) -> None:
    settings = replace(
        KAFKA,
        kafka_security_protocol="SSL",
        kafka_ssl_certfile=str(certs.client_cert),
        kafka_ssl_keyfile=str(certs.server_key),
    )
    with pytest.raises(KafkaConfigError, match="kafka_ssl_certfile .*client.pem with kafka_ssl_keyfile .*server.key"):
        kafka_clients(settings)


@pytest.mark.parametrize(
    ("changes", "problem"),
    [
        ({"kafka_security_protocol": "TLS"}, "kafka_security_protocol 'TLS' is not one of PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL"),
        (
            {"kafka_security_protocol": "SASL_SSL", "kafka_sasl_username": "u", "kafka_sasl_password": "p"},
            "kafka_sasl_mechanism '' is not one of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512",
        ),
        ({"kafka_security_protocol": "SASL_SSL", "kafka_sasl_mechanism": "GSSAPI"}, "'GSSAPI' is not one of PLAIN"),
        (
            {"kafka_security_protocol": "SASL_PLAINTEXT", "kafka_sasl_mechanism": "PLAIN"},
            "kafka_sasl_username is needed with SASL_PLAINTEXT",
        ),
        (
            {"kafka_security_protocol": "SASL_PLAINTEXT", "kafka_sasl_mechanism": "PLAIN", "kafka_sasl_username": "u"},
            "a password is needed with SASL_PLAINTEXT: FLOTILLA_KAFKA_SASL_PASSWORD or kafka_sasl_password_file",
        ),
        (
            {
                "kafka_security_protocol": "SASL_PLAINTEXT",
                "kafka_sasl_mechanism": "PLAIN",
                "kafka_sasl_username": "u",
                "kafka_sasl_password": "p",
                "kafka_sasl_password_file": "/f",
            },
            "give kafka_sasl_password or kafka_sasl_password_file, not both",
        ),
        (
            {
                "kafka_security_protocol": "SASL_PLAINTEXT",
                "kafka_sasl_mechanism": "PLAIN",
                "kafka_sasl_username": "u",
                "kafka_sasl_password_file": "/no/such/file",
            },
            "kafka_sasl_password_file /no/such/file: No such file or directory",
        ),
        (
            {"kafka_sasl_username": "u", "kafka_sasl_mechanism": "PLAIN"},
            "kafka_sasl_mechanism, kafka_sasl_username apply only with kafka_security_protocol SASL_PLAINTEXT or SASL_SSL, not PLAINTEXT",
        ),
        ({"kafka_ssl_cafile": "/ca.pem"}, "kafka_ssl_cafile apply only with kafka_security_protocol SSL or SASL_SSL, not PLAINTEXT"),
        ({"kafka_security_protocol": "SSL", "kafka_ssl_certfile": "/c.pem"}, "kafka_ssl_certfile and kafka_ssl_keyfile go together"),
        ({"kafka_security_protocol": "SSL", "kafka_ssl_cafile": "/no/ca.pem"}, "kafka_ssl_cafile /no/ca.pem: No such file or directory"),
        ({"processing_guarantee": "at_most_once"}, "processing_guarantee 'at_most_once' is not one of at_least_once, exactly_once"),
        ({"replication_factor": 3, "min_insync_replicas": 4}, "min_insync_replicas must be between 1 and replication_factor (3), got 4"),
        ({"min_insync_replicas": 0}, "min_insync_replicas must be between 1 and replication_factor (1), got 0"),
        ({"replication_factor": 0}, "replication_factor must be at least 1, got 0"),
        ({"events_retention_ms": 0}, "events_retention_ms must be -1 (for ever) or a positive number of milliseconds, got 0"),
    ],
)
def test_each_problem_is_named_by_its_setting(changes: dict[str, Any], problem: str) -> None:
    settings = replace(KAFKA, **changes)
    assert any(problem in found for found in check(settings)), check(settings)
    with pytest.raises(KafkaConfigError, match="^Kafka settings: "):
        kafka_clients(settings)


def test_every_problem_is_named_at_once() -> None:
    settings = replace(KAFKA, kafka_security_protocol="SASL_SSL", min_insync_replicas=2)
    problems = check(settings)
    assert [problem.split()[0] for problem in problems] == ["kafka_sasl_mechanism", "kafka_sasl_username", "a", "min_insync_replicas"]


def test_exactly_once_is_refused_on_the_embedded_broker_and_given_to_faust_on_kafka() -> None:
    (problem,) = check(Settings(broker="tansu://127.0.0.1:9092", processing_guarantee="exactly_once"))
    assert problem.startswith(
        "processing_guarantee exactly_once needs Kafka transactions, which the embedded broker (tansu://) does not have"
    )
    assert check(replace(KAFKA, processing_guarantee="exactly_once")) == []

    async def conf_of(settings: Settings) -> tuple[str, int, object]:
        conf = create_app(settings).conf
        # Faust's setting decorator types the attribute as its getter; it holds the getter's ProcessingGuarantee
        guarantee = cast(ProcessingGuarantee, conf.processing_guarantee)
        return guarantee.value, conf.producer_acks, conf.broker_credentials

    assert asyncio.run(conf_of(replace(KAFKA, processing_guarantee="exactly_once"))) == ("exactly_once", -1, None)
    assert asyncio.run(conf_of(Settings()))[:2] == ("at_least_once", -1)


def test_faust_is_given_the_builders_credentials(certs: Certificates) -> None:
    settings = replace(KAFKA, kafka_security_protocol="SSL", kafka_ssl_cafile=str(certs.ca))

    async def credentials() -> object:
        return create_app(settings).conf.broker_credentials

    given = asyncio.run(credentials())
    assert isinstance(given, SSLCredentials) and given.context is kafka_clients(settings).ssl_context


def test_the_built_clients_take_the_options(certs: Certificates) -> None:
    """aiokafka accepts every option the builder gives (a misspelt one raises TypeError), and keeps the security."""
    clients = kafka_clients(
        replace(
            KAFKA,
            kafka_security_protocol="SASL_SSL",
            kafka_sasl_mechanism="SCRAM-SHA-256",
            kafka_sasl_username="u",
            kafka_sasl_password="p",
            kafka_ssl_cafile=str(certs.ca),
        )
    )

    async def build() -> list[tuple[str, object]]:
        producer, consumer, admin = clients.producer(linger_ms=5), clients.consumer(enable_auto_commit=False), clients.admin()
        seen = [(client._security_protocol, client._ssl_context) for client in (producer.client, consumer._client, admin._client)]
        await admin.close()
        return seen

    assert asyncio.run(build()) == [("SASL_SSL", clients.ssl_context)] * 3
