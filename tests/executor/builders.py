"""Leases shaped as the control plane sends them: the spec is a validated JobSubmitted payload."""

from __future__ import annotations

import itertools
from typing import Any

from executor.backend import Lease
from streams.domain.validation import SubmitPolicy, validate_item

_runs = itertools.count()


def job_spec(
    command: list[str] | None = None,
    args: list[str] | None = None,
    env: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    **pod_spec: Any,
) -> dict[str, Any]:
    container = {
        "name": "main",
        "image": "busybox:1.36",
        "command": ["sh", "-c"] if command is None else command,
        "args": ["true"] if args is None else args,
        "env": [{"name": k, "value": v} for k, v in (env or {}).items()],
        "resources": {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"cpu": "1", "memory": "1Gi"}},
    }
    item = {"priority": 0.0, "annotations": annotations or {}, "pod_spec": {"containers": [container], **pod_spec}}
    spec, problem = validate_item(item, SubmitPolicy())
    assert spec is not None, problem
    return spec


def lease(spec: dict[str, Any] | None = None, node: str = "node-0", run_id: str | None = None, job_set_id: str = "set-a") -> Lease:
    number = next(_runs)
    return Lease(
        job_id=f"job-{number:06d}",
        run_id=run_id or f"run-{number:06d}",
        queue="queue-a",
        job_set_id=job_set_id,
        node=node,
        spec=job_spec() if spec is None else spec,
    )
