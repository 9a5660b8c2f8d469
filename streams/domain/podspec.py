"""A Kubernetes pod spec as users write it, and the fields Flotilla reads from it: the one conversion
every way in shares (REST, gRPC, job files and producers of the submissions topic alike).

A job's pod spec travels whole, as JSON in the Kubernetes API's field names (the `manifest` of
`schemas/pod_spec.avsc`), and the Kubernetes executor creates the pod from it: volumes, security
contexts, probes, `env.valueFrom` and every other field reach the cluster as they came. Flotilla
itself reads a few fields, to validate, schedule and run the job (containers and their resources,
node selector, tolerations, required node affinity, priority class, grace period, deadline...);
submission derives them from the manifest here, so what the scheduler reads and what the cluster
runs cannot disagree. Fields that would break scheduling or security are refused with the reason,
never dropped.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

# Fields Flotilla sets itself on the pod it creates, refused when a job sets them.
REFUSED = {
    "nodeName": "the scheduler binds the pod to the node it chooses (select nodes with nodeSelector, affinity or tolerations)",
}
# A pod in the node's network, process or IPC namespace sees and reaches what other jobs run there.
HOST_NAMESPACES = ("hostNetwork", "hostPID", "hostIPC")


# One encoder for every manifest: `json.dumps` with options builds one per call (~1.5 us of a gRPC item's ~40).
_MANIFEST_JSON = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode


class PodSpecError(ValueError):
    """A pod spec Flotilla cannot take; the message names the field."""


def manifest_text(value: Any) -> str | None:
    """The manifest as carried on the log: JSON text. Callers give the spec itself or its text."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, Mapping):
        return _MANIFEST_JSON(value)
    raise TypeError(f"pod_spec.manifest must be a Kubernetes pod spec (an object) or its JSON text, not {type(value).__name__}")


def parse_manifest(text: str) -> dict[str, Any]:
    try:
        spec = json.loads(text)
    except json.JSONDecodeError as exc:
        raise PodSpecError(f"pod spec: the manifest is not JSON: {exc}") from exc
    if not isinstance(spec, dict):
        raise PodSpecError(f"pod spec: the manifest must be a JSON object (a Kubernetes PodSpec), not {type(spec).__name__}")
    return spec


def refusals(spec: Mapping[str, Any], allow_host_namespaces: bool) -> list[str]:
    """Why fields of ``spec`` cannot be taken (empty when they all can)."""
    problems = [f"pod spec field {field} is refused: {why}" for field, why in REFUSED.items() if spec.get(field)]
    if not allow_host_namespaces:
        problems += [
            f"pod spec field {field} is refused: the scheduler's configuration forbids host namespaces (submission.allowHostNamespaces)"
            for field in HOST_NAMESPACES
            if spec.get(field) is True
        ]
    return problems


def read_fields(spec: Mapping[str, Any]) -> dict[str, Any]:
    """The fields Flotilla reads, in the snake_case shape of `schemas/pod_spec.avsc` (without the
    manifest); ``PodSpecError`` names a field whose shape Kubernetes would refuse too."""
    return {
        "containers": [_container(f"containers[{i}]", c) for i, c in enumerate(_list("containers", spec.get("containers")))],
        "init_containers": [
            _container(f"initContainers[{i}]", c) for i, c in enumerate(_list("initContainers", spec.get("initContainers")))
        ],
        "node_selector": _strings("nodeSelector", spec.get("nodeSelector")),
        "tolerations": [_toleration(f"tolerations[{i}]", t) for i, t in enumerate(_list("tolerations", spec.get("tolerations")))],
        "affinity": _affinity(spec.get("affinity")),
        "termination_grace_period_seconds": spec.get("terminationGracePeriodSeconds"),
        "active_deadline_seconds": spec.get("activeDeadlineSeconds"),
        "priority_class_name": _optional_text("priorityClassName", spec.get("priorityClassName")),
        "restart_policy": _optional_text("restartPolicy", spec.get("restartPolicy")),
        "service_account_name": _optional_text("serviceAccountName", spec.get("serviceAccountName")),
    }


