"""Every schema round-trips realistic values through the wire format."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schemas import codec
from tests.schemas import samples


def test_every_schema_has_a_sample() -> None:
    assert set(samples.SAMPLES) == set(codec.SCHEMA_NAMES)


@pytest.mark.parametrize("name", codec.SCHEMA_NAMES)
def test_round_trip(name: str) -> None:
    record = samples.SAMPLES[name]()
    data = codec.encode(name, record)
    assert data[:10] == codec.SINGLE_OBJECT_MAGIC + codec.current_writer(name).fingerprint
    samples.assert_contains(record, codec.decode(name, data), name)


def test_every_event_kind_round_trips_with_its_branch_name() -> None:
    sequence = samples.event_sequence()
    decoded = codec.decode("event_sequence", codec.encode("event_sequence", sequence))
    kinds = [event["payload"][0] for event in decoded["events"]]
    assert kinds == [kind for kind, _ in samples.payloads()]
    # same-shaped payloads must keep their own kind, not collapse into the first matching branch
    assert {"flotilla.JobRunPending", "flotilla.JobRunSucceeded", "flotilla.JobSucceeded"} <= set(kinds)
    event = codec.schema("event_sequence")["__named_schemas"]["flotilla.Event"]
    (union,) = [field["type"] for field in event["fields"] if field["name"] == "payload"]
    assert len(union) == len(kinds), "a payload kind in the schema has no sample"


def test_rejection_keeps_raw_bytes_exactly() -> None:
    record = samples.rejection()
    decoded = codec.decode("rejection", codec.encode("rejection", record))
    assert decoded["payload"] == record["payload"]
    assert isinstance(decoded["payload"], bytes)


def test_omitted_fields_decode_to_their_defaults() -> None:
    minimal_item = {"pod_spec": {"containers": [{"name": "main", "image": "busybox"}]}}
    request = {"request_id": "r", "queue": "q", "job_set_id": "s", "user": "anonymous", "items": [minimal_item]}
    item = codec.decode("submit_request", codec.encode("submit_request", request))["items"][0]
    assert item["client_id"] is None
    assert item["priority"] == 0.0
    assert item["namespace"] == "default"
    assert item["labels"] == {} and item["annotations"] == {} and item["services"] == []
    main = item["pod_spec"]["containers"][0]
    assert main["resources"] == {"requests": {}, "limits": {}}
    assert main["command"] == [] and main["env"] == [] and main["working_dir"] is None
    assert item["pod_spec"]["affinity"] is None and item["pod_spec"]["tolerations"] == []

    queue = codec.decode("queue", codec.encode("queue", {"name": "q"}))
    assert queue["priority_factor"] == 1.0 and queue["cordoned"] is False


def test_container_port_protocol_defaults_to_tcp() -> None:
    pod = samples.pod_spec()
    pod["containers"][0]["ports"] = [{"container_port": 8080}]
    spec = {**samples.job_submitted(), "pod_spec": pod}
    event = {"event_id": "e", "created": 1, "job_id": "j", "payload": ("flotilla.JobSubmitted", spec)}
    sequence = {"queue": "q", "job_set_id": "s", "user": "u", "events": [event]}
    decoded = codec.decode("event_sequence", codec.encode("event_sequence", sequence))
    port = decoded["events"][0]["payload"][1]["pod_spec"]["containers"][0]["ports"][0]
    assert port == {"container_port": 8080, "protocol": "TCP", "name": None}


@settings(max_examples=60)
@given(
    labels=st.dictionaries(st.text(max_size=20), st.text(max_size=40), max_size=5),
    priority=st.floats(allow_nan=False),
    requests=st.dictionaries(st.sampled_from(["cpu", "memory", "nvidia.com/gpu"]), st.text(max_size=10)),
    seed=st.integers(min_value=-(2**63), max_value=2**63 - 1),
)
def test_arbitrary_strings_numbers_and_maps_survive(labels, priority, requests, seed) -> None:
    spec = samples.job_submitted()
    spec["labels"], spec["priority"] = labels, priority
    spec["pod_spec"]["containers"][0]["resources"]["requests"] = requests
    cycle = {"cycle_id": "c", "cycle_time": 0, "seed": seed}
    sequence = {
        "queue": "q",
        "job_set_id": "s",
        "user": "u",
        "events": [
            {"event_id": "a", "created": 0, "job_id": "j", "payload": ("flotilla.JobSubmitted", spec)},
            {"event_id": "b", "created": 0, "job_id": None, "payload": ("flotilla.SchedulingCycle", cycle)},
        ],
    }
    decoded = codec.decode("event_sequence", codec.encode("event_sequence", sequence))
    samples.assert_contains(sequence, decoded)


def test_records_in_single_record_unions_need_no_tag_and_are_not_mutated() -> None:
    """The codec names the branch of a nullable record itself (fastavro would otherwise validate
    the whole record per branch to choose); callers' dicts stay untouched."""
    from schemas import codec
    from tests.schemas import samples

    request = samples.submit_request()
    pod_spec = request["items"][0]["pod_spec"]
    assert isinstance(pod_spec, dict) and pod_spec["affinity"] is not None
    before = repr(request)
    decoded = codec.decode("submit_request", codec.encode("submit_request", request))
    assert repr(request) == before
    assert decoded["items"][0]["pod_spec"]["affinity"] == pod_spec["affinity"]
    assert decoded["items"][0]["pod_spec"]["containers"][0]["image"] == pod_spec["containers"][0]["image"]
    assert codec.encode("submit_request", request, validate_record=False) == codec.encode("submit_request", request)


def test_a_spec_body_framed_is_the_job_specs_message() -> None:
    spec = samples.job_submitted()
    assert codec.framed("job_submitted", codec.encode_body("job_submitted", spec)) == codec.encode("job_submitted", spec)
