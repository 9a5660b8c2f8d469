"""Complete job-spec records (the Avro ``JobItem``/``PodSpec`` in schemas/) from possibly partial dicts.

Items decoded by fastavro already carry every field, but items built by the REST API, the CLI or
tests often omit defaults. Validation works on the completed form so that the ``JobSubmitted``
payload it emits always has every field the Avro schema needs. A pod spec given whole travels as
its `manifest` (``streams.domain.podspec``); the fields beside it are the contract's typed subset.
"""

from __future__ import annotations

from typing import Any

from streams.domain.podspec import manifest_text


def _list(source: dict[str, Any], key: str) -> list[Any]:
    return list(source.get(key) or [])


def _map(source: dict[str, Any], key: str) -> dict[str, Any]:
    return dict(source.get(key) or {})


def container(raw: dict[str, Any]) -> dict[str, Any]:
    resources = raw.get("resources") or {}
    return {
        "name": raw.get("name") or "",
        "image": raw.get("image") or "",
        "command": _list(raw, "command"),
        "args": _list(raw, "args"),
        "env": [{"name": e["name"], "value": e.get("value") or ""} for e in _list(raw, "env")],
        "working_dir": raw.get("working_dir"),
        "resources": {"requests": _map(resources, "requests"), "limits": _map(resources, "limits")},
        "ports": [
            {
                "container_port": p["container_port"],
                "protocol": p.get("protocol") or "TCP",
                "name": p.get("name"),
            }
            for p in _list(raw, "ports")
        ],
    }


def _toleration(raw: dict[str, Any]) -> dict[str, Any]:
    return {k: raw.get(k) for k in ("key", "operator", "value", "effect", "toleration_seconds")}


def _affinity(raw: dict[str, Any] | None) -> dict[str, Any] | None:
    if raw is None:
        return None
    node = raw.get("node_affinity")
    if node is None:
        return {"node_affinity": None}
    terms = [
        {
            "match_expressions": [
                {"key": e["key"], "operator": e["operator"], "values": list(e.get("values") or [])}
                for e in term.get("match_expressions") or []
            ]
        }
        for term in node.get("required") or []
    ]
    return {"node_affinity": {"required": terms}}


def pod_spec(raw: dict[str, Any]) -> dict[str, Any]:
    return {
        "containers": [container(c) for c in _list(raw, "containers")],
        "init_containers": [container(c) for c in _list(raw, "init_containers")],
        "node_selector": _map(raw, "node_selector"),
        "tolerations": [_toleration(t) for t in _list(raw, "tolerations")],
        "affinity": _affinity(raw.get("affinity")),
        "termination_grace_period_seconds": raw.get("termination_grace_period_seconds"),
        "active_deadline_seconds": raw.get("active_deadline_seconds"),
        "priority_class_name": raw.get("priority_class_name"),
        "restart_policy": raw.get("restart_policy"),
        "service_account_name": raw.get("service_account_name"),
        "manifest": manifest_text(raw.get("manifest")),
    }


def _service(raw: dict[str, Any]) -> dict[str, Any]:
    return {"type": raw.get("type") or "", "ports": _list(raw, "ports"), "name": raw.get("name")}


def _ingress(raw: dict[str, Any]) -> dict[str, Any]:
    return {
        "ports": _list(raw, "ports"),
        "annotations": _map(raw, "annotations"),
        "tls_enabled": bool(raw.get("tls_enabled", False)),
        "cert_name": raw.get("cert_name"),
        "use_cluster_ip": bool(raw.get("use_cluster_ip", False)),
    }


def job_item(raw: dict[str, Any]) -> dict[str, Any]:
    """The item with every contract field present; ``pod_spec`` stays ``None`` when absent."""
    spec = raw.get("pod_spec")
    return {
        "client_id": raw.get("client_id") or None,
        "priority": raw.get("priority", 0.0),
        "namespace": raw.get("namespace") or "default",
        "labels": _map(raw, "labels"),
        "annotations": _map(raw, "annotations"),
        "pod_spec": None if spec is None else pod_spec(spec),
        "services": [_service(s) for s in _list(raw, "services")],
        "ingresses": [_ingress(i) for i in _list(raw, "ingresses")],
    }


def is_complete(item: dict[str, Any]) -> bool:
    """Whether ``job_item`` would give back an item equal to ``item``, one read from the log (every
    field there, of its contract's type): it would only fill in the empty client id, namespace and
    port protocols, and copy the rest."""
    spec = item["pod_spec"]
    if item["client_id"] == "" or not item["namespace"] or spec is None:
        return False
    return all(port["protocol"] for container in (*spec["containers"], *spec["init_containers"]) for port in container["ports"])
