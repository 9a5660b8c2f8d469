"""Helpers of the Kafka security tests: the embedded broker behind a TLS/SASL front (tests/kafka/front.py),
clients built by streams/kafka.py, and a worker and an executor running jobs through the front."""

from __future__ import annotations

import asyncio
import json
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from aiokafka.errors import KafkaConnectionError, KafkaError

from ops.broker import EmbeddedBroker, free_port
from streams.config import Settings
from streams.kafka import KafkaClients
from tests.integration.helpers import create_queue, get_job
from tests.integration.pipeline import Executors, fake_item, submit_jobs
from tests.integration.workers import STARTED, Worker, poll
from tests.kafka.certificates import Certificates
from tests.kafka.front import BrokerFront


@contextmanager
def fronted_broker(
    directory: Path, certs: Certificates | None, require_client_cert: bool = False, users: dict[str, str] | None = None
) -> Iterator[tuple[EmbeddedBroker, BrokerFront]]:
    """An embedded broker that advertises the front's port, and the front."""
    port = free_port()
    broker = EmbeddedBroker(log_path=directory / "broker.log", advertised_port=port).start()
    try:
        with BrokerFront(broker.port, port, certs=certs, require_client_cert=require_client_cert, users=users) as front:
            yield broker, front
    finally:
        broker.stop()


async def round_trip(clients: KafkaClients, topic: str) -> bytes:
    """Produce one record (acks=all) and read it back, each client through the builder."""
    producer = clients.producer(request_timeout_ms=5000)
    await producer.start()
    try:
        await producer.send_and_wait(topic, b"secured")
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
    """Whether the broker (its front) will not let this client in."""
    producer = clients.producer(request_timeout_ms=3000)
    try:
        await asyncio.wait_for(producer.start(), 15)
    except (KafkaConnectionError, KafkaError):
        return True
    finally:
        await producer.stop()
    return False


def jobs_run_through(broker: EmbeddedBroker, settings: Settings, environment: dict[str, str], directory: Path) -> list[str]:
    """A worker and a fake executor, both configured by ``environment`` (FLOTILLA_* besides the broker),
    run 4 jobs submitted over REST; returns the kinds of the job set's events as the API streams them."""
    worker = Worker(
        broker=broker,
        prefix=settings.topic_prefix,
        app_id=settings.topic_prefix.rstrip("."),
        data_dir=directory / "data",
        log_path=directory / "worker.log",
        partitions=2,
        extra_env={"FLOTILLA_BROKER": settings.broker, **environment},
    )
    STARTED.append(worker)
    executors = Executors(worker, directory)
    try:
        worker.start()
        executors.fake("secured-executor", 2)
        create_queue(worker.client, "secured")
        job_ids = submit_jobs(worker, "secured", "secured-set", [fake_item(executors.selector, runtime_s=0.2) for _ in range(4)])
        poll(
            lambda: all((job := get_job(worker.client, job_id)) and job["state"] == "succeeded" for job_id in job_ids),
            90,
            "4 jobs to succeed",
            interval=1.0,
        )
        # The job set's event stream: the API's own consumer of `events`.
        url = f"{worker.url}/api/v1/queues/secured/jobsets/secured-set/events?watch=false"
        with urllib.request.urlopen(url, timeout=60) as response:
            lines = response.read().decode().splitlines()
        assert "Kafka: " + settings.broker in worker.tail(400)
        return [json.loads(line[len("data:") :])["kind"] for line in lines if line.startswith("data:")]
    finally:
        executors.stop_all()
        worker.stop()
