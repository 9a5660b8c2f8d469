"""Kubernetes objects for a lease: the job's pod, its services and its ingresses.

Pure functions from a ``Lease`` (whose spec is the JobSubmitted payload, snake_case as in
``schemas/``) to API manifests (camelCase dicts, as on the wire), so what Flotilla asks of a
cluster can be read and tested without one. A pod spec given whole (its ``manifest``) becomes the
pod as given, with what Flotilla decides put in; only a spec without one is built from the fields.
Names derive from the run id only, which makes a replayed lease create the same objects again,
and the API server's 409 Conflict tells the backend it already did.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

from executor.backend import Lease

PREFIX = "flotilla.io/"
JOB_ID = PREFIX + "job-id"
RUN_ID = PREFIX + "run-id"
QUEUE = PREFIX + "queue"
JOB_SET = PREFIX + "job-set"
EXECUTOR = PREFIX + "executor"

_LABEL_VALUE = re.compile(r"^(?:[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")
_NOT_IN_LABEL = re.compile(r"[^-A-Za-z0-9_.]")
_NOT_IN_NAME = re.compile(r"[^-a-z0-9]")


def _digest(text: str, length: int = 10) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:length]


def label_value(text: str) -> str:
    """``text`` if Kubernetes accepts it as a label value, else a readable, collision-safe stand-in.

    Queue and job-set names are free text; a label must be at most 63 characters of
    ``[-A-Za-z0-9_.]`` starting and ending alphanumeric. The stand-in keeps a cleaned prefix and
    adds a digest of the original, so two names never share a label; the original itself is kept
    in the annotation of the same key.
    """
    if _LABEL_VALUE.match(text):
        return text
    cleaned = _NOT_IN_LABEL.sub("-", text)[:52].strip("-_.")
    return f"{cleaned}-{_digest(text)}" if cleaned else _digest(text)


def pod_name(run_id: str) -> str:
    """The pod's name, a DNS label derived from the run id alone (so replays are idempotent).

    Run ids are a job id (a ULID, whose alphabet is case-insensitive) and an attempt number,
    ``<ULID>-<n>``, so lower-casing one is lossless and leaves a DNS label; any other id is
    cleaned and given a digest to stay unique. Short enough (at most 50 characters)
    that service and ingress names built on it stay valid DNS labels.
    """
    lowered = run_id.lower()
    cleaned = _NOT_IN_NAME.sub("-", lowered).strip("-")
    if cleaned == lowered and len(cleaned) <= 40:
        return f"flotilla-{cleaned}"
    return f"flotilla-{cleaned[:29].strip('-')}-{_digest(run_id)}"


def _without_none(values: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in values.items() if value is not None and value != [] and value != {}}


def _container(spec: dict[str, Any]) -> dict[str, Any]:
    resources = spec.get("resources") or {}
    return _without_none(
        {
            "name": spec["name"],
            "image": spec["image"],
            "command": list(spec.get("command") or []),
            "args": list(spec.get("args") or []),
            "env": [{"name": env["name"], "value": env["value"]} for env in spec.get("env") or []],
            "workingDir": spec.get("working_dir"),
            "resources": _without_none({"requests": dict(resources.get("requests") or {}), "limits": dict(resources.get("limits") or {})}),
            "ports": [
                _without_none(
                    {"containerPort": port["container_port"], "protocol": port.get("protocol") or "TCP", "name": port.get("name")}
                )
                for port in spec.get("ports") or []
            ],
        }
    )


def _toleration(spec: dict[str, Any]) -> dict[str, Any]:
    return _without_none(
        {
            "key": spec.get("key"),
            "operator": spec.get("operator"),
            "value": spec.get("value"),
            "effect": spec.get("effect"),
            "tolerationSeconds": spec.get("toleration_seconds"),
        }
    )


def _affinity(spec: dict[str, Any] | None) -> dict[str, Any] | None:
    terms = ((spec or {}).get("node_affinity") or {}).get("required") or []
    if not terms:
        return None
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            _without_none({"key": expr["key"], "operator": expr["operator"], "values": list(expr.get("values") or [])})
                            for expr in term.get("match_expressions") or []
                        ]
                    }
                    for term in terms
                ]
            }
        }
    }


def identity(lease: Lease, executor_id: str) -> tuple[dict[str, str], dict[str, str]]:
    """Flotilla's labels (selectable, label-safe) and annotations (the exact originals)."""
    originals = {JOB_ID: lease.job_id, RUN_ID: lease.run_id, QUEUE: lease.queue, JOB_SET: lease.job_set_id}
    labels = {key: label_value(value) for key, value in originals.items()}
    labels[EXECUTOR] = label_value(executor_id)
    return labels, originals


