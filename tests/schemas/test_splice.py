"""A splicer (schemas/splice.py) writes the bytes the compiled writer writes, copying what it can."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from schemas import codec
from schemas.compiled import Encoded
from schemas.splice import Splicer
from tests.schemas import samples
from tests.schemas.strategies import values

KEPT = ("flotilla.JobItem", "flotilla.PodSpec")
NAMED = {**codec.schema("submit_request")["__named_schemas"], **codec.schema("event_sequence")["__named_schemas"]}
SUBMITTED = Splicer(NAMED["flotilla.JobSubmitted"], NAMED["flotilla.JobItem"], NAMED)


def read_items(request: dict[str, Any]) -> list[Encoded]:
    """The request's items with a pod spec, read as the ingest agent reads them."""
    items = codec.decode("submit_request", codec.encode("submit_request", request), keep=KEPT)["items"]
    assert all(type(item) is Encoded for item in items)
    with_spec = [item for item in items if item["pod_spec"] is not None]
    assert with_spec and all(type(item["pod_spec"]) is Encoded for item in with_spec)
    return with_spec


def submitted(item: dict[str, Any], **spec_changes: Any) -> dict[str, Any]:
    """A JobSubmitted made of ``item``'s own values, as validation makes it: the pod spec a new dict."""
    return {**item, "priority_class": "armada-default", "pod_spec": {**item["pod_spec"], **spec_changes}}


def written(value: dict[str, Any]) -> bytes:
    return codec.encode_body("job_submitted", value)


def test_kept_fields_start_where_their_bytes_do() -> None:
    (item,) = read_items({**samples.submit_request(), "items": [samples.submit_request()["items"][0]]})
    assert len(item.starts) == len(NAMED["flotilla.JobItem"]["fields"]) and item.starts[0] == 0
    # the pod spec (after its union's branch byte) is the bytes between its field's start and the next's
    pod_spec = item["pod_spec"]
    fields = [field["name"] for field in NAMED["flotilla.JobItem"]["fields"]]
    begin, end = item.starts[fields.index("pod_spec")], item.starts[fields.index("services")]
    assert item.encoding[begin + 1 : end] == pod_spec.encoding


def test_a_job_made_of_the_items_values_is_spliced_to_the_written_bytes() -> None:
    for item in read_items(samples.submit_request()):
        job = submitted(item, priority_class_name="armada-default", termination_grace_period_seconds=30, active_deadline_seconds=600)
        spliced = SUBMITTED.encoded(job, item)
        assert spliced == job and spliced.encoding == written(job)
        assert spliced.schema is NAMED["flotilla.JobSubmitted"]
        assert spliced.starts[:2] == (0, 8)  # its own fields' starts: the priority, a double, first


def test_changed_fields_are_written_and_unchanged_ones_copied() -> None:
    (item, *_) = read_items(samples.submit_request())
    changes: list[dict[str, Any]] = [
        {"labels": {"a": "b"}},
        {"annotations": {**item["annotations"], "armadaproject.io/failFast": "true"}},
        {"client_id": None},
        {"priority": 7.5},
        {"pod_spec": item["pod_spec"]},  # the spec unchanged: copied whole
        {"pod_spec": {**item["pod_spec"], "containers": []}},
        {"services": [{"type": "NodePort", "ports": [8080], "name": None}]},
    ]
    for change in changes:
        job = {**submitted(item), **change}
        assert SUBMITTED.encoded(job, item).encoding == written(job), change


def test_an_encoded_payload_is_copied_into_its_event_sequence() -> None:
    (item, *_) = read_items(samples.submit_request())
    job = submitted(item)
    sequence = samples.event_sequence()
    event = {**sequence["events"][0], "payload": ("flotilla.JobSubmitted", SUBMITTED.encoded(job, item))}
    plain = {**event, "payload": ("flotilla.JobSubmitted", job)}
    body = codec.encode("event_sequence", {**sequence, "events": [event]}, validate_record=False)
    assert body == codec.encode("event_sequence", {**sequence, "events": [plain]})


def test_a_source_of_another_type_is_refused() -> None:
    spec = codec.decode("job_submitted", codec.encode("job_submitted", samples.job_submitted()), keep="flotilla.JobSubmitted")
    assert isinstance(spec, Encoded)
    with pytest.raises(ValueError, match="cannot splice from a flotilla.JobSubmitted"):
        SUBMITTED.encoded(dict(spec), spec)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_any_item_spliced_is_written_as_the_writer_writes_it(data: st.DataObject) -> None:
    item_type = NAMED["flotilla.JobItem"]
    raw = data.draw(values(item_type, NAMED))
    if raw.get("pod_spec") is None:
        raw = {**raw, "pod_spec": samples.submit_request()["items"][0]["pod_spec"]}
    (item,) = read_items({**samples.submit_request(), "items": [raw]})
    grace = data.draw(st.one_of(st.none(), st.integers(0, 2**40)))
    job = submitted(item, termination_grace_period_seconds=grace, priority_class_name=data.draw(st.text(max_size=6)))
    if data.draw(st.booleans()):
        job["labels"] = data.draw(values({"type": "map", "values": "string"}, NAMED))
    assert SUBMITTED.encoded(job, item).encoding == written(job)
