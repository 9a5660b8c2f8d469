"""Prometheus metrics of a control-plane worker, served at GET /metrics.

Counters are incremented once per message or per batch (with the batch's count), never per job on
a hot path, so measuring costs nothing noticeable under load. Each worker counts what it handled;
Prometheus sums across workers.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from streams.scheduler.view import ClusterView

# Prometheus's text format; aiohttp refuses a charset inside content_type, and UTF-8 is the default.
CONTENT_TYPE = "text/plain; version=0.0.4"


@dataclass
class Metrics:
    registry: CollectorRegistry = field(default_factory=CollectorRegistry)

    def __post_init__(self) -> None:
        self.submissions = Counter(
            "flotilla_submissions",
            "Submit requests taken from the submissions topic, by outcome",
            ["outcome"],
            registry=self.registry,
        )
        self.jobs_submitted = Counter(
            "flotilla_jobs_submitted",
            "Jobs accepted and appended to the events topic",
            ["queue"],
            registry=self.registry,
        )
        self.jobs_rejected = Counter(
            "flotilla_jobs_rejected",
            "Job items rejected with a reason",
            ["queue"],
            registry=self.registry,
        )
        self.jobs_deduplicated = Counter(
            "flotilla_jobs_deduplicated",
            "Job items answered with the job of an earlier client id",
            ["queue"],
            registry=self.registry,
        )
        self.events = Counter(
            "flotilla_events",
            "Job events folded into the jobs table, by outcome (applied, unchanged, refused, unknown_job, undecodable)",
            ["outcome"],
            registry=self.registry,
        )
        self.executor_reports = Counter(
            "flotilla_executor_reports",
            "Executor reports forwarded to the scheduler feed, by outcome",
            ["outcome"],
            registry=self.registry,
        )
        self.cycles = Counter("flotilla_scheduling_cycles", "Scheduling cycles run", registry=self.registry)
        self.cycle_seconds = Histogram(
            "flotilla_scheduling_cycle_seconds",
            "Time to decide one scheduling cycle (index to events)",
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
            registry=self.registry,
        )
        self.decisions = Counter(
            "flotilla_scheduling_decisions",
            "Jobs leased, preempted, requeued or ended by the scheduler",
            ["kind"],
            registry=self.registry,
        )
        self.cycles_diverged = Counter(
            "flotilla_scheduling_cycles_diverged",
            "Cycles that a worker taking the scheduler feed over ran again with another outcome than the one committed",
            registry=self.registry,
        )
        self.scheduler_failures = Counter(
            "flotilla_scheduler_failures",
            "Feed batches or ticks the scheduling agent could not finish (a broker error while committing or writing): "
            "its index was dropped, rebuilt from its table and the feed folded again from there",
            registry=self.registry,
        )
        self.ticks_run_ahead = Counter(
            "flotilla_scheduling_ticks_run_ahead",
            "Ticks whose cycle ran as soon as the broker had taken them (every feed record before them folded), not when read back",
            registry=self.registry,
        )
        self.agent_batches = Counter(
            "flotilla_agent_batches",
            "Batches each agent took from its topic: messages over batches is what one batch's fixed costs (produce "
            "requests, round trips, table writes) are shared by, and a job's changes within one batch are written once",
            ["agent"],
            registry=self.registry,
        )
        self.agent_batch_messages = Counter(
            "flotilla_agent_batch_messages", "Messages in the batches each agent took", ["agent"], registry=self.registry
        )
        self.index_jobs = Gauge("flotilla_scheduler_index_jobs", "Unfinished jobs in the scheduler's index", registry=self.registry)
        self.index_writes = Counter(
            "flotilla_scheduler_index_writes", "Keys written to (or deleted from) the scheduler-index table", registry=self.registry
        )
        self.index_job_writes = Counter(
            "flotilla_scheduler_index_job_writes",
            "Job entries written to (or deleted from) the scheduler-index table: what a lease costs the index",
            registry=self.registry,
        )

    def batch_counter(self, agent: str) -> Callable[[int], None]:
        """Counts ``agent``'s batches and their messages (`streams.agents.batches`)."""
        batches, messages = self.agent_batches.labels(agent), self.agent_batch_messages.labels(agent)

        def counted(size: int) -> None:
            batches.inc()
            messages.inc(size)

        return counted

    def exposition(self) -> bytes:
        return generate_latest(self.registry)


# The agent that consumes each source topic (names without the prefix), for consumer lag.
AGENT_OF_TOPIC = {
    "submissions": "ingest",
    "events": "job-state",
    "executor-reports": "executor-reports",
    "scheduler-feed": "scheduler",
}


@dataclass
class Lag:
    agent: str
    topic: str
    partition: int
    messages: int


@dataclass
class Observed:
    """Where the scrape-time metrics come from: each read when Prometheus asks, nothing per job or cycle."""

    # Jobs per queue and state in this worker's partitions ([{queue, counts}]); None while recovering.
    queue_counts: Callable[[], list[dict[str, Any]] | None]
    cluster: ClusterView
    lag: Callable[[], list[Lag]]
    # (duration of the last table recovery in seconds or None before the first, recovering now)
    recovery: Callable[[], tuple[float | None, bool]]
    clock_ms: Callable[[], int]


def _units(milli: int) -> float:
    """Milli-units to the resource's own unit (cores, bytes, devices)."""
    return milli / 1000.0


