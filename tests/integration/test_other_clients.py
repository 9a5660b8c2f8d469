"""Other clients of the log, on the embedded broker with real workers: services that submit jobs
and follow job states with nothing of Flotilla but its schemas.

- librdkafka's Python client (confluent-kafka) produces submit requests that a worker ingests and
  consumes job-states and job-specs in a consumer group: with the default framing, decoded as another
  team's service would (single-object header checked against Avro's reference fingerprint, body read
  with plain fastavro); with a schema registry configured, through confluent-kafka's own
  AvroSerializer and AvroDeserializer.
- a Node.js consumer (kafkajs + avsc, tests/integration/node/) reads job-states and job-specs.
- wrongly framed, malformed or oversized messages from that producer are answered on `rejected`,
  and the valid submissions around them, in all three framings, are ingested.
"""

from __future__ import annotations

import io
import json
import subprocess
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.schema_registry import SchemaRegistryClient as ConfluentRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from fastavro import schemaless_writer

from ops.broker import EmbeddedBroker
from schemas import codec
from schemas.schema_registry import SchemaRegistryClient
from tests.integration.helpers import create_queue, item, submit_record
from tests.integration.workers import Worker, poll, running_worker
from tests.schemas.registry_server import RegistryState, running_registry
from tests.schemas.third_party import SCHEMA_DIR, ThirdParty

pytestmark = pytest.mark.integration

NODE_DIR = Path(__file__).parent / "node"
QUEUE = "elsewhere"


def confluent_produce(worker: Worker, topic: str, messages: Sequence[tuple[bytes, bytes | None]]) -> None:
    """Produce in order with librdkafka and wait until the broker acknowledged every message."""
    settings = {"partitioner": "murmur2_random", "enable.idempotence": True, "message.max.bytes": 16 * 1024 * 1024}  # see schemas/README.md
    producer = Producer({"bootstrap.servers": worker.bootstrap, "linger.ms": 5, **settings})
    failures: list[str] = []

    def delivered(error: Any, message: Any) -> None:
        if error is not None:
            failures.append(f"{message.key()}: {error}")

    for key, value in messages:
        producer.produce(worker.topic(topic), key=key, value=value, on_delivery=delivered)
    assert producer.flush(30) == 0, "messages still unacknowledged after 30 s"
    assert not failures, failures


def confluent_consume(worker: Worker, topic: str, decode: Callable[[bytes], dict[str, Any]], done: Callable[[dict], bool]) -> dict:
    """Latest decoded value per key of ``topic``, read in a consumer group of its own until ``done``."""
    consumer = Consumer(
        {
            "bootstrap.servers": worker.bootstrap,
            "group.id": f"other-client-{uuid.uuid4().hex[:8]}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "session.timeout.ms": 10_000,
            "heartbeat.interval.ms": 1_000,
        }
    )
    consumer.subscribe([worker.topic(topic)])
    latest: dict[str, Any] = {}

    def read() -> bool:
        message = consumer.poll(0.5)
        if message is not None:
            assert message.error() is None, message.error()
            key, value = message.key(), message.value()
            assert key is not None, "Flotilla keys every message of its topics"
            latest[key.decode()] = None if value is None else decode(value)
        return done(latest)

    try:
        poll(read, 90.0, f"{topic} as done() wants it, read by confluent-kafka", interval=0)
    finally:
        consumer.close()
    return latest


def queued(client_ids: set[str]) -> Callable[[dict], bool]:
    return lambda states: {s["client_id"] for s in states.values() if s and s["state"] == "queued"} >= client_ids


def request(job_set: str, client_ids: list[str]) -> dict[str, Any]:
    return submit_record(QUEUE, job_set, [item(client_id=c) for c in client_ids])


@pytest.fixture(scope="module")
def submitted(worker: Worker) -> dict[str, dict[str, Any]]:
    """Three jobs produced by confluent-kafka in single-object framing, as a third party writes it;
    their states read back by confluent-kafka in a consumer group, decoded as a third party reads them."""
    create_queue(worker.client, QUEUE)
    third_party = ThirdParty()
    record = request("from-confluent-kafka", ["ck-1", "ck-2", "ck-3"])
    confluent_produce(worker, "submissions", [(QUEUE.encode(), third_party.encode("submit_request", record))])
    return confluent_consume(worker, "job-states", lambda v: third_party.decode("job_state", v), queued({"ck-1", "ck-2", "ck-3"}))