def pod_manifest(lease: Lease, executor_id: str, namespace: str) -> dict[str, Any]:
    """The job's pod, bound to the leased node.

    ``nodeName`` bypasses kube-scheduler as Armada does: Flotilla's scheduler already chose the
    node, and a second opinion could only disagree. The kubelet still checks resources, node
    selector and affinity when it admits the pod. ``restartPolicy`` is always Never: a run is
    one attempt, and retrying is the control plane's decision. The Flotilla priority class is a
    scheduler concept and is not passed on as a Kubernetes priority class.
    """
    spec = lease.spec
    pod = spec.get("pod_spec") or {}
    labels, originals = identity(lease, executor_id)
    given = pod.get("manifest")
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": pod_name(lease.run_id),
            "namespace": namespace,
            "labels": {**(spec.get("labels") or {}), **labels},
            "annotations": {**(spec.get("annotations") or {}), **originals},
        },
        "spec": _whole(json.loads(given), pod, lease.node)
        if given
        else _without_none(
            {
                "nodeName": lease.node,
                "restartPolicy": "Never",
                "containers": [_container(container) for container in pod.get("containers") or []],
                "initContainers": [_container(container) for container in pod.get("init_containers") or []],
                "nodeSelector": dict(pod.get("node_selector") or {}),
                "tolerations": [_toleration(toleration) for toleration in pod.get("tolerations") or []],
                "affinity": _affinity(pod.get("affinity")),
                "terminationGracePeriodSeconds": pod.get("termination_grace_period_seconds"),
                "activeDeadlineSeconds": pod.get("active_deadline_seconds"),
                "serviceAccountName": pod.get("service_account_name"),
            }
        ),
    }


def _whole(given: dict[str, Any], pod: dict[str, Any], node: str) -> dict[str, Any]:
    """The pod spec as the user gave it (every field: volumes, security contexts, probes...), with
    what Flotilla decides put in: the node, no restarts, the grace period and deadline submission
    settled, and no priority class (Flotilla's classes are not Kubernetes')."""
    decided = {
        "nodeName": node,
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": pod.get("termination_grace_period_seconds"),
        "activeDeadlineSeconds": pod.get("active_deadline_seconds"),
    }
    whole = {key: value for key, value in given.items() if key != "priorityClassName"}
    return {**whole, **{key: value for key, value in decided.items() if value is not None}}


def _owned_metadata(name: str, namespace: str, lease: Lease, executor_id: str, owner: tuple[str, str]) -> dict[str, Any]:
    """Metadata that ties an object to the pod: Kubernetes' garbage collector deletes it with the
    pod, and the run labels find it should the owner reference ever be missing."""
    labels, originals = identity(lease, executor_id)
    pod, uid = owner
    return {
        "name": name,
        "namespace": namespace,
        "labels": labels,
        "annotations": originals,
        "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": pod, "uid": uid, "controller": True}],
    }


def _service_ports(ports: list[int]) -> list[dict[str, Any]]:
    return [{"name": f"port-{port}", "port": port, "targetPort": port, "protocol": "TCP"} for port in ports]


def service_manifests(lease: Lease, executor_id: str, namespace: str, pod_uid: str) -> list[dict[str, Any]]:
    """One Service per ``services`` entry (NodePort or Headless), selecting the pod by run id."""
    pod = pod_name(lease.run_id)
    selector = {RUN_ID: label_value(lease.run_id)}
    manifests = []
    for index, config in enumerate(lease.spec.get("services") or []):
        headless = config["type"].lower() == "headless"
        suffix = _NOT_IN_NAME.sub("-", (config.get("name") or "").lower()).strip("-")[:12] or f"{config['type'].lower()}-{index}"
        spec: dict[str, Any] = {"selector": selector, "ports": _service_ports(list(config.get("ports") or []))}
        spec.update({"type": "ClusterIP", "clusterIP": "None"} if headless else {"type": "NodePort"})
        manifests.append(
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": _owned_metadata(f"{pod}-{suffix}", namespace, lease, executor_id, (pod, pod_uid)),
                "spec": spec,
            }
        )
    return manifests


def ingress_manifests(lease: Lease, executor_id: str, namespace: str, pod_uid: str, host_suffix: str) -> list[dict[str, Any]]:
    """Per ``ingresses`` entry, a ClusterIP Service for its ports and an Ingress routing one host
    per port (``<pod>-<port>.<namespace>.<host_suffix>``) to it, with TLS when asked.
    ``use_cluster_ip`` concerns which address is reported for the ingress, not the objects."""
    pod = pod_name(lease.run_id)
    selector = {RUN_ID: label_value(lease.run_id)}
    manifests = []
    for index, config in enumerate(lease.spec.get("ingresses") or []):
        name = f"{pod}-ingress-{index}"
        ports = list(config.get("ports") or [])
        hosts = {port: f"{pod}-{port}.{namespace}.{host_suffix}" for port in ports}
        service = {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": _owned_metadata(name, namespace, lease, executor_id, (pod, pod_uid)),
            "spec": {"type": "ClusterIP", "selector": selector, "ports": _service_ports(ports)},
        }
        metadata = _owned_metadata(name, namespace, lease, executor_id, (pod, pod_uid))
        metadata["annotations"] = {**(config.get("annotations") or {}), **metadata["annotations"]}
        spec: dict[str, Any] = {
            "rules": [
                {
                    "host": host,
                    "http": {
                        "paths": [
                            {
                                "path": "/",
                                "pathType": "Prefix",
                                "backend": {"service": {"name": name, "port": {"number": port}}},
                            }
                        ]
                    },
                }
                for port, host in hosts.items()
            ]
        }
        if config.get("tls_enabled"):
            spec["tls"] = [_without_none({"hosts": list(hosts.values()), "secretName": config.get("cert_name")})]
        ingress = {"apiVersion": "networking.k8s.io/v1", "kind": "Ingress", "metadata": metadata, "spec": spec}
        manifests.extend([service, ingress])
    return manifests
