"""Armada job files (YAML: `queue`, `jobSetId`, `jobs:` with camelCase pod specs) to submit requests.

The job file is the user's format; the submit request (snake_case, the Avro contract) is the wire
format. Fields Flotilla does not carry are refused by name rather than dropped, so a job never runs
without something its author asked for.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import yaml


class JobFileError(ValueError):
    """A job file that cannot be turned into a submit request; the message names the field."""


def _quantities(where: str, value: Any) -> dict[str, str]:
    """YAML writes `cpu: 1` as a number; the contract carries quantity strings."""
    mapping = _mapping(where, value)
    return {str(k): v if isinstance(v, str) else _number_text(f"{where}.{k}", v) for k, v in mapping.items()}


def _number_text(where: str, value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise JobFileError(f"{where}: {value!r} is not a quantity")
    return str(value)


def _strings(where: str, value: Any) -> dict[str, str]:
    mapping = _mapping(where, value)
    return {str(k): "" if v is None else str(v) for k, v in mapping.items()}


def _mapping(where: str, value: Any) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise JobFileError(f"{where}: expected a mapping, got {type(value).__name__}")
    return value


def _list(where: str, value: Any) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise JobFileError(f"{where}: expected a list, got {type(value).__name__}")
    return value


def _fields(where: str, raw: Any, spec: Mapping[str, tuple[str, Callable[[str, Any], Any]]]) -> dict[str, Any]:
    """Rename camelCase keys by `spec` (name -> (snake name, converter)); unknown keys are errors."""
    mapping = _mapping(where, raw)
    unknown = sorted(set(mapping) - set(spec))
    if unknown:
        raise JobFileError(f"{where}: unsupported field(s) {', '.join(unknown)} (supported: {', '.join(sorted(spec))})")
    return {spec[key][0]: spec[key][1](f"{where}.{key}", value) for key, value in mapping.items()}


def _same(_where: str, value: Any) -> Any:
    return value


def _records(spec: Mapping[str, tuple[str, Callable[[str, Any], Any]]]) -> Callable[[str, Any], list[dict[str, Any]]]:
    def convert(where: str, value: Any) -> list[dict[str, Any]]:
        return [_fields(f"{where}[{i}]", item, spec) for i, item in enumerate(_list(where, value))]

    return convert


def _record(spec: Mapping[str, tuple[str, Callable[[str, Any], Any]]]) -> Callable[[str, Any], dict[str, Any] | None]:
    def convert(where: str, value: Any) -> dict[str, Any] | None:
        return None if value is None else _fields(where, value, spec)

    return convert


_RESOURCES = {"requests": ("requests", _quantities), "limits": ("limits", _quantities)}
_CONTAINER = {
    "name": ("name", _same),
    "image": ("image", _same),
    "command": ("command", _same),
    "args": ("args", _same),
    "env": ("env", _records({"name": ("name", _same), "value": ("value", _same)})),
    "workingDir": ("working_dir", _same),
    "resources": ("resources", _record(_RESOURCES)),
    "ports": (
        "ports",
        _records({"containerPort": ("container_port", _same), "protocol": ("protocol", _same), "name": ("name", _same)}),
    ),
    "imagePullPolicy": ("image_pull_policy", _same),
}
_TOLERATION = {
    "key": ("key", _same),
    "operator": ("operator", _same),
    "value": ("value", _same),
    "effect": ("effect", _same),
    "tolerationSeconds": ("toleration_seconds", _same),
}
_EXPRESSION = {"key": ("key", _same), "operator": ("operator", _same), "values": ("values", _same)}
_NODE_AFFINITY = {
    "requiredDuringSchedulingIgnoredDuringExecution": (
        "required",
        lambda where, value: _fields(
            where, value, {"nodeSelectorTerms": ("terms", _records({"matchExpressions": ("match_expressions", _records(_EXPRESSION))}))}
        ).get("terms", []),
    ),
}
_POD_SPEC = {
    "containers": ("containers", _records(_CONTAINER)),
    "initContainers": ("init_containers", _records(_CONTAINER)),
    "nodeSelector": ("node_selector", _strings),
    "tolerations": ("tolerations", _records(_TOLERATION)),
    "affinity": ("affinity", _record({"nodeAffinity": ("node_affinity", _record(_NODE_AFFINITY))})),
    "terminationGracePeriodSeconds": ("termination_grace_period_seconds", _same),
    "activeDeadlineSeconds": ("active_deadline_seconds", _same),
    "priorityClassName": ("priority_class_name", _same),
    "restartPolicy": ("restart_policy", _same),
    "serviceAccountName": ("service_account_name", _same),
}
_SERVICE = {"type": ("type", _same), "ports": ("ports", _same), "name": ("name", _same)}
_INGRESS = {
    "ports": ("ports", _same),
    "annotations": ("annotations", _strings),
    "tlsEnabled": ("tls_enabled", _same),
    "certName": ("cert_name", _same),
    "useClusterIP": ("use_cluster_ip", _same),
}


def _pod_spec(where: str, job: dict[str, Any]) -> dict[str, Any] | None:
    if "podSpec" in job and "podSpecs" in job:
        raise JobFileError(f"{where}: give podSpec or podSpecs, not both")
    if "podSpecs" in job:
        specs = _list(f"{where}.podSpecs", job["podSpecs"])
        if len(specs) != 1:
            raise JobFileError(f"{where}.podSpecs: exactly one pod spec per job is supported, got {len(specs)}")
        return _fields(f"{where}.podSpecs[0]", specs[0], _POD_SPEC)
    if job.get("podSpec") is None:
        return None
    return _fields(f"{where}.podSpec", job["podSpec"], _POD_SPEC)


_JOB = {
    "priority": ("priority", _same),
    "namespace": ("namespace", _same),
    "clientId": ("client_id", _same),
    "labels": ("labels", _strings),
    "annotations": ("annotations", _strings),
    "services": ("services", _records(_SERVICE)),
    "ingress": ("ingresses", _records(_INGRESS)),
}


def job_item(where: str, raw: Any) -> dict[str, Any]:
    job = _mapping(where, raw)
    rest = {k: v for k, v in job.items() if k not in ("podSpec", "podSpecs")}
    item = _fields(where, rest, _JOB)
    item["pod_spec"] = _pod_spec(where, job)
    return item


def parse_job_file(document: Any) -> dict[str, Any]:
    """The submit request body (without request id or user) for one Armada job file document."""
    top = _mapping("job file", document)
    unknown = sorted(set(top) - {"queue", "jobSetId", "jobs"})
    if unknown:
        raise JobFileError(f"job file: unsupported field(s) {', '.join(unknown)} (expected queue, jobSetId, jobs)")
    for required in ("queue", "jobSetId", "jobs"):
        if not top.get(required):
            raise JobFileError(f"job file: missing {required}")
    jobs = _list("jobs", top["jobs"])
    return {
        "queue": str(top["queue"]),
        "job_set_id": str(top["jobSetId"]),
        "items": [job_item(f"jobs[{i}]", job) for i, job in enumerate(jobs)],
    }


def load_job_file(text: str) -> dict[str, Any]:
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise JobFileError(f"job file is not valid YAML: {exc}") from exc
    return parse_job_file(document)