def test_confluent_kafka_submits_and_follows_job_states_and_their_specs(worker: Worker, submitted: dict[str, dict[str, Any]]) -> None:
    assert {s["client_id"] for s in submitted.values()} == {"ck-1", "ck-2", "ck-3"}
    assert all(s["queue"] == QUEUE and s["job_set_id"] == "from-confluent-kafka" for s in submitted.values())
    # the same states as Flotilla's own codec reads them
    assert {job_id: s["state"] for job_id, s in worker.job_states().items()} == {job_id: "queued" for job_id in submitted}
    # each job's spec is on job-specs under the same key, once
    third_party = ThirdParty()
    specs = confluent_consume(
        worker, "job-specs", lambda v: third_party.decode("job_submitted", v), lambda found: set(found) >= set(submitted)
    )
    assert set(specs) == set(submitted)
    for job_id, spec in specs.items():
        assert spec["client_id"] == submitted[job_id]["client_id"]
        assert spec["pod_spec"]["containers"][0]["resources"]["requests"] == {"cpu": "100m", "memory": "64Mi"}


def test_node_consumer_reads_job_states(worker: Worker, submitted: dict[str, dict[str, Any]]) -> None:
    """kafkajs in a consumer group, avsc with the files in README order, its own CRC-64-AVRO; a job's
    state and spec joined by their key."""
    states, specs = worker.topic("job-states"), worker.topic("job-specs")
    arguments = [worker.bootstrap, states, specs, str(SCHEMA_DIR), str(len(submitted)), "60"]
    finished = subprocess.run(["node", str(NODE_DIR / "consumer.js"), *arguments], capture_output=True, text=True, timeout=120, check=False)
    assert finished.returncode == 0, finished.stderr
    seen = json.loads(finished.stdout)
    assert seen["refused"] == []
    assert seen["fingerprints"] == {
        states: codec.current_writer("job_state").fingerprint.hex(),
        specs: codec.current_writer("job_submitted").fingerprint.hex(),
    }
    assert sorted(seen["states"]) == sorted(submitted) == sorted(seen["specs"])
    for job_id, state in seen["states"].items():
        ours = submitted[job_id]
        assert (state["state"], state["client_id"], state["submitted"]) == ("queued", ours["client_id"], ours["submitted"])
        assert "spec" not in state
        spec = seen["specs"][job_id]
        assert spec["client_id"] == ours["client_id"]
        assert spec["pod_spec"]["containers"][0]["resources"]["requests"] == {"cpu": "100m", "memory": "64Mi"}


def first_framing(record: dict[str, Any]) -> bytes:
    """A submit request as written before single-object encoding: f1, release 1, the body in
    release v1's schema (the only one that framing ever carried)."""
    buffer = io.BytesIO()
    schemaless_writer(buffer, codec.parse_directory(codec.FROZEN_DIR / "v1")["submit_request"], record)
    return b"\xf1\x01" + buffer.getvalue()


def test_wrongly_framed_and_malformed_messages_are_rejected_and_nothing_else_is_lost(worker: Worker, submitted: dict) -> None:
    third_party = ThirdParty()
    valid = request("around-bad-ones", ["before"])
    body = first_framing(request("around-bad-ones", ["first-framing"]))[2:]
    bad = {
        b"bad-json": (json.dumps({"queue": QUEUE}).encode(), "unknown framing, first byte 0x7b"),
        b"bad-no-header": (body, "unknown framing, first byte"),
        b"bad-registry": (b"\x00\x00\x00\x00\x09" + body, "Confluent-framed message (schema id 9) but no schema registry is configured"),
        b"bad-body": (third_party.headers["submit_request"] + b"\x02\x00garbage", "truncated or corrupt body"),
    }
    after = request("around-bad-ones", ["after"])
    confluent_produce(
        worker,
        "submissions",
        [(QUEUE.encode(), third_party.encode("submit_request", valid))]
        + [(key, value) for key, (value, _) in bad.items()]
        + [(QUEUE.encode(), b"\xf1\x01" + body), (QUEUE.encode(), third_party.encode("submit_request", after))],
    )

    def answered() -> dict[str, str] | None:
        reasons = {r["request_key"]: r["reason"] for r in worker.rejections() if r["request_key"].startswith("bad-")}
        return reasons if len(reasons) == len(bad) else None

    reasons = poll(answered, 60.0, "a rejection for every bad message")
    for key, (value, reason) in bad.items():
        assert reasons[key.decode()].startswith("malformed submission") and reason in reasons[key.decode()]
        assert [r["payload"] for r in worker.rejections() if r["request_key"] == key.decode()] == [value]
    around = queued({"before", "first-framing", "after", "ck-1"})
    poll(lambda: around(worker.job_states()), 60.0, "the valid submissions around them queued")


def test_a_message_over_the_size_limit_is_rejected_and_the_next_one_ingested(worker: Worker, submitted: dict) -> None:
    huge = ThirdParty().headers["submit_request"] + bytes(5 * 1024 * 1024)  # over the default 4 MiB
    after = request("after-a-huge-one", ["after-huge"])
    confluent_produce(worker, "submissions", [(b"huge", huge), (QUEUE.encode(), ThirdParty().encode("submit_request", after))])
    poll(lambda: queued({"after-huge"})(worker.job_states()), 60.0, "the submission after the huge one queued")
    [rejection] = [r for r in worker.rejections() if r["request_key"] == "huge"]
    assert rejection["reason"].startswith(f"submission of {len(huge)} bytes is over the limit of 4194304 bytes")
    assert rejection["payload"] == huge[:1024]


