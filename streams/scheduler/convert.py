"""Feed records to the scheduling algorithm's types, and limiter state to and from JSON."""

from __future__ import annotations

import operator
from collections.abc import Mapping
from typing import Any

from streams.domain.frozen import maker
from streams.domain.shared import TIMES_SIZE, remembered, shared
from streams.scheduler import feed
from streams.scheduler.algorithm.model import (
    Job,
    LimiterState,
    Node,
    NodeAllocation,
    NodeSelectorRequirement,
    Queue,
    Taint,
    TokenBucket,
    Toleration,
)
from streams.scheduler.feed import ExecutorState, JobDelta, NodeState, QueueInfo, node_id

# Every node carries its scheduler id as a label, so "avoid these nodes" is an affinity rule.
NODE_ID_LABEL = "flotilla.io/node-id"


# The index makes a Job of every job it schedules (`streams.domain.frozen`).
_make_job = maker(Job)


def scheduling_job(delta: JobDelta) -> Job:
    tolerations, affinity = _constraints(delta)
    return _make_job(
        id=delta.job_id,
        queue=delta.queue,
        priority_class=delta.priority_class,
        requests=delta.requests,
        submit_time=submit_time(delta.submitted),
        priority=delta.priority,
        node_selector=delta.node_selector,
        tolerations=tolerations,
        affinity=affinity,
        annotations=delta.gang,
    )


# The algorithm's parts of a Job made of a delta's part (`feed.part_of`), by the identity of the part:
# the jobs that never ran share a part per queue, job set and shape, and a cycle makes the Jobs of a
# million of them after a take-over. The parts are held here too, so their ids are not reused while remembered.
_PART_JOBS: dict[int, tuple[tuple[Any, ...], tuple[Any, ...]]] = {}
_PART_JOBS_SIZE = 65536
_PART = feed.PART
_QUEUE, _CLASS, _PRIORITY, _REQUESTS, _SELECTOR, _GANG = (
    _PART[name] for name in ("queue", "priority_class", "priority", "requests", "node_selector", "gang")
)


def part_job(job_id: str, submitted: int, part: tuple[Any, ...]) -> Job:
    """``scheduling_job(feed.delta_of(job_id, submitted, *part))``, without making the delta."""
    known = _PART_JOBS.get(id(part))
    if known is None or known[0] is not part:
        if len(_PART_JOBS) >= _PART_JOBS_SIZE:
            _PART_JOBS.clear()
        made = scheduling_job(feed.delta_of(job_id, submitted, *part))
        known = _PART_JOBS[id(part)] = (
            part,
            (part[_QUEUE], part[_CLASS], part[_REQUESTS], part[_PRIORITY], part[_SELECTOR], made.tolerations, made.affinity, part[_GANG]),
        )
    queue, priority_class, requests, priority, selector, tolerations, affinity, gang = known[1]
    return _make_job(job_id, queue, priority_class, requests, submit_time(submitted), priority, selector, tolerations, affinity, gang)


# Each submission time (`streams.domain.shared.shared_time`) in seconds, as one float for the jobs that share it.
_SECONDS: dict[int, float] = {}


def submit_time(submitted: int) -> float:
    if type(submitted) is not int:
        return submitted / 1000.0
    return remembered(_SECONDS, submitted, submitted / 1000.0, TIMES_SIZE)


# A delta's tolerations and affinity terms as the algorithm's types, by the identity of the delta's
# parts: deltas read from the feed share them (streams.scheduler.shared), so the jobs of one shape
# are converted once, not once each. The parts are held with them, so their ids are not reused
# while remembered; the table is emptied when it grows past the shapes a workload has.
Affinity = tuple[tuple[NodeSelectorRequirement, ...], ...]
_CONSTRAINTS: dict[tuple[int, int, int], tuple[tuple[Any, ...], tuple[Toleration, ...], Affinity]] = {}
_CONSTRAINTS_SIZE = 8192


def _constraints(delta: JobDelta) -> tuple[tuple[Toleration, ...], Affinity]:
    parts = (delta.tolerations, delta.affinity, delta.avoid_nodes)
    key = (id(parts[0]), id(parts[1]), id(parts[2]))
    known = _CONSTRAINTS.get(key)
    if known is not None and all(map(operator.is_, known[0], parts)):
        return known[1], known[2]
    terms = tuple(
        tuple(NodeSelectorRequirement(e["key"], e["operator"], tuple(e.get("values") or ())) for e in term) for term in delta.affinity
    )
    if delta.avoid_nodes:
        avoid = NodeSelectorRequirement(NODE_ID_LABEL, "NotIn", delta.avoid_nodes)
        terms = tuple((*term, avoid) for term in terms) if terms else ((avoid,),)
    # Shared between jobs like the delta's own fields (the index keeps one Job per queued job).
    tolerations = shared(
        tuple(
            Toleration(t.get("key") or "", t.get("operator") or "Equal", t.get("value") or "", t.get("effect") or "")
            for t in delta.tolerations
        )
    )
    affinity = shared(terms)
    if len(_CONSTRAINTS) >= _CONSTRAINTS_SIZE:
        _CONSTRAINTS.clear()
    _CONSTRAINTS[key] = (parts, tolerations, affinity)
    return tolerations, affinity


def scheduling_node(executor: ExecutorState, node: NodeState, held_priority: int) -> Node:
    """``held_priority``: the level at which pods Flotilla did not start hold their resources."""
    ident = node_id(executor.executor, node.name)
    used = {name: amount for name, amount in node.used.items() if amount}
    return Node(
        id=ident,
        resources=node.resources,
        labels={**node.labels, NODE_ID_LABEL: ident},
        taints=node_taints(node),
        unschedulable=node.unschedulable,
        allocated=(NodeAllocation(held_priority, used),) if used else (),
        executor=executor.executor,
    )


def node_taints(node: NodeState) -> tuple[Taint, ...]:
    return tuple(Taint(t["key"], t.get("value") or "", t.get("effect") or "NoSchedule") for t in node.taints)


def scheduling_queue(queue: QueueInfo, pool: str) -> Queue:
    """Per-class limits for ``pool``: the pool's own fractions override the queue-wide ones."""
    limits: dict[str, dict[str, float]] = {}
    for priority_class, raw in queue.resource_limits.items():
        merged = dict(raw.get("maximum_resource_fraction") or {})
        merged.update((raw.get("maximum_resource_fraction_by_pool") or {}).get(pool) or {})
        if merged:
            limits[priority_class] = merged
    return Queue(name=queue.name, weight=queue.weight, cordoned=queue.cordoned, resource_limits=limits)


def limiters_to_json(state: LimiterState) -> dict[str, Any]:
    def bucket(b: TokenBucket | None) -> list[float] | None:
        return None if b is None else [b.tokens, b.at]

    return {
        "scheduling": bucket(state.scheduling),
        "per_queue": {name: bucket(b) for name, b in sorted(state.per_queue.items())},
        "fairshare_preemption": bucket(state.fairshare_preemption),
    }


def limiters_from_json(raw: Mapping[str, Any]) -> LimiterState:
    def bucket(b: list[float] | None) -> TokenBucket | None:
        return None if b is None else TokenBucket(tokens=b[0], at=b[1])

    return LimiterState(
        scheduling=bucket(raw.get("scheduling")),
        per_queue={name: TokenBucket(tokens=b[0], at=b[1]) for name, b in (raw.get("per_queue") or {}).items()},
        fairshare_preemption=bucket(raw.get("fairshare_preemption")),
    )
