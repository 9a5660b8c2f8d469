"""The compiled readers and writers (schemas/compiled.py) read and write exactly what fastavro does."""

from __future__ import annotations

import io
from typing import Any

import pytest
from fastavro import schemaless_reader, schemaless_writer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from schemas import codec
from schemas.compiled import Encoded, Partial, Unsupported, compile_schema
from tests.schemas import samples
from tests.schemas.strategies import values


def fastavro_bytes(name: str, record: dict[str, Any]) -> bytes:
    buffer = io.BytesIO()
    schemaless_writer(buffer, codec.schema(name), codec._default._tagger(name)(record))
    return buffer.getvalue()


def fastavro_record(name: str, body: bytes) -> Any:
    named = bool(codec._default.tagged_union_paths(name))
    return schemaless_reader(io.BytesIO(body), codec.schema(name), None, return_record_name=named, return_record_name_override=named)


def compiled_bytes(name: str, record: dict[str, Any]) -> bytes:
    out = bytearray()
    codec._default.compiled(name).write(out, record)
    return bytes(out)


@pytest.mark.parametrize("name", codec.SCHEMA_NAMES)
def test_each_sample_is_written_and_read_as_fastavro_does(name: str) -> None:
    record = samples.SAMPLES[name]()
    body = fastavro_bytes(name, record)
    assert compiled_bytes(name, record) == body
    read, end = codec._default.compiled(name).read(body, 0)
    assert end == len(body)
    assert read == fastavro_record(name, body)


