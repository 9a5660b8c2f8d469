"""Prometheus metrics of a control-plane worker, served at GET /metrics.

Counters are incremented once per message or per batch (with the batch's count), never per job on
a hot path, so measuring costs nothing noticeable under load. Each worker counts what it handled;
Prometheus sums across workers.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

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
        self.index_jobs = Gauge("flotilla_scheduler_index_jobs", "Unfinished jobs in the scheduler's index", registry=self.registry)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