@pytest.fixture(scope="module")
def registry() -> Iterator[tuple[str, RegistryState]]:
    """A Schema-Registry-compatible server, and this process's codec able to read what it registers."""
    with running_registry() as (url, state):
        codec.use_schema_registry(SchemaRegistryClient(url), {})
        try:
            yield url, state
        finally:
            codec.use_single_object()


@pytest.fixture(scope="module")
def registry_worker(
    broker: EmbeddedBroker, tmp_path_factory: pytest.TempPathFactory, registry: tuple[str, RegistryState]
) -> Iterator[Worker]:
    """A worker writing the Confluent wire format; it also has small submission limits per queue."""
    with running_worker(
        broker,
        tmp_path_factory,
        "registry",
        FLOTILLA_SCHEMA_REGISTRY_URL=registry[0],
        FLOTILLA_SUBMISSION_QUEUE_RATE="1",
        FLOTILLA_SUBMISSION_QUEUE_BURST="30",
    ) as started:
        yield started


def test_with_a_schema_registry_confluent_kafkas_avro_serde_talks_to_flotilla(
    registry_worker: Worker, registry: tuple[str, RegistryState]
) -> None:
    url, state = registry
    worker = registry_worker
    assert f"{worker.topic('job-states')}-value" in state.subjects  # registered by the worker at start-up
    create_queue(worker.client, QUEUE)
    client = ConfluentRegistryClient({"url": url})
    serializer = AvroSerializer(client, json.dumps(codec.standalone(codec.schema("submit_request"))))
    context = SerializationContext(worker.topic("submissions"), MessageField.VALUE)
    confluent = request("with-registry", ["serde-1", "serde-2"])
    # a log in migration: Confluent-framed, single-object and first-framing submissions side by side
    confluent_produce(
        worker,
        "submissions",
        [
            (QUEUE.encode(), serializer(confluent, context)),
            (QUEUE.encode(), ThirdParty().encode("submit_request", request("with-registry", ["single-object"]))),
            (QUEUE.encode(), first_framing(request("with-registry", ["first-framing"]))),
        ],
    )
    deserializer = AvroDeserializer(client)
    states_context = SerializationContext(worker.topic("job-states"), MessageField.VALUE)
    states = confluent_consume(
        worker, "job-states", lambda v: deserializer(v, states_context), queued({"serde-1", "serde-2", "single-object", "first-framing"})
    )
    schema_id = state.subjects[f"{worker.topic('job-states')}-value"][-1]
    raw = worker.read(worker.topic("job-states"))
    assert raw and all(r.value[:5] == b"\x00" + schema_id.to_bytes(4, "big") for r in raw if r.value)
    assert {s["client_id"] for s in states.values()} == {"serde-1", "serde-2", "single-object", "first-framing"}
    specs_context = SerializationContext(worker.topic("job-specs"), MessageField.VALUE)
    specs = confluent_consume(worker, "job-specs", lambda v: deserializer(v, specs_context), lambda found: set(found) >= set(states))
    assert {job_id: spec["client_id"] for job_id, spec in specs.items()} == {job_id: s["client_id"] for job_id, s in states.items()}


def test_a_flooding_queue_is_limited_and_answered_while_another_goes_on(registry_worker: Worker) -> None:
    worker = registry_worker
    for name in ("flood", "calm"):
        create_queue(worker.client, name)
    third_party = ThirdParty()
    flood = [submit_record("flood", "loop", [item(client_id=f"f-{n}-{i}") for i in range(5)]) for n in range(10)]
    calm = submit_record("calm", "steady", [item(client_id=f"c-{i}") for i in range(5)])
    messages = [(b"flood", third_party.encode("submit_request", r)) for r in flood] + [
        (b"calm", third_party.encode("submit_request", calm))
    ]
    confluent_produce(worker, "submissions", messages)

    poll(lambda: queued({f"c-{i}" for i in range(5)})(worker.job_states()), 60.0, "every job of the calm queue queued")
    flood_ids = {r["request_id"] for r in flood}

    def answered() -> tuple[set[str], set[str]] | None:
        refused = {r["request_id"] for r in worker.rejections() if r["request_id"] in flood_ids}
        accepted = {s["client_id"].rsplit("-", 1)[0] for s in worker.job_states().values() if s["queue"] == "flood"}
        return (refused, accepted) if len(refused) + len(accepted) == len(flood) else None

    refused, accepted = poll(answered, 60.0, "every flood request queued or rejected")
    assert 6 <= len(accepted) <= 7 and len(refused) == len(flood) - len(accepted)  # a burst of 30 (6 requests), then 1 job/s
    reasons = {r["reason"] for r in worker.rejections() if r["request_id"] in refused}
    assert all(reason.startswith("queue 'flood' is over its submission limit of 1 jobs/s (bursts of 30)") for reason in reasons)
