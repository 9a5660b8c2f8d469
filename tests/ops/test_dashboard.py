"""Every query of the Grafana dashboard (ops/grafana/flotilla.json) names only metrics Flotilla exports."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

from prometheus_client import CollectorRegistry

from executor.observed import ExecutorMetrics
from streams.app import create_control_plane
from streams.config import Settings
from tests.kit.plane import NO_BROKER

DASHBOARD = Path(__file__).resolve().parents[2] / "ops" / "grafana" / "flotilla.json"
# The series each kind of family exposes, as PromQL names them.
_SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"), "gauge": ("",)}


def series(registry: CollectorRegistry) -> set[str]:
    return {family.name + suffix for family in registry.collect() for suffix in _SUFFIXES[family.type]}


def exported(tmp_path: Path) -> set[str]:
    async def worker_series() -> set[str]:
        plane = create_control_plane(Settings(broker=NO_BROKER, store="memory://", data_dir=tmp_path))
        return series(plane.metrics.registry)

    executor = ExecutorMetrics("x")
    executor.watch_runs(list)
    return asyncio.run(worker_series()) | series(executor.registry)


def queries() -> list[str]:
    dashboard = json.loads(DASHBOARD.read_text())
    return [target["expr"] for panel in dashboard["panels"] for target in panel.get("targets", [])]


def test_every_dashboard_query_names_only_exported_metrics(tmp_path: Path) -> None:
    names = exported(tmp_path)
    assert len(queries()) >= 30
    for query in queries():
        used = set(re.findall(r"\bflotilla_[a-z0-9_]+", query))
        assert used, f"query {query!r} names no Flotilla metric"
        assert used <= names, f"query {query!r} names {sorted(used - names)}, which nothing exports"


def test_the_dashboard_covers_queues_cluster_usage_cycles_and_the_pipeline() -> None:
    titles = {panel["title"] for panel in json.loads(DASHBOARD.read_text())["panels"] if panel["type"] == "row"}
    assert titles == {"Queues", "Cluster usage", "Scheduler cycles", "Pipeline"}
