"""The executor-report agent: executor heartbeats in, node state for the scheduler out.

An executor's report carries Kubernetes quantity strings and every run it holds; the scheduler
wants integer milli-units and the runs still holding resources. The report's time on the log
(not the executor's clock) is its heartbeat, so lease expiry is decided from the log alone.

Executors report every second, and a report lists every run the executor holds: at 50,000 runs
decoding it and forwarding its state cost about a quarter of a second of the worker's one core.
So the full state goes to the scheduler at most every `FULL_STATE_INTERVAL_MS` per executor, and
the reports in between become heartbeats, read from the message key and timestamp without
decoding. Node changes and the runs an executor lists reach the scheduler that much later; the
missing-run grace is far longer. After a restart of this agent the first report is sent in full.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from schemas.codec import SchemaError, decode
from streams.agents.batches import batches
from streams.domain.quantity import QuantityError, to_milli
from streams.domain.states import ACTIVE
from streams.scheduler import feed
from streams.tables.batched import Outbox

if TYPE_CHECKING:
    from faust.types import Message

    from streams.metrics import Metrics
    from streams.plane import ControlPlane

log = logging.getLogger(__name__)

FULL_STATE_INTERVAL_MS = 5_000
# Reports taken at once: their feed records go out in one produce batch.
BATCH_MAX_MESSAGES = 500
BATCH_WITHIN_S = 0.005


@dataclass
class FullStates:
    """Per executor (the report's message key), the log time of its last report forwarded in full."""

    interval_ms: int = FULL_STATE_INTERVAL_MS
    sent: dict[str, int] = field(default_factory=dict)

    def due(self, executor: str, time_ms: int) -> bool:
        """Whether the executor's report at ``time_ms`` goes in full."""
        last = self.sent.get(executor)
        return last is None or time_ms - last >= self.interval_ms


def register(plane: ControlPlane) -> None:
    full_states = FullStates()
    feed_topic = plane.topics.scheduler_feed.get_topic_name()

    @plane.app.agent(plane.topics.executor_reports, name="executor-reports", concurrency=1)
    async def forward(stream: Any) -> None:
        async for events in batches(stream, BATCH_MAX_MESSAGES, BATCH_WITHIN_S, plane.metrics.batch_counter("executor-reports")):
            outbox = Outbox(plane.batch_producer)
            records = forwarded(plane.metrics, full_states, [event.message for event in events])
            await outbox.partition(feed_topic, 0, [(None, feed.encode(record)) for record in records])
            await outbox.delivered()
            plane.refold.heard_from(record.executor for record in records if isinstance(record, feed.ExecutorState))


def forwarded(metrics: Metrics, full_states: FullStates, messages: list[Message]) -> list[feed.Heartbeat | feed.ExecutorState]:
    """What a batch of reports tells the scheduler, in order: a heartbeat, or the executor's state in full."""
    records: list[feed.Heartbeat | feed.ExecutorState] = []
    for message in messages:
        time_ms = int(message.timestamp * 1000)
        key = executor_key(message.key)
        if key is not None and not full_states.due(key, time_ms):
            metrics.executor_reports.labels("heartbeat").inc()
            records.append(feed.Heartbeat(key, time_ms))
            continue
        try:
            state = executor_state(decode("executor_report", message.value), time_ms)
        except (SchemaError, QuantityError, KeyError, TypeError) as exc:
            metrics.executor_reports.labels("malformed").inc()
            log.error("skipping bad executor report %s[%s]@%s: %s", message.topic, message.partition, message.offset, exc)
            continue
        if key is not None:
            full_states.sent[key] = time_ms
        metrics.executor_reports.labels("forwarded").inc()
        records.append(state)
    return records


def executor_key(raw: bytes | str | None) -> str | None:
    """The report's message key (the executor id) as text; None when it has none. The agent
    sees the key as the broker delivered it, undecoded."""
    key = raw.decode(errors="replace") if isinstance(raw, bytes) else raw
    return key or None


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
        active=tuple(run["run_id"] for run in report["runs"] if run["state"] in ACTIVE),
    )
