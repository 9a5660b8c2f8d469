"""Every Kafka client over TLS, end to end: a worker and an executor that reach the broker only through a
TLS front requiring client certificates (tests/kafka/tls_proxy.py: the embedded broker has no working TLS
listener), running jobs submitted through the REST API and streaming a job set's events; and the
refusals a TLS client must make (an unknown CA, a certificate for another host, a plaintext client)."""

from __future__ import annotations

import asyncio
import json
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
from aiokafka.errors import KafkaConnectionError

from ops.broker import EmbeddedBroker, free_port
from streams.config import Settings
from streams.kafka import KafkaClients, kafka_clients
from streams.topics import ensure_topics
from tests.integration.helpers import create_queue, get_job
from tests.integration.pipeline import Executors, fake_item, submit_jobs
from tests.integration.workers import STARTED, Worker, poll
from tests.kafka.certificates import Certificates, make_certificates
from tests.kafka.tls_proxy import TlsProxy

pytestmark = pytest.mark.integration


@dataclass
class Fronted:
    broker: EmbeddedBroker
    proxy: TlsProxy
    certs: Certificates

    def settings(self, **changes: object) -> Settings:
        """Mutual TLS to the front, hostname checked, on a topic prefix of the test's own."""
        return replace(
            Settings(
                broker=f"tansu://127.0.0.1:{self.proxy.port}",
                topic_prefix=f"tls-{uuid.uuid4().hex[:8]}.",
                kafka_security_protocol="SSL",
                kafka_ssl_cafile=str(self.certs.ca),
                kafka_ssl_certfile=str(self.certs.client_cert),
                kafka_ssl_keyfile=str(self.certs.client_key),
            ),
            **changes,  # type: ignore[arg-type]
        )


@pytest.fixture(scope="module")
def fronted(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fronted]:
    directory = tmp_path_factory.mktemp("tls")
    certs = make_certificates(directory / "certs")
    port = free_port()
    broker = EmbeddedBroker(log_path=directory / "broker.log", advertised_port=port).start()
    try:
        with TlsProxy(broker.port, certs, port, require_client_cert=True) as proxy:
            yield Fronted(broker, proxy, certs)
    finally:
        broker.stop()


async def round_trip(clients: KafkaClients, topic: str) -> bytes:
    """Produce one record (acks=all) and read it back, each client through the builder."""
    producer = clients.producer(request_timeout_ms=5000)
    await producer.start()
    try:
        await producer.send_and_wait(topic, b"over tls")
    finally:
        await producer.stop()
    consumer = clients.consumer(topic, auto_offset_reset="earliest", enable_auto_commit=False)
    await consumer.start()
    try:
        record = await asyncio.wait_for(consumer.getone(), 10)
        return bytes(record.value)
    finally:
        await consumer.stop()


async def refused(clients: KafkaClients) -> bool:
    producer = clients.producer(request_timeout_ms=3000)
    try:
        await asyncio.wait_for(producer.start(), 15)
    except KafkaConnectionError:
        return True
    finally:
        await producer.stop()
    return False


def test_clients_with_the_ca_and_a_client_certificate_get_through_and_others_are_refused(fronted: Fronted) -> None:
    settings = fronted.settings()
    asyncio.run(ensure_topics(settings))  # the admin client over TLS
    before = len(fronted.proxy.accepted)
    assert asyncio.run(round_trip(kafka_clients(settings), settings.topic("events"))) == b"over tls"
    assert fronted.proxy.accepted[before:] and set(fronted.proxy.accepted[before:]) == {"flotilla-worker"}

    assert asyncio.run(refused(kafka_clients(replace(settings, kafka_ssl_cafile=str(fronted.certs.other_ca)))))
    assert asyncio.run(refused(kafka_clients(replace(settings, kafka_ssl_certfile="", kafka_ssl_keyfile=""))))
    plaintext = replace(settings, kafka_security_protocol="PLAINTEXT", kafka_ssl_cafile="", kafka_ssl_certfile="", kafka_ssl_keyfile="")
    assert asyncio.run(refused(kafka_clients(plaintext)))


def test_the_hostname_is_checked_unless_turned_off(fronted: Fronted, tmp_path: Path) -> None:
    """A front whose certificate names another host: refused, then accepted with the check off (the chain still checked)."""
    elsewhere = make_certificates(tmp_path / "certs", server_names=("kafka.example.com",))
    port = free_port()
    broker = EmbeddedBroker(log_path=tmp_path / "broker.log", advertised_port=port).start()
    try:
        with TlsProxy(broker.port, elsewhere, port):
            settings = Settings(broker=f"tansu://127.0.0.1:{port}", kafka_security_protocol="SSL", kafka_ssl_cafile=str(elsewhere.ca))
            assert asyncio.run(refused(kafka_clients(settings)))
            unchecked = replace(settings, kafka_ssl_check_hostname=False)
            asyncio.run(ensure_topics(unchecked))
            assert asyncio.run(round_trip(kafka_clients(unchecked), unchecked.topic("events"))) == b"over tls"
    finally:
        broker.stop()


def test_a_worker_and_an_executor_run_jobs_over_mutual_tls(fronted: Fronted, tmp_path: Path) -> None:
    settings = fronted.settings()
    unique = settings.topic_prefix.rstrip(".")
    worker = Worker(
        broker=fronted.broker,
        prefix=settings.topic_prefix,
        app_id=unique,
        data_dir=tmp_path / "data",
        log_path=tmp_path / "worker.log",
        partitions=2,
        extra_env={
            "FLOTILLA_BROKER": settings.broker,
            "FLOTILLA_KAFKA_SECURITY_PROTOCOL": "SSL",
            "FLOTILLA_KAFKA_SSL_CAFILE": settings.kafka_ssl_cafile,
            "FLOTILLA_KAFKA_SSL_CERTFILE": settings.kafka_ssl_certfile,
            "FLOTILLA_KAFKA_SSL_KEYFILE": settings.kafka_ssl_keyfile,
        },
    )
    STARTED.append(worker)
    executors = Executors(worker, tmp_path)
    before = len(fronted.proxy.accepted)
    try:
        worker.start()
        assert f"Kafka: {settings.broker} (SSL, hostname checked; at_least_once)" in worker.tail(400)
        executors.fake("tls-executor", 2)
        create_queue(worker.client, "tls")
        job_ids = submit_jobs(worker, "tls", "over-tls", [fake_item(executors.selector, runtime_s=0.2) for _ in range(4)])
        poll(
            lambda: all((job := get_job(worker.client, job_id)) and job["state"] == "succeeded" for job_id in job_ids),
            90,
            "4 jobs to succeed over TLS",
            interval=1.0,
        )
        # The job set's event stream: the API's own consumer of `events`, over TLS too.
        url = f"{worker.url}/api/v1/queues/tls/jobsets/over-tls/events?watch=false"
        with urllib.request.urlopen(url, timeout=60) as response:
            lines = response.read().decode().splitlines()
        kinds = [json.loads(line[len("data:") :])["kind"] for line in lines if line.startswith("data:")]
        assert kinds.count("JobSubmitted") == 4 and kinds.count("JobSucceeded") == 4, kinds
    finally:
        executors.stop_all()
        worker.stop()
    # Every connection came through the front with the client certificate; the broker advertises no other address.
    assert len(fronted.proxy.accepted) - before >= 5
    assert set(fronted.proxy.accepted[before:]) == {"flotilla-worker"}
