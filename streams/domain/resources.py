"""A job's resource request in milli-units, the figure the scheduler packs onto nodes."""

from __future__ import annotations

from typing import Any

from streams.domain.quantity import to_milli


def container_request(container: dict[str, Any]) -> dict[str, int]:
    requests = (container.get("resources") or {}).get("requests") or {}
    return {name: to_milli(value) for name, value in requests.items()}


def job_resource_request(pod_spec: dict[str, Any]) -> dict[str, int]:
    """Sum over containers, raised to any larger init container, per resource.

    Init containers run one at a time before the main containers, so Kubernetes reserves the
    larger of their biggest single request and the main containers' sum.
    """
    total: dict[str, int] = {}
    for container in pod_spec.get("containers") or []:
        for name, milli in container_request(container).items():
            total[name] = total.get(name, 0) + milli
    for container in pod_spec.get("init_containers") or []:
        for name, milli in container_request(container).items():
            total[name] = max(total.get(name, 0), milli)
    return total
