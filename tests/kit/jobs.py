"""Builders of queues, submit items, containers and job events, so each test shows only what it varies."""

from __future__ import annotations

import copy
from typing import Any

from streams.domain.jobs import apply_event
from streams.domain.validation import SubmitPolicy, validate_item

QUEUE = {
    "name": "team-a",
    "priority_factor": 1.0,
    "user_owners": [],
    "group_owners": [],
    "cordoned": False,
    "labels": {},
    "resource_limits_by_priority_class_name": {},
}
ENVELOPE = {"queue": "team-a", "job_set_id": "set-1", "user": "alice", "groups": []}


def container(
    name: str = "main", *, command: list[str] | None = None, args: list[str] | None = None, gpu: str | None = None, **resources: str
) -> dict[str, Any]:
    """A container requesting (and limited to) ``resources`` and ``gpu`` nvidia.com/gpu, 1 cpu and 1Gi when none are given."""
    amounts = resources if gpu is None else {**resources, "nvidia.com/gpu": gpu}
    amounts = amounts or {"cpu": "1", "memory": "1Gi"}
    built: dict[str, Any] = {
        "name": name,
        "image": "busybox:1.36",
        "resources": {"requests": dict(amounts), "limits": dict(amounts)},
    }
    if command is not None:
        built["command"] = command
    if args is not None:
        built["args"] = args
    return built


def item(**overrides: Any) -> dict[str, Any]:
    """A valid item; ``pod_spec__<field>`` overrides a pod spec field."""
    spec: dict[str, Any] = {"containers": [container()]}
    result: dict[str, Any] = {"client_id": None, "priority": 0.0, "annotations": {}, "pod_spec": spec}
    for key, value in overrides.items():
        if key.startswith("pod_spec__"):
            spec[key.removeprefix("pod_spec__")] = value
        else:
            result[key] = value
    return result


def request(*items: dict[str, Any], **envelope: Any) -> dict[str, Any]:
    return {"request_id": "req-1", **ENVELOPE, "items": list(items), **envelope}


def gang(gang_id: str, cardinality: str, label: str | None = None, **overrides: Any) -> dict[str, Any]:
    annotations = {"armadaproject.io/gangId": gang_id, "armadaproject.io/gangCardinality": cardinality}
    if label is not None:
        annotations["armadaproject.io/gangNodeUniformityLabel"] = label
    return item(annotations=annotations, **overrides)


class Events:
    """Makes events for one job with increasing ids and times."""

    def __init__(self, job_id: str = "job-1") -> None:
        self.job_id = job_id
        self.count = 0

    def __call__(self, kind: str, **payload: Any) -> tuple[str, dict[str, Any]]:
        self.count += 1
        return kind, {
            "event_id": f"{self.job_id}-e{self.count:03d}",
            "created": 1_000 * self.count,
            "job_id": self.job_id,
            "payload": copy.deepcopy(payload),
        }

    def submitted(self, payload: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        job, reason = validate_item(item(), SubmitPolicy())
        assert reason is None and job is not None
        return self("JobSubmitted", **(payload or job))

    def leased(self, run_id: str, node: str = "node-1") -> tuple[str, dict[str, Any]]:
        return self(
            "JobLeased",
            run_id=run_id,
            executor="cluster-1",
            node=node,
            pool="default",
            scheduled_at_priority=1000,
            cycle_id="cycle-1",
        )

    def run_failed(self, run_id: str | None, category: str = "container_error", exit_code: int | None = 1) -> tuple[str, dict[str, Any]]:
        return self(
            "JobRunFailed",
            run_id=run_id,
            reason="Error",
            message="exit code 1",
            exit_code=exit_code,
            category=category,
            retryable=category in ("lease_returned", "lease_expired"),
        )


def fold(events: list[tuple[str, dict[str, Any]]], job: dict[str, Any] | None = None) -> dict[str, Any]:
    """``job`` after ``events``; a job that does not exist yet must be submitted by the first."""
    for kind, event in events:
        job = apply_event(job, kind, event, ENVELOPE)
    assert job is not None, "events about a job never submitted"
    return job