class ObservedCollector(Collector):
    """Per queue, per executor, per pool cycle, consumer lag and table recovery, as gauges read at scrape time."""

    def __init__(self, observed: Observed) -> None:
        self.observed = observed

    def describe(self) -> list[Metric]:
        return list(self._families().values())  # the families without samples, so registration checks names only

    def collect(self) -> Iterator[Metric]:
        families = self._families()
        self._queues(families)
        self._cycles(families)
        self._executors(families)
        self._pipeline(families)
        yield from families.values()

    @staticmethod
    def _families() -> dict[str, GaugeMetricFamily]:
        specs = [
            ("flotilla_queue_jobs", "Jobs of the queue in this worker's partitions, by state", ["queue", "state"]),
            ("flotilla_queue_weight", "Queue weight (priority factor) in the last cycle of the pool", ["pool", "queue"]),
            ("flotilla_queue_fair_share", "Queue fair share (weight over total weight) in the last cycle", ["pool", "queue"]),
            ("flotilla_queue_adjusted_fair_share", "Queue fair share capped by its demand, in the last cycle", ["pool", "queue"]),
            ("flotilla_queue_actual_share", "Queue dominant-resource share held after the last cycle", ["pool", "queue"]),
            (
                "flotilla_queue_allocation",
                "Resources the queue holds after the last cycle (cores, bytes, devices)",
                ["pool", "queue", "resource"],
            ),
            ("flotilla_queue_scheduler_jobs", "Jobs of the queue the last cycle saw, queued or running", ["pool", "queue", "state"]),
            ("flotilla_pool_capacity", "Resources the pool's shares were fractions of in the last cycle", ["pool", "resource"]),
            ("flotilla_scheduling_unschedulable_jobs", "Jobs the last cycle left queued, by class of reason", ["pool", "reason"]),
            ("flotilla_executor_nodes", "Nodes the executor reports", ["executor", "pool"]),
            ("flotilla_executor_schedulable_nodes", "Nodes of the executor that take new runs", ["executor", "pool"]),
            ("flotilla_executor_capacity", "Allocatable resources of the executor's nodes", ["executor", "pool", "resource"]),
            ("flotilla_executor_allocated", "Resources requested by the executor's active runs", ["executor", "pool", "resource"]),
            ("flotilla_executor_active_runs", "Runs the scheduler holds active on the executor, from lease to end", ["executor", "pool"]),
            ("flotilla_executor_report_age_seconds", "Time since the executor's last report reached the scheduler", ["executor", "pool"]),
            ("flotilla_executor_unacknowledged_runs", "Active runs the executor's latest report does not list yet", ["executor", "pool"]),
            ("flotilla_executor_cordoned", "1 while an administrator has cordoned the executor: no new job on it", ["executor", "pool"]),
            (
                "flotilla_consumer_lag_messages",
                "Messages on the agent's source partition not yet committed",
                ["agent", "topic", "partition"],
            ),
            ("flotilla_table_recovery_seconds", "Duration of this worker's last table recovery", []),
            ("flotilla_table_recovering", "1 while this worker recovers its tables", []),
        ]
        return {name: GaugeMetricFamily(name, text, labels=labels) for name, text, labels in specs}

    def _queues(self, families: dict[str, GaugeMetricFamily]) -> None:
        for group in self.observed.queue_counts() or []:
            for state, count in group["counts"].items():
                families["flotilla_queue_jobs"].add_metric([group["queue"], state], count)

    def _cycles(self, families: dict[str, GaugeMetricFamily]) -> None:
        for pool, cycle in sorted(self.observed.cluster.pools.items()):
            for queue in cycle.queues():
                name = queue["queue"]
                families["flotilla_queue_weight"].add_metric([pool, name], queue["weight"])
                families["flotilla_queue_fair_share"].add_metric([pool, name], queue["fair_share"])
                families["flotilla_queue_adjusted_fair_share"].add_metric([pool, name], queue["adjusted_fair_share"])
                families["flotilla_queue_actual_share"].add_metric([pool, name], queue["actual_share"])
                for resource, amount in sorted(queue["allocation"].items()):
                    families["flotilla_queue_allocation"].add_metric([pool, name, resource], _units(amount))
                for state in ("queued", "running"):
                    families["flotilla_queue_scheduler_jobs"].add_metric([pool, name, state], queue[state])
            for resource, amount in sorted(cycle.capacity().items()):
                families["flotilla_pool_capacity"].add_metric([pool, resource], _units(amount))
            for reason, count in cycle.unschedulable().items():
                families["flotilla_scheduling_unschedulable_jobs"].add_metric([pool, reason], count)

    def _executors(self, families: dict[str, GaugeMetricFamily]) -> None:
        for executor in self.observed.cluster.executors(self.observed.clock_ms()):
            labels = [executor["executor"], executor["pool"]]
            families["flotilla_executor_nodes"].add_metric(labels, executor["nodes"])
            families["flotilla_executor_schedulable_nodes"].add_metric(labels, executor["schedulable_nodes"])
            for resource, amount in sorted(executor["capacity"].items()):
                families["flotilla_executor_capacity"].add_metric([*labels, resource], _units(amount))
            for resource, amount in sorted(executor["allocated"].items()):
                families["flotilla_executor_allocated"].add_metric([*labels, resource], _units(amount))
            families["flotilla_executor_active_runs"].add_metric(labels, executor["active_runs"])
            families["flotilla_executor_report_age_seconds"].add_metric(labels, executor["report_age_s"])
            families["flotilla_executor_unacknowledged_runs"].add_metric(labels, executor["unacknowledged_runs"])
            families["flotilla_executor_cordoned"].add_metric(labels, int(executor["cordoned"]))

    def _pipeline(self, families: dict[str, GaugeMetricFamily]) -> None:
        for lag in self.observed.lag():
            families["flotilla_consumer_lag_messages"].add_metric([lag.agent, lag.topic, str(lag.partition)], lag.messages)
        duration, recovering = self.observed.recovery()
        if duration is not None:
            families["flotilla_table_recovery_seconds"].add_metric([], duration)
        families["flotilla_table_recovering"].add_metric([], 1 if recovering else 0)
