"""A Flotilla job spec (the `JobSubmitted` payload) as Armada's `api.Job` message.

Armada's `submitted` event carries the job as the server accepted it, so a client watching a job
set sees the defaults Flotilla filled in (namespace, priority class, restart policy). The messages
are built field by field rather than parsed from the Kubernetes JSON shape: `json_format.ParseDict`
took most of a millisecond per job, which a replay of a large job set pays for every job.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from armada_client.armada import submit_pb2
from armada_client.k8s.io.api.core.v1 import generated_pb2 as core_v1
from armada_client.k8s.io.apimachinery.pkg.api.resource.generated_pb2 import Quantity
from google.protobuf import timestamp_pb2


def timestamp(epoch_ms: int) -> timestamp_pb2.Timestamp:
    stamp = timestamp_pb2.Timestamp()
    stamp.FromMilliseconds(epoch_ms)
    return stamp


def _quantities(amounts: Mapping[str, str] | None) -> dict[str, Quantity]:
    return {name: Quantity(string=str(amount)) for name, amount in (amounts or {}).items()}


def _container(container: Mapping[str, Any]) -> core_v1.Container:
    resources = container.get("resources") or {}
    return core_v1.Container(
        name=container["name"],
        image=container["image"],
        command=list(container.get("command") or []),
        args=list(container.get("args") or []),
        env=[core_v1.EnvVar(name=env["name"], value=env["value"]) for env in container.get("env") or []],
        workingDir=container.get("working_dir"),
        resources=core_v1.ResourceRequirements(
            requests=_quantities(resources.get("requests")), limits=_quantities(resources.get("limits"))
        ),
        ports=[
            core_v1.ContainerPort(containerPort=port["container_port"], protocol=port.get("protocol"), name=port.get("name"))
            for port in container.get("ports") or []
        ],
    )


def _toleration(toleration: Mapping[str, Any]) -> core_v1.Toleration:
    return core_v1.Toleration(
        key=toleration.get("key"),
        operator=toleration.get("operator"),
        value=toleration.get("value"),
        effect=toleration.get("effect"),
        tolerationSeconds=toleration.get("toleration_seconds"),
    )


def _affinity(affinity: Mapping[str, Any] | None) -> core_v1.Affinity | None:
    terms = ((affinity or {}).get("node_affinity") or {}).get("required") or []
    if not terms:
        return None
    selector = core_v1.NodeSelector(
        nodeSelectorTerms=[
            core_v1.NodeSelectorTerm(
                matchExpressions=[
                    core_v1.NodeSelectorRequirement(
                        key=expression["key"], operator=expression["operator"], values=list(expression.get("values") or [])
                    )
                    for expression in term.get("match_expressions") or []
                ]
            )
            for term in terms
        ]
    )
    return core_v1.Affinity(nodeAffinity=core_v1.NodeAffinity(requiredDuringSchedulingIgnoredDuringExecution=selector))


def pod_spec_message(pod: Mapping[str, Any]) -> core_v1.PodSpec:
    return core_v1.PodSpec(
        containers=[_container(container) for container in pod.get("containers") or []],
        initContainers=[_container(container) for container in pod.get("init_containers") or []],
        nodeSelector=dict(pod.get("node_selector") or {}),
        tolerations=[_toleration(toleration) for toleration in pod.get("tolerations") or []],
        affinity=_affinity(pod.get("affinity")),
        terminationGracePeriodSeconds=pod.get("termination_grace_period_seconds"),
        activeDeadlineSeconds=pod.get("active_deadline_seconds"),
        priorityClassName=pod.get("priority_class_name"),
        restartPolicy=pod.get("restart_policy"),
        serviceAccountName=pod.get("service_account_name"),
    )


def _service(service: Mapping[str, Any]) -> submit_pb2.ServiceConfig:
    return submit_pb2.ServiceConfig(
        type=submit_pb2.ServiceType.Value(service["type"]), ports=list(service.get("ports") or []), name=service.get("name") or ""
    )


def _ingress(ingress: Mapping[str, Any]) -> submit_pb2.IngressConfig:
    return submit_pb2.IngressConfig(
        type=submit_pb2.IngressType.Ingress,
        ports=list(ingress.get("ports") or []),
        annotations=dict(ingress.get("annotations") or {}),
        tls_enabled=bool(ingress.get("tls_enabled")),
        cert_name=ingress.get("cert_name") or "",
        use_clusterIP=bool(ingress.get("use_cluster_ip")),
    )


def job_message(
    *, job_id: str, queue: str, job_set_id: str, owner: str, groups: Sequence[str], created_ms: int, spec: Mapping[str, Any]
) -> submit_pb2.Job:
    """``spec`` is a `JobSubmitted` payload; ``owner`` and ``groups`` are the submitter's, as Armada records them."""
    return submit_pb2.Job(
        id=job_id,
        client_id=spec.get("client_id") or "",
        job_set_id=job_set_id,
        queue=queue,
        namespace=spec["namespace"],
        labels=dict(spec.get("labels") or {}),
        annotations=dict(spec.get("annotations") or {}),
        owner=owner,
        queue_ownership_user_groups=list(groups),
        priority=spec["priority"],
        # Armada keeps the priority class in the pod spec; Flotilla beside it, defaulted.
        pod_spec=pod_spec_message(
            {**spec["pod_spec"], "priority_class_name": spec["pod_spec"].get("priority_class_name") or spec["priority_class"]}
        ),
        created=timestamp(created_ms),
        services=[_service(service) for service in spec.get("services") or []],
        ingress=[_ingress(ingress) for ingress in spec.get("ingresses") or []],
    )
