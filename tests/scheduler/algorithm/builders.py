"""Small constructors for cycle inputs, in whole cpus and GiB for readability."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from streams.scheduler.algorithm.model import (
    AwayNodeType,
    CycleInput,
    Job,
    LimiterState,
    Node,
    PriorityClass,
    Queue,
    RunningJob,
    SchedulingConfig,
    Taint,
    Toleration,
)
from tests.kit.quantities import CPU, GI

CLASSES = {
    "low": PriorityClass("low", 0, True),
    "mid": PriorityClass("mid", 1, True),
    "high": PriorityClass("high", 2, True),
    "fixed": PriorityClass("fixed", 3, False),
    "away": PriorityClass("away", 30000, True, (AwayNodeType(29000, "gpu"),)),
    "home": PriorityClass("home", 30000, True),
}


def config(**overrides: Any) -> SchedulingConfig:
    from streams.scheduler.algorithm.model import WellKnownNodeType

    base: dict[str, Any] = {
        "priority_classes": CLASSES,
        "protected_fraction_of_fair_share": 0.0,
        "well_known_node_types": {"gpu": WellKnownNodeType("gpu", (Taint("gpu", "true"),))},
        "indexed_node_labels": ("zone",),
    }
    base.update(overrides)
    return SchedulingConfig(**base)


def node(node_id: str, cpu: int = 32, mem: int = 256, gpu: int = 0, **kwargs: Any) -> Node:
    resources = {"cpu": cpu * CPU, "memory": mem * GI}
    if gpu:
        resources["nvidia.com/gpu"] = gpu * CPU
    return Node(id=node_id, resources=resources, **kwargs)


def job(
    job_id: str,
    queue: str = "A",
    cpu: int = 1,
    mem: int = 4,
    pc: str = "low",
    t: float = 0.0,
    gang: tuple[str, int] | None = None,
    **kwargs: Any,
) -> Job:
    annotations = dict(kwargs.pop("annotations", {}))
    if gang:
        annotations["armadaproject.io/gangId"] = gang[0]
        annotations["armadaproject.io/gangCardinality"] = str(gang[1])
    return Job(
        id=job_id,
        queue=queue,
        priority_class=pc,
        requests={"cpu": cpu * CPU, "memory": mem * GI},
        submit_time=t,
        annotations=annotations,
        **kwargs,
    )


def running(j: Job, node_id: str, priority: int | None = None, started: float = 0.0) -> RunningJob:
    return RunningJob(j, node_id, CLASSES[j.priority_class].priority if priority is None else priority, started)


def cycle(
    queues: Sequence[str | Queue],
    nodes: Sequence[Node],
    queued: Sequence[Job] = (),
    running_jobs: Sequence[RunningJob] = (),
    now: float = 0.0,
    limiters: LimiterState | None = None,
    **kwargs: Any,
) -> CycleInput:
    qs = tuple(q if isinstance(q, Queue) else Queue(q) for q in queues)
    return CycleInput(
        queues=qs,
        nodes=tuple(nodes),
        running=tuple(running_jobs),
        queued=tuple(queued),
        now=now,
        limiters=limiters or LimiterState(),
        **kwargs,
    )


def tolerate(key: str, value: str = "true") -> Toleration:
    return Toleration(key, "Equal", value)
