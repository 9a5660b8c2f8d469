"""Anything the codec cannot handle raises SchemaError saying which schema and what was wrong."""

from __future__ import annotations

import pytest

from schemas import codec
from tests.schemas import samples


def encoded_event_sequence() -> bytes:
    return codec.encode("event_sequence", samples.event_sequence())


def test_schema_error_is_a_value_error() -> None:
    assert issubclass(codec.SchemaError, ValueError)


def test_unknown_framing() -> None:
    with pytest.raises(codec.SchemaError, match=r"job_state: unknown framing, first byte 0x7b \(expected c3 01 .*, 00 .* or f1 "):
        codec.decode("job_state", b'{"job_id": "x"}')


def test_unknown_fingerprint() -> None:
    data = bytearray(codec.encode("queue", samples.queue()))
    data[9] ^= 0xFF
    with pytest.raises(codec.SchemaError, match=f"queue: unknown writer schema, fingerprint {bytes(data[2:10]).hex()}"):
        codec.decode("queue", bytes(data))


def test_unknown_release_of_the_first_framing_lists_the_known_ones() -> None:
    data = bytes((codec.LEGACY_MAGIC, 9)) + codec.encode("queue", samples.queue())[10:]
    known = ", ".join(release.removeprefix("v") for release in codec._default.releases())
    with pytest.raises(codec.SchemaError, match=rf"queue: unknown release 9 in an f1-framed message \(known: {known}\)"):
        codec.decode("queue", data)


def test_confluent_framing_without_a_registry() -> None:
    data = b"\x00\x00\x00\x00\x07" + codec.encode("queue", samples.queue())[10:]
    with pytest.raises(codec.SchemaError, match=r"queue: Confluent-framed message \(schema id 7\) but no schema registry is configured"):
        codec.decode("queue", data)


@pytest.mark.parametrize(
    ("data", "missing"),
    [(b"", "no header"), (b"\xf1", "no header"), (b"\xc3\x01\x90\x83", "no full fingerprint"), (b"\x00\x00\x01", "no full schema id")],
)
def test_message_shorter_than_the_header(data: bytes, missing: str) -> None:
    with pytest.raises(codec.SchemaError, match=rf"event_sequence: truncated message of \d byte\(s\), {missing}"):
        codec.decode("event_sequence", data)


@pytest.mark.parametrize("cut", [1, 10, 100])
def test_truncated_body(cut: int) -> None:
    data = encoded_event_sequence()
    with pytest.raises(codec.SchemaError, match=r"event_sequence \(current\): truncated or corrupt body"):
        codec.decode("event_sequence", data[:-cut])


def test_trailing_bytes_are_not_ignored() -> None:
    with pytest.raises(codec.SchemaError, match="1 unread trailing byte"):
        codec.decode("queue", codec.encode("queue", samples.queue()) + b"\x00")


def test_reading_with_the_wrong_schema_fails_instead_of_returning_garbage() -> None:
    with pytest.raises(codec.SchemaError, match=r"cannot decode executor_report: the message holds schema event_sequence \(current\)"):
        codec.decode("executor_report", encoded_event_sequence())
    # the first framing names no schema: the body itself fails to read as another one
    with pytest.raises(codec.SchemaError, match=r"cannot decode executor_report \(frozen/v1, f1 framing\)"):
        codec.decode("executor_report", b"\xf1\x01" + encoded_event_sequence()[10:])


def test_corrupt_union_index() -> None:
    data = codec._default.header("event_sequence")
    # queue, job_set_id, user, no groups, one event whose payload branch index is 99
    body = b"\x02q\x02s\x02u\x00" + b"\x02" + b"\x02e\x02\x00" + b"\xc6\x01" + b"\x00"
    with pytest.raises(codec.SchemaError, match=r"event_sequence \(current\): truncated or corrupt body"):
        codec.decode("event_sequence", data + body)


def test_not_bytes() -> None:
    with pytest.raises(codec.SchemaError, match="expected bytes, got dict"):
        codec.decode("queue", {"name": "q"})  # type: ignore[arg-type]  # the wrong type on purpose


def test_unknown_schema_name() -> None:
    with pytest.raises(codec.SchemaError, match=r"unknown schema 'pod_spec' \(known: job_submitted, submit_request, "):
        codec.encode("pod_spec", samples.pod_spec())
    with pytest.raises(codec.SchemaError, match="unknown schema 'nope'"):
        codec.decode("nope", b"\xf1\x01")


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda r: r.pop("executor"), r"field flotilla\.ExecutorReport\.executor: got None \(or missing\), expected string"),
        (lambda r: r.update(time=1.5), r"field flotilla\.ExecutorReport\.time: got 1\.5, expected long"),
        (lambda r: r.update(time=True), r"field flotilla\.ExecutorReport\.time: got True, expected long"),
        (lambda r: r["nodes"][0]["allocatable"].update(cpu=4), r"field flotilla\.NodeReport\.allocatable: got 4, expected string"),
        (lambda r: r["nodes"][1].update(unschedulable=1), r"field flotilla\.NodeReport\.unschedulable: got 1, expected boolean"),
        (lambda r: r["nodes"][0]["taints"][0].update(value=7), r"field flotilla\.Taint\.value: got 7, expected null \| string"),
        (lambda r: r["runs"].append({"run_id": "r", "job_id": "j"}), r"field flotilla\.RunReport\.state"),
    ],
)
def test_invalid_record_names_the_field(mutate, message: str) -> None:
    record = samples.executor_report()
    mutate(record)
    with pytest.raises(codec.SchemaError, match=r"cannot encode executor_report: " + message):
        codec.encode("executor_report", record)


def test_int_out_of_range() -> None:
    record = samples.executor_command()
    record["spec"]["pod_spec"]["containers"][0]["ports"][0]["container_port"] = 2**40
    with pytest.raises(codec.SchemaError, match=r"field flotilla\.ContainerPort\.container_port: got 1099511627776, expected int"):
        codec.encode("executor_command", record)


def test_event_payload_must_name_its_kind() -> None:
    record = samples.event_sequence()
    record["events"][3]["payload"] = {"run_id": "r"}  # JobRunPending? JobRunSucceeded? JobSucceeded?
    with pytest.raises(codec.SchemaError, match=r"field event_sequence\.events\[3\]\.payload is a union of records"):
        codec.encode("event_sequence", record)


def test_event_payload_with_unknown_kind() -> None:
    record = samples.event_sequence()
    record["events"][0]["payload"] = ("flotilla.JobExploded", {"reason": "x"})
    with pytest.raises(codec.SchemaError, match="cannot encode event_sequence: .*payload"):
        codec.encode("event_sequence", record)


def test_not_a_mapping() -> None:
    with pytest.raises(codec.SchemaError, match="cannot encode queue: expected a mapping, got list"):
        codec.encode("queue", [("name", "q")])  # type: ignore[arg-type]  # the wrong type on purpose
