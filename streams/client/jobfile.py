"""Armada job files (YAML: `queue`, `jobSetId`, `jobs:` with camelCase pod specs) to submit requests.

The job file is the user's format; the submit request (snake_case, the Avro contract) is the wire
format. A job's pod spec goes whole, as its manifest: the cluster gets every field its author wrote.
Fields of the job outside the contract are refused by name rather than dropped.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import yaml

from streams.domain.podspec import PodSpecError, read_fields


class JobFileError(ValueError):
    """A job file that cannot be turned into a submit request; the message names the field."""


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


_SERVICE = {"type": ("type", _same), "ports": ("ports", _same), "name": ("name", _same)}
_INGRESS = {
    "ports": ("ports", _same),
    "annotations": ("annotations", _strings),
    "tlsEnabled": ("tls_enabled", _same),
    "certName": ("cert_name", _same),
    "useClusterIP": ("use_cluster_ip", _same),
}


def _pod_spec(where: str, job: dict[str, Any]) -> dict[str, Any] | None:
    """The job's pod spec, whole: it travels as its manifest, and the server reads what it needs
    from it (``streams.domain.podspec``), which is also run here to name a malformed field at once."""
    if "podSpec" in job and "podSpecs" in job:
        raise JobFileError(f"{where}: give podSpec or podSpecs, not both")
    if "podSpecs" in job:
        specs = _list(f"{where}.podSpecs", job["podSpecs"])
        if len(specs) != 1:
            raise JobFileError(f"{where}.podSpecs: exactly one pod spec per job is supported, got {len(specs)}")
        where, spec = f"{where}.podSpecs[0]", specs[0]
    elif job.get("podSpec") is None:
        return None
    else:
        where, spec = f"{where}.podSpec", job["podSpec"]
    manifest = _mapping(where, spec)
    try:
        read_fields(manifest)
    except PodSpecError as exc:
        raise JobFileError(f"{where}.{str(exc).removeprefix('pod spec: ')}") from exc
    return {"manifest": manifest}


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
