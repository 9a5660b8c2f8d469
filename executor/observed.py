"""An executor's own metrics, served at GET /metrics by `executor.http`.

Counters move once per command, per batch of events and per report; run and node counts are read
from the backend when Prometheus asks.
"""

from __future__ import annotations

from collections import Counter as Tally
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from executor.backend import ACTIVE, ENDED, RunStatus

CONTENT_TYPE = "text/plain; version=0.0.4"


class _Runs(Collector):
    def __init__(self, executor: str, runs: Callable[[], list[RunStatus]]) -> None:
        self.executor, self.runs = executor, runs

    def collect(self) -> Iterator[Metric]:
        family = GaugeMetricFamily("flotilla_executor_held_runs", "Runs the executor holds, by state", labels=["executor", "state"])
        counts = Tally(status.state for status in self.runs())
        for state in sorted(ACTIVE | ENDED):
            family.add_metric([self.executor, state], counts.get(state, 0))
        yield family


@dataclass
class ExecutorMetrics:
    executor: str
    registry: CollectorRegistry = field(default_factory=CollectorRegistry)

    def __post_init__(self) -> None:
        labels = {"labelnames": ["executor"], "registry": self.registry}
        self.commands = Counter(
            "flotilla_executor_commands",
            "Commands acted on, by kind (lease, kill)",
            labelnames=["executor", "kind"],
            registry=self.registry,
        )
        self.run_events = Counter("flotilla_executor_run_events", "Run changes produced to the events topic", **labels)  # type: ignore[arg-type]
        self.reports = Counter("flotilla_executor_reports_sent", "Reports of nodes and runs sent", **labels)  # type: ignore[arg-type]
        self.last_report = Gauge("flotilla_executor_last_report_timestamp_seconds", "When the last report was sent", **labels)  # type: ignore[arg-type]
        self.reported_nodes = Gauge("flotilla_executor_reported_nodes", "Nodes in the last report", **labels)  # type: ignore[arg-type]

    def watch_runs(self, runs: Callable[[], list[RunStatus]]) -> None:
        self.registry.register(_Runs(self.executor, runs))

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
