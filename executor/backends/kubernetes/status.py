"""What a pod's state means for its run, and what nodes hold besides Flotilla's pods.

Pure functions over the official client's models, so the mapping can be read in one place and
tested without a server. A pod that can never start (its image cannot be pulled, its config is
broken, the kubelet refused it) is ``returned``: the run did not fail on its own account, so the
control plane may lease the job again, possibly elsewhere.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from kubernetes.client import V1Container, V1ContainerStatus, V1Node, V1ObjectMeta, V1Pod

from executor.backend import NodeInfo, RunStatus
from executor.backends.kubernetes.manifests import JOB_ID, JOB_SET, QUEUE, RUN_ID
from streams.domain.quantity import to_milli

# Waiting reasons that retrying in place will not cure.
STUCK_WAITING = frozenset(
    {
        "ErrImagePull",
        "ImagePullBackOff",
        "ErrImageNeverPull",
        "InvalidImageName",
        "CreateContainerConfigError",
        "CreateContainerError",
    }
)


def meta(obj: V1Pod | V1Node) -> V1ObjectMeta:
    """The metadata of an object the API server returned, which always has it (the client's models
    type every field optional)."""
    metadata = obj.metadata
    assert metadata is not None
    return metadata


def pod_location(pod: V1Pod) -> tuple[str, str]:
    """(namespace, name) of a pod the API server returned: it always has both."""
    namespace, name = meta(pod).namespace, meta(pod).name
    assert namespace is not None and name is not None
    return namespace, name


def _statuses(pod: V1Pod) -> list[V1ContainerStatus]:
    status = pod.status
    if status is None:
        return []
    return [*(status.init_container_statuses or []), *(status.container_statuses or [])]


def _stuck(pod: V1Pod) -> tuple[str, str] | None:
    """(reason, message) if the pod cannot start: stuck waiting, or unschedulable."""
    for container in _statuses(pod):
        waiting = container.state.waiting if container.state else None
        if waiting is not None and waiting.reason in STUCK_WAITING:
            return waiting.reason, waiting.message or ""
    for condition in (pod.status.conditions if pod.status else None) or []:
        if condition.type == "PodScheduled" and condition.status == "False" and condition.reason == "Unschedulable":
            return "Unschedulable", condition.message or ""
    return None


def _exit(pod: V1Pod) -> tuple[int | None, str, str]:
    """The exit code, reason and message of the first container that failed (else the first
    that ended), init containers first: in a multi-container pod the failing one explains the
    outcome, and a failed init container is the job's own failure too."""
    ended = [c.state.terminated for c in _statuses(pod) if c.state and c.state.terminated]
    if not ended:
        return None, "", ""
    chosen = next((t for t in ended if t.exit_code != 0), ended[0])
    return chosen.exit_code, chosen.reason or "", chosen.message or ""


def run_status(pod: V1Pod) -> RunStatus | None:
    """The run a Flotilla pod carries and its state; None for an unknown phase or a pod that is
    not Flotilla's. Identity comes from the annotations, which hold the exact originals."""
    annotations = meta(pod).annotations or {}
    run_id = annotations.get(RUN_ID)
    if run_id is None:
        return None
    phase = pod.status.phase if pod.status else None

    def status(state: str, exit_code: int | None = None, reason: str = "", message: str = "") -> RunStatus:
        return RunStatus(
            run_id=run_id,
            job_id=annotations.get(JOB_ID, ""),
            queue=annotations.get(QUEUE, ""),
            job_set_id=annotations.get(JOB_SET, ""),
            node=(pod.spec.node_name if pod.spec else None) or "",
            state=state,
            exit_code=exit_code,
            reason=reason,
            message=message,
        )

    if phase in (None, "Pending"):
        stuck = _stuck(pod)
        return status("returned", reason=stuck[0], message=stuck[1]) if stuck else status("pending")
    if phase == "Running":
        return status("running")
    if phase == "Succeeded":
        return status("succeeded", exit_code=0)
    if phase == "Failed":
        exit_code, reason, message = _exit(pod)
        pod_reason = (pod.status.reason if pod.status else None) or ""
        pod_message = (pod.status.message if pod.status else None) or ""
        if pod_reason == "DeadlineExceeded":
            return status("failed", exit_code, "deadline_exceeded", pod_message or message)
        if exit_code is None:
            # No container ever ran: the kubelet refused the pod at admission (OutOfcpu,
            # NodeAffinity, ...), which says nothing against the job itself.
            return status("returned", reason=pod_reason or "rejected", message=pod_message)
        detail = message or pod_message or f"exit code {exit_code}"
        return status("failed", exit_code, reason or pod_reason or f"exit code {exit_code}", detail)
    return None


def _requests(containers: Iterable[V1Container] | None) -> list[dict[str, int]]:
    return [
        {name: to_milli(quantity) for name, quantity in ((c.resources.requests if c.resources else None) or {}).items()}
        for c in containers or []
    ]


def pod_requests(pod: V1Pod) -> dict[str, int]:
    """What the scheduler reserves for a pod, in milli-units: per resource, the larger of the
    sum over its containers and the largest init container (init containers run one by one)."""
    total: dict[str, int] = defaultdict(int)
    spec = pod.spec
    assert spec is not None  # a pod the API server returned has its spec
    for requests in _requests(spec.containers):
        for name, milli in requests.items():
            total[name] += milli
    for requests in _requests(spec.init_containers):
        for name, milli in requests.items():
            total[name] = max(total[name], milli)
    return dict(total)


def milli_quantity(milli: int) -> str:
    """A milli-unit amount as a Kubernetes quantity: whole units plain ("2"), else "2500m"."""
    return str(milli // 1000) if milli % 1000 == 0 else f"{milli}m"


def node_infos(nodes: Iterable[V1Node], active_pods: Iterable[V1Pod]) -> list[NodeInfo]:
    """Nodes as reported to the scheduler, with what other pods take on each.

    ``active_pods`` are the cluster's unfinished pods; those without a run id label are not
    Flotilla's (system daemons, other workloads) and their requests are capacity the scheduler
    must not hand out. Flotilla's own pods are not counted: the scheduler knows its runs.
    """
    usage: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for pod in active_pods:
        node = pod.spec.node_name if pod.spec else None
        if not node or RUN_ID in (meta(pod).labels or {}):
            continue
        for name, milli in pod_requests(pod).items():
            usage[node][name] += milli
    return [
        NodeInfo(
            name=_node_name(node),
            allocatable=dict((node.status.allocatable if node.status else None) or {}),
            labels=dict(meta(node).labels or {}),
            taints=tuple({"key": t.key, "value": t.value, "effect": t.effect} for t in (node.spec.taints if node.spec else None) or []),
            unschedulable=bool(node.spec.unschedulable) if node.spec else False,
            non_flotilla_usage={name: milli_quantity(milli) for name, milli in sorted(usage[_node_name(node)].items())},
        )
        for node in nodes
    ]


def _node_name(node: V1Node) -> str:
    name = meta(node).name
    assert name is not None  # a node the API server returned has its name
    return name
