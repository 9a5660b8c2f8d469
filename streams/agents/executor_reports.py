"""The executor-report agent: executor heartbeats in, node state for the scheduler out.

An executor's report carries Kubernetes quantity strings and every run it holds; the scheduler
wants integer milli-units and the runs still holding resources. The report's time on the log
(not the executor's clock) is its heartbeat, so lease expiry is decided from the log alone.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from schemas.codec import SchemaError, decode
from streams.domain import feed
from streams.domain.quantity import QuantityError, to_milli

if TYPE_CHECKING:
    from streams.app import ControlPlane

log = logging.getLogger(__name__)

_ACTIVE = frozenset({"leased", "pending", "running"})


def register(plane: ControlPlane) -> None:
    @plane.app.agent(plane.topics.executor_reports, name="executor-reports", concurrency=1)
    async def forward(stream: Any) -> None:
        async for event in stream.events():
            message = event.message
            try:
                state = executor_state(decode("executor_report", message.value), int(message.timestamp * 1000))
            except (SchemaError, QuantityError, KeyError, TypeError) as exc:
                plane.metrics.executor_reports.labels("malformed").inc()
                log.error("skipping bad executor report %s[%s]@%s: %s", message.topic, message.partition, message.offset, exc)
                continue
            plane.metrics.executor_reports.labels("forwarded").inc()
            await plane.topics.scheduler_feed.send(value=feed.encode(state))


def executor_state(report: dict[str, Any], time_ms: int) -> feed.ExecutorState:
    return feed.ExecutorState(
        executor=report["executor"],
        pool=report["pool"],
        time=time_ms,
        nodes=tuple(
            feed.NodeState(
                name=node["name"],
                resources={name: to_milli(q) for name, q in node["allocatable"].items()},
                labels=dict(node["labels"]),
                taints=tuple({"key": t["key"], "value": t["value"], "effect": t["effect"]} for t in node["taints"]),
                unschedulable=node["unschedulable"],
                used={name: to_milli(q) for name, q in node["non_flotilla_usage"].items()},
            )
            for node in report["nodes"]
        ),
        runs={run["run_id"]: run["job_id"] for run in report["runs"]},
        active=tuple(run["run_id"] for run in report["runs"] if run["state"] in _ACTIVE),
    )
