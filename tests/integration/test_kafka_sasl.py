"""Every Kafka client with SASL, end to end: a worker and an executor authenticating with SCRAM-SHA-512
over TLS (the password from a file, as a mounted Secret) run jobs and stream a job set's events; every
mechanism Flotilla offers gets through with the right password and is refused with a wrong one.

The embedded broker cannot check SASL here (tests/kafka/front.py says why), so a front does: it answers
SaslHandshake and SaslAuthenticate itself with a server checked against RFC 7677's example
(tests/kafka/test_sasl_server.py); the clients' side is aiokafka's own, configured by streams/kafka.py."""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import replace
from pathlib import Path

import pytest

from streams.config import Settings
from streams.kafka import kafka_clients
from streams.topics import ensure_topics
from tests.integration.secure import fronted_broker, jobs_run_through, refused, round_trip
from tests.kafka.certificates import make_certificates

pytestmark = pytest.mark.integration

USERS = {"flotilla": "s3cret-for-flotilla", "other": "other-password"}


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_each_mechanism_gets_through_with_the_password_and_not_without(mechanism: str, tmp_path: Path) -> None:
    with fronted_broker(tmp_path, None, users=USERS) as (_, front):
        settings = Settings(
            broker=f"tansu://127.0.0.1:{front.port}",
            topic_prefix=f"sasl-{uuid.uuid4().hex[:8]}.",
            kafka_security_protocol="SASL_PLAINTEXT",
            kafka_sasl_mechanism=mechanism,
            kafka_sasl_username="flotilla",
            kafka_sasl_password=USERS["flotilla"],
        )
        asyncio.run(ensure_topics(settings))
        assert asyncio.run(round_trip(kafka_clients(settings), settings.topic("events"))) == b"secured"
        assert front.accepted and {a.user for a in front.accepted} == {"flotilla"}

        front.refused.clear()
        assert asyncio.run(refused(kafka_clients(replace(settings, kafka_sasl_password="a guess"))))
        assert front.refused and all("flotilla" in reason for reason in front.refused)
        assert asyncio.run(refused(kafka_clients(replace(settings, kafka_sasl_username="mallory"))))
        no_sasl = replace(settings, kafka_security_protocol="PLAINTEXT", kafka_sasl_mechanism="", kafka_sasl_username="")
        assert asyncio.run(refused(kafka_clients(replace(no_sasl, kafka_sasl_password=""))))


def test_a_worker_and_an_executor_run_jobs_with_scram_over_tls(tmp_path: Path) -> None:
    certs = make_certificates(tmp_path / "certs")
    password_file = tmp_path / "sasl-password"
    password_file.write_text(USERS["flotilla"] + "\n")  # as a mounted Kubernetes Secret holds it
    with fronted_broker(tmp_path, certs, users=USERS) as (broker, front):
        settings = Settings(broker=f"tansu://127.0.0.1:{front.port}", topic_prefix=f"sasl-{uuid.uuid4().hex[:8]}.")
        environment = {
            "FLOTILLA_KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
            "FLOTILLA_KAFKA_SASL_MECHANISM": "SCRAM-SHA-512",
            "FLOTILLA_KAFKA_SASL_USERNAME": "flotilla",
            "FLOTILLA_KAFKA_SASL_PASSWORD_FILE": str(password_file),
            "FLOTILLA_KAFKA_SSL_CAFILE": str(certs.ca),
        }
        kinds = jobs_run_through(broker, settings, environment, tmp_path)
        assert kinds.count("JobSubmitted") == 4 and kinds.count("JobSucceeded") == 4, kinds
        assert len(front.accepted) >= 5 and {a.user for a in front.accepted} == {"flotilla"}
        assert front.refused == []
