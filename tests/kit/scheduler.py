"""Feed records for the scheduling agent's tests, in whole cpus for readability."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from streams.scheduler.feed import ExecutorState, JobDelta, NodeState, QueueInfo, Tick
from streams.scheduler.index import SchedulerIndex
from tests.kit.quantities import CPU, GI

PREEMPTIBLE, DEFAULT = "armada-preemptible", "armada-default"


def delta(
    job_id: str,
    queue: str = "a",
    cpu: int = 1,
    submitted: int = 100,
    *,
    job_set: str = "s",
    pc: str = PREEMPTIBLE,
    mem: int = 4,
    **kwargs: Any,
) -> JobDelta:
    """A queued job unless overridden."""
    return JobDelta(
        job_id,
        queue,
        job_set,
        kwargs.pop("state", "queued"),
        pc,
        kwargs.pop("priority", 0.0),
        submitted,
        {"cpu": cpu * CPU, "memory": mem * GI},
        **kwargs,
    )


def running(d: JobDelta, run_id: str, executor: str, node: str, leased_at: int, runs: int | None = None, **kwargs: Any) -> JobDelta:
    return replace(
        d,
        state="running",
        run_state="running",
        run_id=run_id,
        executor=executor,
        node=node,
        leased_at=leased_at,
        runs=d.runs + 1 if runs is None else runs,
        **kwargs,
    )


def nodes(count: int = 2, cpu: int = 32, mem: int = 256, prefix: str = "n") -> tuple[NodeState, ...]:
    return tuple(NodeState(f"{prefix}{i}", {"cpu": cpu * CPU, "memory": mem * GI}) for i in range(count))


def executor(
    name: str = "ex1",
    time: int = 1_000,
    node_states: tuple[NodeState, ...] | None = None,
    pool: str = "default",
    runs: dict[str, str] | None = None,
    active: tuple[str, ...] | None = None,
) -> ExecutorState:
    runs = dict(runs or {})
    return ExecutorState(name, pool, time, nodes() if node_states is None else node_states, runs, tuple(runs) if active is None else active)


def holding(
    index: SchedulerIndex, name: str, time: int, node_states: tuple[NodeState, ...] | None = None, pool: str = "default"
) -> ExecutorState:
    """A report from an executor that holds every run the index has leased to it."""
    runs = {
        e.delta.run_id: job_id
        for job_id, e in sorted(index.jobs.items())
        if e.delta.executor == name and e.delta.run_active and e.delta.run_id
    }
    return executor(name, time, node_states, pool, runs)


def tick(time: int, *queues: str | QueueInfo, owner: str = "") -> Tick:
    """A tick for the ``queues`` (default a and b); ``owner``: the token of the worker that sent it."""
    return Tick(time, tuple(q if isinstance(q, QueueInfo) else QueueInfo(q, 1.0) for q in (queues or ("a", "b"))), owner)
