"""The Confluent wire format against a Schema-Registry-compatible server, read and written by
Flotilla's codec and by confluent-kafka's own Avro serializer and deserializer."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient as ConfluentRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from fastavro import parse_schema, schemaless_writer

from schemas import codec
from schemas.schema_registry import SchemaRegistryClient
from streams.config import Settings
from streams.topics import use_configured_framing, value_subjects
from tests.schemas import samples
from tests.schemas.registry_server import RegistryState, running_registry


@pytest.fixture
def registry() -> Iterator[tuple[str, RegistryState]]:
    with running_registry() as running:
        yield running


def fresh_codec() -> codec.Registry:
    return codec.Registry(codec.SCHEMA_DIR, codec.FROZEN_DIR)


def test_writers_register_every_value_schema_under_its_topic_subject(registry: tuple[str, RegistryState]) -> None:
    url, state = registry
    writer = fresh_codec()
    ids = writer.use_schema_registry(SchemaRegistryClient(url), value_subjects(Settings()))
    assert sorted(state.subjects) == sorted(
        f"flotilla.{topic}-value"
        for topic in ("submissions", "events", "job-states", "job-specs", "executor-commands", "executor-reports", "queues", "rejected")
    )
    assert state.subjects["flotilla.job-states-value"] == [ids["job_state"]]
    # what is registered is the standalone schema, whose fingerprint is the single-object one
    registered = parse_schema(json.loads(state.schemas[ids["job_state"] - 1]), {})
    assert codec.schema_fingerprint(registered) == codec.current_writer("job_state").fingerprint

    data = writer.encode("job_state", samples.job_state())
    assert data[:5] == b"\x00" + ids["job_state"].to_bytes(4, "big")
    samples.assert_contains(samples.job_state(), writer.decode("job_state", data))
    # registering again (a restart) gives the same ids
    assert fresh_codec().use_schema_registry(SchemaRegistryClient(url), value_subjects(Settings())) == ids


def test_reader_fetches_an_unknown_id_once(registry: tuple[str, RegistryState]) -> None:
    url, state = registry
    writer = fresh_codec()
    writer.use_schema_registry(SchemaRegistryClient(url), {"queue": "q-value"})
    data = writer.encode("queue", samples.queue())
    reader = fresh_codec()
    reader.use_schema_registry(SchemaRegistryClient(url), {})
    state.requests.clear()
    for _ in range(3):
        assert reader.decode("queue", data)["name"] == samples.QUEUE
    assert state.requests == [f"GET /schemas/ids/{int.from_bytes(data[1:5], 'big')}"]
    # and it still reads the default framing and the first one
    assert reader.decode("queue", codec.encode("queue", samples.queue()))["name"] == samples.QUEUE


def test_a_producers_own_compatible_schema_is_resolved(registry: tuple[str, RegistryState]) -> None:
    """A third party registering a queue schema of its own (fewer fields, no docs) is read with ours."""
    url, _ = registry
    theirs = {"type": "record", "name": "Queue", "namespace": "flotilla", "fields": [{"name": "name", "type": "string"}]}
    schema_id = SchemaRegistryClient(url).register("flotilla.queues-value", json.dumps(theirs))
    body = io.BytesIO()
    schemaless_writer(body, parse_schema(theirs), {"name": "their-queue"})
    reader = fresh_codec()
    reader.use_schema_registry(SchemaRegistryClient(url), {})
    queue = reader.decode("queue", b"\x00" + schema_id.to_bytes(4, "big") + body.getvalue())
    assert queue["name"] == "their-queue" and queue["priority_factor"] == 1.0 and queue["user_owners"] == []
    assert reader.writer_of("queue", b"\x00" + schema_id.to_bytes(4, "big"))[0].origin == f"registry id {schema_id}"
    with pytest.raises(codec.SchemaError, match=rf"cannot decode job_state: the message holds schema queue \(registry id {schema_id}\)"):
        reader.decode("job_state", b"\x00" + schema_id.to_bytes(4, "big") + body.getvalue())


def test_unknown_id_is_refused_and_not_asked_again(registry: tuple[str, RegistryState]) -> None:
    url, state = registry
    reader = fresh_codec()
    reader.use_schema_registry(SchemaRegistryClient(url), {})
    for _ in range(2):
        with pytest.raises(codec.UnknownSchemaId, match="has no schema id 77"):
            reader.decode("queue", b"\x00\x00\x00\x00\x4d\x02q")
    assert state.requests == ["GET /schemas/ids/77"]


def test_unreachable_registry_names_itself() -> None:
    with running_registry() as (url, _):
        pass  # stopped: its port refuses connections
    with pytest.raises(codec.SchemaError, match=f"schema registry {url}: POST /subjects/q-value/versions failed"):
        fresh_codec().use_schema_registry(SchemaRegistryClient(url, timeout_s=2), {"queue": "q-value"})


def test_credentials_in_the_url_become_basic_auth() -> None:
    client = SchemaRegistryClient("https://key:s%40cret@registry.example.com:8081/")
    assert client.url == "https://registry.example.com:8081"
    assert client._headers["Authorization"] == "Basic a2V5OnNAY3JldA=="  # base64 of "key:s@cret"
    with pytest.raises(codec.SchemaError, match="not an http"):
        SchemaRegistryClient("registry:8081")


def test_configured_framing_from_the_settings(registry: tuple[str, RegistryState]) -> None:
    url, state = registry
    try:
        use_configured_framing(Settings(topic_prefix="team.", schema_registry_url=url))
        data = codec.encode("rejection", samples.rejection())
        assert data[0] == 0 and "team.rejected-value" in state.subjects
        assert codec.decode("rejection", data)["reason"] == samples.rejection()["reason"]
    finally:
        codec.use_single_object()
    assert codec.encode("rejection", samples.rejection())[:2] == codec.SINGLE_OBJECT_MAGIC
    use_configured_framing(Settings())  # no registry: nothing to do
    assert codec.encode("rejection", samples.rejection())[:2] == codec.SINGLE_OBJECT_MAGIC


def test_confluent_kafka_deserializer_reads_what_flotilla_writes(registry: tuple[str, RegistryState]) -> None:
    url, _ = registry
    writer = fresh_codec()
    writer.use_schema_registry(SchemaRegistryClient(url), value_subjects(Settings()))
    deserializer = AvroDeserializer(ConfluentRegistryClient({"url": url}))
    context = SerializationContext("flotilla.job-states", MessageField.VALUE)
    state = deserializer(writer.encode("job_state", samples.job_state()), context)
    assert state["job_id"] == samples.JOB_ID and state["runs"][1]["node"] == "gpu-node-17"
    spec = deserializer(
        writer.encode("job_submitted", samples.job_submitted()), SerializationContext("flotilla.job-specs", MessageField.VALUE)
    )
    assert spec["pod_spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"] == "8"


def test_flotilla_reads_what_confluent_kafka_serializer_writes(registry: tuple[str, RegistryState]) -> None:
    """A Python service producing submit requests with confluent-kafka's serializer and our schema."""
    url, state = registry
    schema = json.dumps(codec.standalone(codec.schema("submit_request")))
    serializer = AvroSerializer(ConfluentRegistryClient({"url": url}), schema)
    data = serializer(samples.submit_request(), SerializationContext("flotilla.submissions", MessageField.VALUE))
    assert data is not None and data[0] == 0
    assert "flotilla.submissions-value" in state.subjects
    reader = fresh_codec()
    reader.use_schema_registry(SchemaRegistryClient(url), {})
    samples.assert_contains(samples.submit_request(), reader.decode("submit_request", data))


def test_a_worker_whose_registry_is_unreachable_refuses_to_start(tmp_path: Path) -> None:
    with running_registry() as (url, _):
        pass  # stopped
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLOTILLA_")} | {"FLOTILLA_SCHEMA_REGISTRY_URL": url}
    # Port 1 has no broker: the refusal comes before the worker touches one.
    command = [
        sys.executable,
        "-m",
        "streams.client.cli",
        "worker",
        "--broker",
        "tansu://127.0.0.1:1",
        "--data-dir",
        str(tmp_path / "data"),
    ]
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 2, result.stdout + result.stderr
    assert f"error: schema registry {url}: POST /subjects/flotilla.submissions-value/versions failed" in result.stderr