@pytest.mark.parametrize("name", codec.SCHEMA_NAMES)
@settings(max_examples=40, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_any_valid_record_is_written_and_read_as_fastavro_does(name: str, data: st.DataObject) -> None:
    parsed = codec.schema(name)
    record = data.draw(values(parsed, parsed["__named_schemas"]))
    body = fastavro_bytes(name, record)
    assert compiled_bytes(name, record) == body
    read, end = codec._default.compiled(name).read(body, 0)
    assert end == len(body)
    assert read == fastavro_record(name, body)


def test_blocks_with_a_byte_size_are_read() -> None:
    """Writers may put a negative count and the block's size before a block (Avro's spec); fastavro
    does not write it, other writers do."""
    schema = {"type": "record", "name": "R", "fields": [{"name": "xs", "type": {"type": "array", "items": "long"}}]}
    reader = compile_schema(schema).read
    # count -2 (zig-zag 3), size 2 bytes, items 1 and 2 (zig-zag 2 and 4), then the end block 0
    assert reader(bytes([3, 4, 2, 4, 0]), 0) == ({"xs": [1, 2]}, 5)


def test_kept_records_carry_the_bytes_they_were_read_from_and_are_written_as_them() -> None:
    sequence = samples.event_sequence()
    data = codec.encode("event_sequence", sequence)
    decoded = codec.decode("event_sequence", data, keep="flotilla.JobSubmitted")
    assert decoded == codec.decode("event_sequence", data)
    (kind, spec), *_ = [event["payload"] for event in decoded["events"]]
    assert kind == "flotilla.JobSubmitted" and isinstance(spec, Encoded)
    assert spec.encoding == codec.encode_body("job_submitted", dict(spec))
    # written into another schema's record (a lease command), and on its own (job-specs), as those bytes
    command = {**samples.executor_command(), "spec": spec}
    assert codec.encode("executor_command", command) == codec.encode("executor_command", {**command, "spec": dict(spec)})
    assert codec.encode_body("job_submitted", spec) == spec.encoding
    stored = codec.decode("job_submitted", codec.encode("job_submitted", spec), keep="flotilla.JobSubmitted")
    assert isinstance(stored, Encoded) and stored.encoding == spec.encoding and stored.schema is spec.schema


def test_the_bytes_of_a_kept_record_are_what_a_writer_copies() -> None:
    """An Encoded is written as its encoding, not its fields: which is why it is never changed in place."""
    spec = codec.decode("job_submitted", codec.encode("job_submitted", samples.job_submitted()), keep="flotilla.JobSubmitted")
    assert isinstance(spec, Encoded)
    changed = Encoded({**spec, "priority": 99.0})
    changed.encoding, changed.schema = spec.encoding, spec.schema
    assert codec.decode("job_submitted", codec.encode("job_submitted", changed))["priority"] == spec["priority"]
    assert codec.decode("job_submitted", codec.encode("job_submitted", dict(changed)))["priority"] == 99.0


SKIPPED = frozenset({"flotilla.SchedulingCycle"})
SHARED = frozenset({"flotilla.PodSpec"})


def without_cycles(sequence: dict[str, Any]) -> dict[str, Any]:
    """The sequence as a reader skipping scheduling cycles gives it: their payloads None."""
    events = [
        {**event, "payload": (event["payload"][0], None)} if event["payload"][0] == "flotilla.SchedulingCycle" else event
        for event in sequence["events"]
    ]
    return {**sequence, "events": events}


@settings(max_examples=40, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_a_reader_skipping_and_sharing_records_reads_the_rest_as_fastavro_does(data: st.DataObject) -> None:
    parsed = codec.schema("event_sequence")
    body = fastavro_bytes("event_sequence", data.draw(values(parsed, parsed["__named_schemas"])))
    read, end = codec._default.compiled("event_sequence", "flotilla.JobSubmitted", SKIPPED, SHARED).read(body, 0)
    assert end == len(body)
    assert read == without_cycles(fastavro_record("event_sequence", body))


def test_a_skipped_record_is_passed_over_block_sizes_and_all() -> None:
    schema = {
        "type": "record",
        "name": "R",
        "fields": [
            {"name": "s", "type": {"type": "record", "name": "S", "fields": [{"name": "xs", "type": {"type": "array", "items": "long"}}]}},
            {"name": "after", "type": "long"},
        ],
    }
    reader = compile_schema(schema, skip=frozenset({"S"})).read
    # xs: count -2 with its size (2 bytes), items 1 and 2, a block of count 1 without, item 3, the end; then after = 5
    assert reader(bytes([3, 4, 2, 4, 2, 6, 0, 10]), 0) == ({"s": None, "after": 5}, 8)


def test_records_read_shared_are_one_value_per_distinct_encoding() -> None:
    """The jobs of a submission share their pod spec: each distinct one is read once, and a record starting
    with the bytes of one read before is that record (an encoding is self-delimiting)."""
    sequence = samples.event_sequence()
    submitted = next(event for event in sequence["events"] if event["payload"][0] == "flotilla.JobSubmitted")
    spec = submitted["payload"][1]
    other = {**spec, "pod_spec": {**spec["pod_spec"], "node_selector": {"zone": "b"}}}
    specs = [spec, {**spec, "client_id": "another"}, other, spec]
    events = [{**submitted, "event_id": f"e{n}", "payload": ("flotilla.JobSubmitted", each)} for n, each in enumerate(specs)]
    data = codec.encode("event_sequence", {**sequence, "events": events})
    decoded = codec.decode("event_sequence", data, keep="flotilla.JobSubmitted", shared=SHARED)
    assert decoded == codec.decode("event_sequence", data)
    pods = [event["payload"][1]["pod_spec"] for event in decoded["events"]]
    assert pods[0] is pods[1] is pods[3] and pods[2] is not pods[0]
    read_shared = codec.decode("event_sequence", data, keep="flotilla.JobSubmitted", shared=frozenset({"flotilla.JobSubmitted", *SHARED}))
    specs_read = [event["payload"][1] for event in read_shared["events"]]
    assert specs_read[0] is specs_read[3] and specs_read[1] is not specs_read[0] and specs_read[1]["pod_spec"] is specs_read[0]["pod_spec"]
    assert read_shared == decoded
    assert pods[2]["node_selector"] == {"zone": "b"} and pods[0]["node_selector"] == spec["pod_spec"]["node_selector"]
    read = [event["payload"][1] for event in decoded["events"]]
    assert [each.encoding for each in read] == [codec.encode_body("job_submitted", each) for each in specs]


# A projection as the fold's (`streams.tables.jobs.SPEC_FOLDED`), over a spec, its pod spec and their containers.
PROJECTION = frozenset(
    {
        ("flotilla.JobSubmitted", frozenset({"priority", "labels", "pod_spec"})),
        ("flotilla.PodSpec", frozenset({"containers", "tolerations", "termination_grace_period_seconds"})),
        ("flotilla.Container", frozenset({"resources"})),
    }
)


def projected(value: Any) -> Any:
    """``value`` (read whole) as a reader with `PROJECTION` reads it: each projected record with its named fields only."""
    if isinstance(value, tuple):
        return (value[0], projected(value[1]))
    if isinstance(value, list):
        return [projected(each) for each in value]
    if not isinstance(value, dict):
        return value
    fields = dict(PROJECTION)
    if "pod_spec" in value and "priority_class" in value:
        kept = fields["flotilla.JobSubmitted"]
    elif "containers" in value and "init_containers" in value:
        kept = fields["flotilla.PodSpec"]
    elif "image" in value and "resources" in value:
        kept = fields["flotilla.Container"]
    else:
        kept = frozenset(value)
    return {key: projected(each) for key, each in value.items() if key in kept}


@settings(max_examples=40, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_a_projected_reader_reads_the_fields_named_and_passes_over_the_rest(data: st.DataObject) -> None:
    """Of the record types a projection names only the fields named are read (the kept type's as a `Partial`,
    with the bytes of the whole record); what follows is read as a whole reader reads it."""
    parsed = codec.schema("event_sequence")
    body = fastavro_bytes("event_sequence", data.draw(values(parsed, parsed["__named_schemas"])))
    whole, _ = codec._default.compiled("event_sequence", "flotilla.JobSubmitted", SKIPPED, SHARED).read(body, 0)
    read, end = codec._default.compiled("event_sequence", "flotilla.JobSubmitted", SKIPPED, SHARED, PROJECTION).read(body, 0)
    assert end == len(body)
    assert read == projected(whole)
    specs = [(event["payload"][1], each["payload"][1]) for event, each in zip(read["events"], whole["events"], strict=True)]
    for part, spec in specs:
        if isinstance(spec, Encoded):
            assert type(part) is Partial and part.encoding == spec.encoding and part.schema is spec.schema
            assert compiled_bytes("job_submitted", part) == spec.encoding == compiled_bytes("job_submitted", dict(spec))


def test_a_partial_record_is_written_as_the_whole_record_it_was_read_from() -> None:
    """A lease command carries its job's spec: the fold's, read in part, is written whole."""
    data = codec.encode("job_submitted", samples.job_submitted())
    part = codec.decode("job_submitted", data, keep="flotilla.JobSubmitted", only=PROJECTION)
    assert type(part) is Partial and set(part) == {"priority", "labels", "pod_spec"}
    assert set(part["pod_spec"]) == {"containers", "tolerations", "termination_grace_period_seconds"}
    command = {**samples.executor_command(), "spec": part}  # not validated: the fold built it (a Partial lacks fields)
    whole = codec.encode("executor_command", {**command, "spec": samples.job_submitted()})
    assert codec.encode("executor_command", command, validate_record=False) == whole
    assert codec.framed("job_submitted", codec.encode_body("job_submitted", part)) == data


@pytest.mark.parametrize(
    ("only", "refused"),
    [
        (frozenset({("flotilla.PodSpec", frozenset({"containers", "node_selectors"}))}), r"no fields \['node_selectors'\]"),
        (frozenset({("flotilla.Pod", frozenset({"containers"}))}), "no such record type"),
    ],
)
def test_a_projection_of_a_field_or_type_the_schema_lacks_is_refused(only: frozenset[tuple[str, frozenset[str]]], refused: str) -> None:
    with pytest.raises(Unsupported, match=refused):
        compile_schema(codec.schema("job_submitted"), only=only)


@pytest.mark.parametrize("cut", [1, 5, 40])
def test_a_truncated_message_is_refused(cut: int) -> None:
    data = codec.encode("job_state", samples.job_state())
    with pytest.raises(codec.SchemaError, match="truncated or corrupt|trailing"):
        codec.decode("job_state", data[:-cut])


def test_a_record_of_the_wrong_shape_is_refused_unvalidated() -> None:
    with pytest.raises(codec.SchemaError, match="cannot encode job_state"):
        codec.encode("job_state", {"job_id": 5}, validate_record=False)
    sequence = samples.event_sequence()
    sequence["events"][0]["payload"] = sequence["events"][0]["payload"][1]  # a bare dict where several records may go
    with pytest.raises(codec.SchemaError, match="no union branch"):
        codec.encode("event_sequence", sequence, validate_record=False)
