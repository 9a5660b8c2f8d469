"""What the domain produces must be writable with the Avro contract and read back unchanged."""

import json

from hypothesis import given, settings

from schemas import codec
from streams.domain import jobspec
from streams.domain.queues import validate_queue
from streams.domain.validation import SubmitPolicy, validate_request
from streams.domain.views import job_view
from tests.domain.test_idempotency import accepted_sequence, actions, fold
from tests.kit.jobs import ENVELOPE, QUEUE, container, gang, item, request


def round_trip(name, record):
    assert codec.decode(name, codec.encode(name, record)) == record


def rich_item():
    main = {
        **container(cpu="2", memory="4Gi", gpu="1"),
        "command": ["python"],
        "args": ["-c", "print(1)"],
        "env": [{"name": "A", "value": "1"}],
        "working_dir": "/work",
        "ports": [{"container_port": 8080}],
    }
    return item(
        client_id="c-1",
        priority=3,
        labels={"team": "ml"},
        services=[{"type": "Headless", "ports": [8080]}],
        ingresses=[{"ports": [8080], "tls_enabled": True}],
        pod_spec__containers=[main],
        pod_spec__init_containers=[{"name": "setup", "image": "busybox"}],
        pod_spec__node_selector={"zone": "a"},
        pod_spec__tolerations=[{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}],
        pod_spec__affinity={
            "node_affinity": {"required": [{"match_expressions": [{"key": "zone", "operator": "NotIn", "values": ["b"]}]}]}
        },
        pod_spec__restart_policy="Never",
    )


def test_submitted_payloads_encode_as_event_payloads():
    results = validate_request(request(rich_item(), gang("g", "2", "zone"), gang("g", "2", "zone")), QUEUE, SubmitPolicy())
    assert all(r.accepted for r in results)
    events = [
        {"event_id": f"e{i}", "created": i, "job_id": f"j{i}", "payload": ("flotilla.JobSubmitted", r.job)} for i, r in enumerate(results)
    ]
    round_trip("event_sequence", {**ENVELOPE, "events": events})


def test_normalised_items_are_complete_submit_request_items():
    """An API can complete a partial JSON item with jobspec.job_item and produce it as Avro."""
    raw = rich_item()
    raw["priority"] = 3.0
    round_trip("submit_request", {**request(), "items": [jobspec.job_item(raw), jobspec.job_item(item(pod_spec=None))]})


def test_normalised_queue_encodes():
    limits = {
        "armada-default": {"maximum_resource_fraction": {"cpu": 0.5}, "maximum_resource_fraction_by_pool": {"gpu": {"nvidia.com/gpu": 1}}}
    }
    queue, reason = validate_queue(
        {"name": "team-a", "priority_factor": 2, "user_owners": ["a"], "resource_limits_by_priority_class_name": limits}
    )
    assert reason is None
    round_trip("queue", queue)


@settings(max_examples=150, deadline=None)
@given(actions)
def test_every_folded_job_state_and_its_events_encode(steps):
    history = accepted_sequence(steps)
    job = fold(history)
    round_trip("job_state", {key: value for key, value in job.items() if key != "spec"})  # the spec is stored on its own
    round_trip("job_submitted", job["spec"])
    events = [{**event, "payload": ("flotilla." + kind, event["payload"])} for kind, event in history]
    round_trip("event_sequence", {**ENVELOPE, "events": events})
    json.dumps(job_view(job))
