"""Static node requirements: what a job needs of a node regardless of what runs on it."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from streams.scheduler.algorithm.model import Job, Node, NodeSelectorRequirement, PriorityClass, Taint, Toleration, WellKnownNodeType

# PreferNoSchedule is a soft preference; Armada (like kube-scheduler filtering) ignores it.
_HARD_TAINT_EFFECTS = frozenset({"NoSchedule", "NoExecute"})


def _requirement_met(labels: Mapping[str, str], requirement: NodeSelectorRequirement) -> bool:
    value = labels.get(requirement.key)
    operator = requirement.operator
    if operator == "In":
        return value is not None and value in requirement.values
    if operator == "NotIn":
        return value is None or value not in requirement.values
    if operator == "Exists":
        return value is not None
    if operator == "DoesNotExist":
        return value is None
    if operator in ("Gt", "Lt"):
        if value is None or not requirement.values:
            return False
        try:
            node_value, bound = int(value), int(requirement.values[0])
        except ValueError:
            return False
        return node_value > bound if operator == "Gt" else node_value < bound
    raise ValueError(f"unknown node selector operator {operator!r}")


def untolerated_taint(taints: Iterable[Taint], tolerations: Iterable[Toleration]) -> Taint | None:
    tolerations = tuple(tolerations)
    for taint in taints:
        if taint.effect in _HARD_TAINT_EFFECTS and not any(t.tolerates(taint) for t in tolerations):
            return taint
    return None


def static_mismatch(
    node: Node, job: Job, extra_tolerations: tuple[Toleration, ...] = (), extra_selector: Mapping[str, str] | None = None
) -> str | None:
    """Why `node` can never take `job` this cycle, or None when it can (capacity aside)."""
    if node.unschedulable:
        return "node is unschedulable"
    taint = untolerated_taint(node.taints, job.tolerations + extra_tolerations)
    if taint is not None:
        return f"untolerated taint {taint.key}={taint.value}:{taint.effect}"
    for selector in (job.node_selector, extra_selector or {}):
        for key, value in selector.items():
            if node.labels.get(key) != value:
                return f"node selector {key}={value} not matched"
    if job.affinity and not any(all(_requirement_met(node.labels, r) for r in term) for term in job.affinity):
        return "required node affinity not matched"
    return None


def held_priority(job: Job, taints: Iterable[Taint], pc: PriorityClass, node_types: Mapping[str, WellKnownNodeType]) -> int:
    """The priority a running job holds its node at: its class's, or, on a node whose taints it
    does not tolerate itself, that of the first away node type of its class that lets it on (the
    order in which the node index tries them). Armada records it with the run; here it follows
    from the job, the node and the configuration, so a cycle needs nothing more on the log."""
    taints = tuple(taints)
    if untolerated_taint(taints, job.tolerations) is None:
        return pc.priority
    for away in pc.away_node_types:
        node_type = node_types.get(away.well_known_node_type)
        if node_type is None:
            continue
        extra = tuple(Toleration(t.key, "Equal", t.value, t.effect) for t in node_type.taints)
        if untolerated_taint(taints, job.tolerations + extra) is None:
            return away.priority
    return pc.priority