def _container(where: str, raw: Any) -> dict[str, Any]:
    container = _mapping(where, raw)
    resources = _mapping(f"{where}.resources", container.get("resources"))
    return {
        "name": _optional_text(f"{where}.name", container.get("name")) or "",
        "image": _optional_text(f"{where}.image", container.get("image")) or "",
        "command": [str(part) for part in _list(f"{where}.command", container.get("command"))],
        "args": [str(part) for part in _list(f"{where}.args", container.get("args"))],
        # Variables whose value comes from elsewhere (valueFrom) exist only in the cluster: Kubernetes fills them in.
        "env": [
            {"name": str(env.get("name") or ""), "value": "" if env.get("value") is None else str(env["value"])}
            for env in (_mapping(f"{where}.env[{i}]", e) for i, e in enumerate(_list(f"{where}.env", container.get("env"))))
            if "valueFrom" not in env
        ],
        "working_dir": _optional_text(f"{where}.workingDir", container.get("workingDir")),
        "resources": {
            "requests": _quantities(f"{where}.resources.requests", resources.get("requests")),
            "limits": _quantities(f"{where}.resources.limits", resources.get("limits")),
        },
        "ports": [
            {"container_port": port.get("containerPort"), "protocol": port.get("protocol") or "TCP", "name": port.get("name")}
            for port in (_mapping(f"{where}.ports[{i}]", p) for i, p in enumerate(_list(f"{where}.ports", container.get("ports"))))
        ],
    }


def _toleration(where: str, raw: Any) -> dict[str, Any]:
    toleration = _mapping(where, raw)
    return {
        "key": toleration.get("key"),
        "operator": toleration.get("operator"),
        "value": toleration.get("value"),
        "effect": toleration.get("effect"),
        "toleration_seconds": toleration.get("tolerationSeconds"),
    }


def _affinity(raw: Any) -> dict[str, Any] | None:
    """Required node affinity, the part of an affinity the scheduler matches nodes by (pod affinity
    and preferences are the cluster's to apply)."""
    affinity = _mapping("affinity", raw)
    node = _mapping("affinity.nodeAffinity", affinity.get("nodeAffinity"))
    required = _mapping(
        "affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution", node.get("requiredDuringSchedulingIgnoredDuringExecution")
    )
    where = "affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms"
    terms = [_mapping(f"{where}[{i}]", term) for i, term in enumerate(_list(where, required.get("nodeSelectorTerms")))]
    if not terms:
        return None
    return {
        "node_affinity": {
            "required": [
                {
                    "match_expressions": [
                        {
                            "key": expression.get("key"),
                            "operator": expression.get("operator"),
                            "values": list(expression.get("values") or []),
                        }
                        for expression in (
                            _mapping(f"{where}[{i}].matchExpressions[{j}]", e)
                            for j, e in enumerate(_list(f"{where}[{i}].matchExpressions", term.get("matchExpressions")))
                        )
                    ]
                }
                for i, term in enumerate(terms)
            ]
        }
    }


def _quantities(where: str, raw: Any) -> dict[str, str]:
    """YAML and JSON write ``cpu: 1`` as a number; Flotilla carries quantity strings."""
    return {
        str(name): value if isinstance(value, str) else _number_text(f"{where}.{name}", value)
        for name, value in _mapping(where, raw).items()
    }


def _number_text(where: str, value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise PodSpecError(f"pod spec: {where}: {value!r} is not a quantity")
    return str(value)


def _strings(where: str, raw: Any) -> dict[str, str]:
    found = _mapping(where, raw)
    for key, value in found.items():
        if not isinstance(value, str):
            raise PodSpecError(f"pod spec: {where}[{key!r}] = {value!r} must be a string")
    return dict(found)


def _optional_text(where: str, value: Any) -> str | None:
    if value is not None and not isinstance(value, str):
        raise PodSpecError(f"pod spec: {where}: expected a string, got {value!r}")
    return value


def _mapping(where: str, value: Any) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise PodSpecError(f"pod spec: {where}: expected an object, got {type(value).__name__}")
    return value


def _list(where: str, value: Any) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise PodSpecError(f"pod spec: {where}: expected a list, got {type(value).__name__}")
    return value
