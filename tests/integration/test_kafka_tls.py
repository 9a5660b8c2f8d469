"""Every Kafka client over TLS, end to end: a worker and an executor that reach the broker only through a
TLS front requiring client certificates (tests/kafka/front.py: the embedded broker has no working TLS
listener), running jobs submitted through the REST API and streaming a job set's events; and the
refusals a TLS client must make (an unknown CA, a certificate for another host, a plaintext client)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from ops.broker import EmbeddedBroker
from streams.config import Settings
from streams.kafka import kafka_clients
from streams.topics import ensure_topics
from tests.integration.secure import fronted_broker, jobs_run_through, refused, round_trip
from tests.kafka.certificates import Certificates, make_certificates
from tests.kafka.front import BrokerFront

pytestmark = pytest.mark.integration


@dataclass
class Fronted:
    broker: EmbeddedBroker
    front: BrokerFront
    certs: Certificates

    def settings(self) -> Settings:
        """Mutual TLS to the front, hostname checked, on a topic prefix of the test's own."""
        return Settings(
            broker=f"tansu://127.0.0.1:{self.front.port}",
            topic_prefix=f"tls-{uuid.uuid4().hex[:8]}.",
            kafka_security_protocol="SSL",
            kafka_ssl_cafile=str(self.certs.ca),
            kafka_ssl_certfile=str(self.certs.client_cert),
            kafka_ssl_keyfile=str(self.certs.client_key),
        )


@pytest.fixture(scope="module")
def fronted(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fronted]:
    directory = tmp_path_factory.mktemp("tls")
    certs = make_certificates(directory / "certs")
    with fronted_broker(directory, certs, require_client_cert=True) as (broker, front):
        yield Fronted(broker, front, certs)


def test_clients_with_the_ca_and_a_client_certificate_get_through_and_others_are_refused(fronted: Fronted) -> None:
    settings = fronted.settings()
    asyncio.run(ensure_topics(settings))  # the admin client over TLS
    before = len(fronted.front.accepted)
    assert asyncio.run(round_trip(kafka_clients(settings), settings.topic("events"))) == b"secured"
    assert fronted.front.accepted[before:] and {a.certificate for a in fronted.front.accepted[before:]} == {"flotilla-worker"}

    assert asyncio.run(refused(kafka_clients(replace(settings, kafka_ssl_cafile=str(fronted.certs.other_ca)))))
    assert asyncio.run(refused(kafka_clients(replace(settings, kafka_ssl_certfile="", kafka_ssl_keyfile=""))))
    plaintext = replace(settings, kafka_security_protocol="PLAINTEXT", kafka_ssl_cafile="", kafka_ssl_certfile="", kafka_ssl_keyfile="")
    assert asyncio.run(refused(kafka_clients(plaintext)))


def test_the_hostname_is_checked_unless_turned_off(tmp_path: Path) -> None:
    """A front whose certificate names another host: refused, then accepted with the check off (the chain still checked)."""
    elsewhere = make_certificates(tmp_path / "certs", server_names=("kafka.example.com",))
    with fronted_broker(tmp_path, elsewhere) as (_, front):
        settings = Settings(broker=f"tansu://127.0.0.1:{front.port}", kafka_security_protocol="SSL", kafka_ssl_cafile=str(elsewhere.ca))
        assert asyncio.run(refused(kafka_clients(settings)))
        unchecked = replace(settings, kafka_ssl_check_hostname=False)
        asyncio.run(ensure_topics(unchecked))
        assert asyncio.run(round_trip(kafka_clients(unchecked), unchecked.topic("events"))) == b"secured"


def test_a_worker_and_an_executor_run_jobs_over_mutual_tls(fronted: Fronted, tmp_path: Path) -> None:
    settings = fronted.settings()
    environment = {
        "FLOTILLA_KAFKA_SECURITY_PROTOCOL": "SSL",
        "FLOTILLA_KAFKA_SSL_CAFILE": settings.kafka_ssl_cafile,
        "FLOTILLA_KAFKA_SSL_CERTFILE": settings.kafka_ssl_certfile,
        "FLOTILLA_KAFKA_SSL_KEYFILE": settings.kafka_ssl_keyfile,
    }
    before = len(fronted.front.accepted)
    kinds = jobs_run_through(fronted.broker, settings, environment, tmp_path)
    assert kinds.count("JobSubmitted") == 4 and kinds.count("JobSucceeded") == 4, kinds
    # Every connection came through the front with the client certificate: the broker advertises no other address.
    assert len(fronted.front.accepted) - before >= 5
    assert {a.certificate for a in fronted.front.accepted[before:]} == {"flotilla-worker"}
