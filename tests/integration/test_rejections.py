"""200 malformed submissions each produce a rejection with its reason on `<prefix>rejected`, and
the worker keeps processing the valid submissions around them: nothing is lost.

Every kind of bad input of streams/domain/validation.py, plus messages that are not Avro at all
(or Avro of another schema, truncated, of an unknown writer schema or release, Confluent-framed with no
schema registry configured, a tombstone) produced straight to
`<prefix>submissions`. Against the real embedded broker and a real control-plane worker.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from schemas.codec import encode
from streams.scheduler.config_file import load as load_scheduler_config
from tests.integration.helpers import call, container, create_queue, item, submission, submit, submit_record
from tests.integration.workers import Worker, poll
from tests.kit.jobs import QUEUE as KIT_QUEUE

pytestmark = pytest.mark.integration

QUEUE = "checked"
CORDONED = "closed"
GANG_ID = "armadaproject.io/gangId"
GANG_CARDINALITY = "armadaproject.io/gangCardinality"
MALFORMED = 200


def resources(requests: dict[str, str] | None, limits: dict[str, str] | None) -> dict[str, Any]:
    spec = container()
    spec["resources"] = {"requests": requests or {}, "limits": limits or {}}
    return {"containers": [spec]}


def with_spec(client_id: str, **spec: Any) -> dict[str, Any]:
    return item(client_id=client_id, **spec)


def gang_member(client_id: str, gang: str, cardinality: str | None) -> dict[str, Any]:
    annotations = {GANG_ID: gang} | ({GANG_CARDINALITY: cardinality} if cardinality is not None else {})
    return {**item(client_id=client_id), "annotations": annotations}


# Item-level kinds: name -> (bad items for client-id stem, substrings every reason must contain).
ItemKind = tuple[Callable[[str], list[dict[str, Any]]], tuple[str, ...]]
ITEM_KINDS: dict[str, ItemKind] = {
    "missing requests": (
        lambda c: [with_spec(c, **resources(None, {"cpu": "1", "memory": "1Gi"}))],
        ("must set resources.requests and resources.limits", "missing: requests"),
    ),
    "missing limits": (
        lambda c: [with_spec(c, **resources({"cpu": "1", "memory": "1Gi"}, None))],
        ("must set resources.requests and resources.limits", "missing: limits"),
    ),
    "limits differ from requests": (
        lambda c: [with_spec(c, **resources({"cpu": "1", "memory": "1Gi"}, {"cpu": "2", "memory": "1Gi"}))],
        ("limits['cpu'] = '2' differs from requests['cpu'] = '1'", "limits must equal requests"),
    ),
    "limits name other resources": (
        lambda c: [with_spec(c, **resources({"cpu": "1", "memory": "1Gi"}, {"cpu": "1"}))],
        ("requests and limits must name the same resources", "only in requests: memory"),
    ),
    "unknown priority class": (
        lambda c: [with_spec(c, priority_class_name="platinum")],
        ("priority class 'platinum' is not one of", "armada-default"),
    ),
    "grace period above the maximum": (
        lambda c: [with_spec(c, termination_grace_period_seconds=301)],
        ("termination_grace_period_seconds 301 is above the maximum of 300 s",),
    ),
    "negative grace period": (
        lambda c: [with_spec(c, termination_grace_period_seconds=-5)],
        ("termination_grace_period_seconds -5 is negative",),
    ),
    "negative quantity": (
        lambda c: [with_spec(c, **resources({"cpu": "-1", "memory": "1Gi"}, {"cpu": "-1", "memory": "1Gi"}))],
        ("requests['cpu'] = '-1' is negative", "limits['cpu'] = '-1' is negative"),
    ),
    "non-numeric quantity": (
        lambda c: [with_spec(c, **resources({"cpu": "1", "memory": "lots"}, {"cpu": "1", "memory": "lots"}))],
        ("requests['memory'] = 'lots' is not a quantity",),
    ),
    "pod spec over 64 KiB": (
        lambda c: [with_spec(c, containers=[{**container(), "args": ["x" * 70_000]}])],
        ("pod spec is", f"over the limit of {load_scheduler_config(None).policy.max_pod_spec_bytes} bytes"),
    ),
    "gang members disagree on cardinality": (
        lambda c: [gang_member(f"{c}-a", f"g-{c}", "2"), gang_member(f"{c}-b", f"g-{c}", "3")],
        ("members disagree on gangCardinality (2, 3)",),
    ),
    "gang with more members than its cardinality": (
        lambda c: [gang_member(f"{c}-{m}", f"g-{c}", "2") for m in "abc"],
        ("3 members submitted but gangCardinality is 2",),
    ),
    "gang without cardinality": (
        lambda c: [gang_member(c, f"g-{c}", None)],
        ("annotation armadaproject.io/gangCardinality is missing",),
    ),
    "no containers": (lambda c: [with_spec(c, containers=[])], ("pod spec has no containers",)),
    "no pod spec": (lambda c: [{**item(client_id=c), "pod_spec": None}], ("pod_spec is missing",)),
    "negative priority": (lambda c: [{**item(client_id=c), "priority": -1.0}], ("priority -1.0 must be a finite number >= 0",)),
}

# Request-level kinds: every item is rejected with the same reason.
ENVELOPE_KINDS: dict[str, tuple[dict[str, str], tuple[str, ...]]] = {
    "unknown queue": ({"queue": "no-such-queue"}, ("queue 'no-such-queue' does not exist",)),
    "empty job set id": ({"job_set_id": ""}, ("job_set_id is empty",)),
    "empty queue name": ({"queue": ""}, ("queue is empty",)),
    "cordoned queue": ({"queue": CORDONED}, (f"queue '{CORDONED}' is cordoned",)),
}


def _wrong_schema(n: int) -> bytes:
    return encode("queue", {**KIT_QUEUE, "name": f"not-a-request-{n}"})


def _valid_bytes(n: int) -> bytes:
    return submission(submit_record(QUEUE, "raw", [item(client_id=f"never-{n}")]))[1]


# Message-level kinds: bytes straight to the topic -> (value, substrings of the one rejection).
RAW_KINDS: dict[str, tuple[Callable[[int], bytes | None], tuple[str, ...]]] = {
    "text": (lambda n: f"this is not avro #{n}".encode(), ("malformed submission", "unknown framing, first byte 0x74")),
    "json": (lambda n: json.dumps({"queue": QUEUE, "n": n}).encode(), ("malformed submission", "unknown framing, first byte 0x7b")),
    "avro of another schema": (_wrong_schema, ("malformed submission", "holds schema queue")),
    "truncated avro": (lambda n: _valid_bytes(n)[:40], ("malformed submission", "truncated or corrupt body")),
    "unknown writer schema": (lambda n: b"\xc3\x01" + bytes(8) + _valid_bytes(n)[10:], ("malformed submission", "unknown writer schema")),
    "unknown release of the first framing": (
        lambda n: b"\xf1\x63" + _valid_bytes(n)[10:],
        ("malformed submission", "unknown release 99 in an f1-framed message"),
    ),
    "Confluent framing without a registry": (
        lambda n: b"\x00\x00\x00\x00\x01" + _valid_bytes(n)[10:],
        ("malformed submission", "no schema registry is configured"),
    ),
    "empty value": (lambda n: b"", ("malformed submission", "truncated message of 0 byte(s)")),
    "tombstone": (lambda n: None, ("malformed submission",)),
}


@dataclass
class Bad:
    kind: str
    reasons: tuple[str, ...]
    request_id: str | None = None  # Avro submissions
    key: str | None = None  # raw messages: matched by their unique message key
    bad_indexes: list[int] = field(default_factory=list)


@dataclass
class Plan:
    messages: list[tuple[bytes | None, bytes | None]] = field(default_factory=list)
    bad: list[Bad] = field(default_factory=list)
    valid_client_ids: list[str] = field(default_factory=list)
    valid_request_ids: set[str] = field(default_factory=set)


def plan() -> Plan:
    """200 malformed submissions in rotation over every kind, with valid jobs between and beside them."""
    out = Plan()
    kinds = [("item", k) for k in ITEM_KINDS] + [("envelope", k) for k in ENVELOPE_KINDS] + [("raw", k) for k in RAW_KINDS]
    for n in range(MALFORMED):
        family, kind = kinds[n % len(kinds)]
        if family == "item":
            build, reasons = ITEM_KINDS[kind]
            bad_items = build(f"bad-{n}")
            good_items = [item(client_id=f"beside-{n}")] if n % 2 == 0 else []
            items = good_items + bad_items  # valid one first, then the bad ones, in one request
            record = submit_record(QUEUE, f"mixed-{n % 7}", items)
            out.bad.append(Bad(kind, reasons, request_id=record["request_id"], bad_indexes=list(range(len(good_items), len(items)))))
            out.valid_client_ids += [i["client_id"] for i in good_items]
            out.messages.append(submission(record))
        elif family == "envelope":
            overrides, reasons = ENVELOPE_KINDS[kind]
            record = {**submit_record(QUEUE, "envelope", [item(client_id=f"bad-{n}-a"), item(client_id=f"bad-{n}-b")]), **overrides}
            out.bad.append(Bad(kind, reasons, request_id=record["request_id"], bad_indexes=[0, 1]))
            out.messages.append((record["queue"].encode() or b"unnamed", encode("submit_request", record)))
        else:
            value_of, reasons = RAW_KINDS[kind]
            key = f"raw-{n}"
            out.bad.append(Bad(kind, reasons, key=key))
            out.messages.append((key.encode(), value_of(n)))
        if n % 2 == 1:  # a valid submission between the bad ones
            record = submit_record(QUEUE, f"valid-{n % 5}", [item(client_id=f"ok-{n}")])
            out.valid_client_ids.append(f"ok-{n}")
            out.valid_request_ids.add(record["request_id"])
            out.messages.append(submission(record))
    return out


@pytest.fixture(scope="module")
def queues(worker: Worker) -> None:
    create_queue(worker.client, QUEUE)
    create_queue(worker.client, CORDONED, cordoned=True)


def test_every_malformed_submission_is_rejected_with_its_reason_and_no_valid_job_is_lost(worker: Worker, queues: None) -> None:
    planned = plan()
    assert len(planned.bad) == MALFORMED
    assert {b.kind for b in planned.bad} == set(ITEM_KINDS) | set(ENVELOPE_KINDS) | set(RAW_KINDS)
    worker.produce("submissions", planned.messages)
    # a valid job behind all of them on the one partition: once it is queued, everything before was read
    sentinel = submit_record(QUEUE, "sentinel", [item(client_id="sentinel")])
    worker.produce("submissions", [submission(sentinel)])

    def sentinel_queued() -> dict[str, dict[str, Any]] | None:
        states = worker.job_states()
        return states if any(s["client_id"] == "sentinel" for s in states.values()) else None

    states = poll(sentinel_queued, 120, "the sentinel job on job-states (the worker stopped processing?)")

    # nothing lost: every valid job, between and beside the bad ones, is queued exactly once
    by_client: dict[str, list[dict[str, Any]]] = {}
    for state in states.values():
        by_client.setdefault(state["client_id"], []).append(state)
    lost = [c for c in planned.valid_client_ids if c not in by_client]
    assert not lost, f"{len(lost)} valid jobs never reached job-states: {lost[:5]}"
    assert all(len(by_client[c]) == 1 and by_client[c][0]["state"] == "queued" for c in planned.valid_client_ids)
    accepted_bad = sorted(c for c in by_client if c.startswith(("bad-", "never-")))
    assert not accepted_bad, f"malformed jobs were accepted: {accepted_bad[:5]}"
    assert set(by_client) == set(planned.valid_client_ids) | {"sentinel"}

    def table_complete() -> dict[str, dict[str, Any]] | None:
        table = worker.jobs_changelog()
        return table if len(table) >= len(states) else None

    table = poll(table_complete, 60, "every job in the jobs table")
    assert set(table) == set(states)

    # every malformed submission is answered on the rejected topic, with its reason
    def answered() -> list[dict[str, Any]] | None:
        found = worker.rejections()
        ids = {r["request_id"] for r in found} | {("key", r["request_key"]) for r in found}
        missing = [b for b in planned.bad if (b.request_id or ("key", b.key)) not in ids]
        return found if not missing else None

    rejections = poll(answered, 60, "a rejection for each of the 200 malformed submissions")
    by_request: dict[str, list[dict[str, Any]]] = {}
    by_key: dict[str, list[dict[str, Any]]] = {}
    for rejection in rejections:
        if rejection["request_id"] is not None:
            by_request.setdefault(rejection["request_id"], []).append(rejection)
        else:
            by_key.setdefault(rejection["request_key"], []).append(rejection)

    wrong: list[str] = []
    for bad in planned.bad:
        if bad.request_id is not None:
            answers = sorted(by_request.get(bad.request_id, []), key=lambda r: r["item_index"])
            if [r["item_index"] for r in answers] != bad.bad_indexes:
                wrong.append(f"{bad.kind}: rejected items {[r['item_index'] for r in answers]}, expected {bad.bad_indexes}")
        else:
            answers = by_key.get(bad.key or "", [])
            if len(answers) != 1:
                wrong.append(f"{bad.kind}: {len(answers)} rejections for message {bad.key}, expected 1")
        for answer in answers:
            missing = [text for text in bad.reasons if text not in answer["reason"]]
            if missing:
                wrong.append(f"{bad.kind}: reason {answer['reason']!r} does not say {missing}")
    assert not wrong, "\n".join(wrong[:20])
    assert not (set(by_request) & planned.valid_request_ids), "a valid submission was rejected"
    assert sentinel["request_id"] not in by_request

    # a raw rejection carries the bytes it refused, so an operator can see what was sent
    raw_payloads = {key.decode(): value for key, value in planned.messages if key and key.startswith(b"raw-")}
    for key, answers in by_key.items():
        if key in raw_payloads:
            assert answers[0]["payload"] == (raw_payloads[key] or b"")


def test_rest_answers_every_kind_of_bad_item_with_its_reason(worker: Worker, queues: None) -> None:
    expected: dict[str, int] = {}  # request id -> bad items
    for kind, (build, reasons) in ITEM_KINDS.items():
        stem = kind.replace(" ", "-")
        bad_items = build(f"rest-bad-{stem}")
        status, body = submit(worker.client, QUEUE, "rest-mixed", [item(client_id=f"rest-ok-{stem}")] + bad_items)
        assert status == 207, (kind, body)
        first, *rest = body["items"]
        assert first.get("job_id"), (kind, body)
        assert len(rest) == len(bad_items)
        for answer in rest:
            assert "job_id" not in answer, (kind, answer)
            assert all(text in answer["error"] for text in reasons), (kind, answer["error"], reasons)
        expected[body["request_id"]] = len(bad_items)

    # the same rejections reach the rejected topic under the request ids the API answered with
    def on_topic() -> dict[str, list[int]] | None:
        found: dict[str, list[int]] = {}
        for rejection in worker.rejections():
            if rejection["request_id"] in expected:
                found.setdefault(rejection["request_id"], []).append(rejection["item_index"])
        return found if all(len(found.get(r, [])) >= n for r, n in expected.items()) else None

    found = poll(on_topic, 30, "the rejections of the REST requests on the rejected topic")
    assert {r: sorted(indexes) for r, indexes in found.items()} == {r: list(range(1, n + 1)) for r, n in expected.items()}


def test_rest_answers_bad_requests_with_their_reason(worker: Worker, queues: None) -> None:
    for overrides, (expected_status, reason) in {
        (("queue", "no-such-queue"),): (422, "queue 'no-such-queue' does not exist"),
        (("job_set_id", ""),): (422, "job_set_id is empty"),
        (("queue", CORDONED),): (422, "is cordoned"),
    }.items():
        body: dict[str, Any] = {"queue": QUEUE, "job_set_id": "rest-envelope", "items": [item(), item()], **dict(overrides)}
        status, answer = call(worker.client, "POST", "/api/v1/jobs", body)
        assert status == expected_status, (overrides, answer)
        assert answer["job_ids"] == [None, None]
        assert all(reason in a["error"] for a in answer["items"]), (overrides, answer)

    # not representable in the Avro contract (a long): refused before it reaches the log
    status, answer = call(
        worker.client,
        "POST",
        "/api/v1/jobs",
        {
            "queue": QUEUE,
            "job_set_id": "rest-fraction",
            "items": [item(termination_grace_period_seconds=0.5)],
        },
    )
    assert status == 400, answer
    assert "termination_grace_period_seconds" in answer["error"]
    for body, reason in (
        ({"queue": QUEUE, "job_set_id": "s", "items": []}, "items must be a non-empty list"),
        ({"queue": QUEUE, "job_set_id": "s", "items": ["not an object"]}, "every item must be a JSON object"),
    ):
        status, answer = call(worker.client, "POST", "/api/v1/jobs", body)
        assert status == 400 and reason in answer["error"], answer
    status, answer = call(worker.client, "POST", "/api/v1/jobs", None)
    assert status == 400 and "not JSON" in answer["error"], answer

    # the worker still accepts work afterwards
    status, answer = submit(worker.client, QUEUE, "after", [item(client_id="after-bad-requests")])
    assert status == 200, answer


def test_a_submission_without_items_is_answered(worker: Worker, queues: None) -> None:
    """Principle 6: bad input is answered, never swallowed. The REST API refuses an empty item
    list with 400; the same request produced to the topic must get a rejection too."""
    empty = submit_record(QUEUE, "empty", [])
    worker.produce("submissions", [submission(empty)])
    sentinel = submit_record(QUEUE, "empty-sentinel", [item(client_id="empty-sentinel")])
    worker.produce("submissions", [submission(sentinel)])
    poll(
        lambda: any(s["client_id"] == "empty-sentinel" for s in worker.job_states().values()),
        60,
        "the job submitted after the empty request",
    )
    found = poll(
        lambda: [r for r in worker.rejections() if r["request_id"] == empty["request_id"]],
        10,
        f"a rejection of the submission without items ({empty['request_id']})",
    )
    assert "item" in found[0]["reason"]
