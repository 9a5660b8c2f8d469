"""Every metric family of a worker and an executor has samples after a short real run, executors answer
/health, and both write JSON log lines with the fields of what they concern (`--log-format json`)."""

from __future__ import annotations

import json
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from ops.broker import EmbeddedBroker, free_port
from ops.executor import ExecutorProcess
from schemas.codec import encode
from streams.domain import events
from tests.integration.helpers import submit
from tests.integration.pipeline import Executors, cluster_file, fake_item, new_queue, submit_jobs, wait_states
from tests.integration.workers import Worker, poll, running_worker

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def worker(broker: EmbeddedBroker, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Worker]:
    with running_worker(broker, tmp_path_factory, "metrics", FLOTILLA_SCHEDULE_PERIOD_S="0.5", FLOTILLA_LOG_FORMAT="json") as started:
        yield started


@pytest.fixture(scope="module")
def run(worker: Worker, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ExecutorProcess, int, str, str]]:
    """A fake executor (its HTTP port) and a short run: jobs that succeed, one running, one too big, a rejection,
    a duplicate and an event for a job nobody submitted."""
    directory = tmp_path_factory.mktemp("metrics-executors")
    executors = Executors(worker, directory)
    port = free_port()
    spec = cluster_file(
        directory / "cluster.yaml", [{"count": 2, "prefix": "node", "cpu": "4", "memory": "8Gi", "labels": executors.selector}]
    )
    executor = executors.start("metrics-fake", "fake", "--cluster", str(spec), "--http-port", str(port))
    queue = new_queue(worker, f"metrics-{uuid.uuid4().hex[:6]}")
    done = submit_jobs(worker, queue, "short", [fake_item(executors.selector, runtime_s=0.5) for _ in range(4)])
    (long,) = submit_jobs(worker, queue, "long", [fake_item(executors.selector, runtime_s=300)])
    too_big = submit_jobs(worker, queue, "big", [fake_item(executors.selector, cpu="64")])
    twice = {**fake_item(executors.selector, runtime_s=0.5), "client_id": "same"}
    status, body = submit(worker.client, queue, "mixed", [twice, twice, {"priority": -1}])
    assert status == 207 and body["job_ids"][0] == body["job_ids"][1] and body["job_ids"][2] is None
    done.append(body["job_ids"][0])
    unknown = f"NOBODY{uuid.uuid4().hex[:10].upper()}"
    running = events.event(
        unknown, int(time.time() * 1000), unknown, events.payload("JobRunRunning", {"run_id": f"{unknown}-1", "node": "n"})
    )
    (sequence,) = events.sequences(queue, "ghost", "test", [], [running])
    worker.produce("events", [(events.sequence_key(queue, "ghost").encode(), encode("event_sequence", sequence))])
    wait_states(worker, done, {"succeeded"}, 60, "the short jobs to succeed")
    wait_states(worker, [long], {"running"}, 60, "the long job to run")
    assert too_big
    try:
        yield executor, port, queue, unknown
    finally:
        worker.client.call("POST", f"/api/v1/jobs/{long}/cancel", {"reason": "test over"})
        executors.stop_all()


def families(url: str) -> dict[str, list[Any]]:
    with urllib.request.urlopen(f"{url}/metrics", timeout=10) as response:
        text = response.read().decode()
    return {family.name: family.samples for family in text_string_to_metric_families(text)}


def test_every_worker_metric_family_has_samples_after_a_short_run(worker: Worker, run: tuple[ExecutorProcess, int, str, str]) -> None:
    _, _, queue, _ = run

    def complete() -> dict[str, list[Any]] | None:
        """Every family sampled, and cycles after the short jobs ended (their run's end reaches the scheduler later)."""
        found = families(worker.url)
        settled = [s.value for s in found["flotilla_queue_allocation"] if s.labels["resource"] == "cpu"] == [1.0]
        return found if all(found.values()) and settled else None

    try:
        found = poll(complete, 30, "samples in every family")
    except AssertionError:
        empty = sorted(name for name, samples in families(worker.url).items() if not samples)
        raise AssertionError(f"families without samples: {empty}") from None
    assert {s.labels["queue"] for s in found["flotilla_queue_fair_share"]} == {queue}
    assert {s.labels["resource"] for s in found["flotilla_queue_allocation"]} == {"cpu", "memory"}  # the long job's
    assert {s.labels["reason"] for s in found["flotilla_scheduling_unschedulable_jobs"]}
    assert {s.labels["agent"] for s in found["flotilla_consumer_lag_messages"]} == {"ingest", "job-state", "executor-reports", "scheduler"}
    batches, messages = (
        {s.labels["agent"]: s.value for s in found[name] if s.name.endswith("_total")}
        for name in ("flotilla_agent_batches", "flotilla_agent_batch_messages")
    )
    assert batches.keys() == messages.keys() == {"ingest", "job-state", "executor-reports", "scheduler"}
    assert all(0 < batches[agent] <= messages[agent] for agent in batches), (batches, messages)
    capacity = {s.labels["resource"]: s.value for s in found["flotilla_executor_capacity"] if s.labels["executor"] == "metrics-fake"}
    assert capacity["cpu"] == 8.0 and capacity["memory"] == 16 * 2**30
    assert found["flotilla_table_recovery_seconds"][0].value >= 0
    jobs = {(s.labels["queue"], s.labels["state"]): s.value for s in found["flotilla_queue_jobs"]}
    assert (jobs[(queue, "succeeded")], jobs[(queue, "running")], jobs[(queue, "queued")]) == (5, 1, 1)


def test_the_executor_serves_health_and_metrics_with_every_family_sampled(run: tuple[ExecutorProcess, int, str, str]) -> None:
    _, port, _, _ = run
    url = f"http://127.0.0.1:{port}"
    with urllib.request.urlopen(f"{url}/health", timeout=10) as response:
        assert json.loads(response.read()) == {"status": "ok", "executor": "metrics-fake"}
    found = families(url)
    assert {name for name in found if name.startswith("flotilla_")} >= {
        "flotilla_executor_commands",
        "flotilla_executor_run_events",
        "flotilla_executor_reports_sent",
        "flotilla_executor_last_report_timestamp_seconds",
        "flotilla_executor_reported_nodes",
        "flotilla_executor_held_runs",
    }
    assert all(samples for name, samples in found.items() if name.startswith("flotilla_")), found
    held = {s.labels["state"]: s.value for s in found["flotilla_executor_held_runs"]}
    assert (held["running"], held["succeeded"]) == (1, 5)


def json_lines(path: Path) -> list[dict[str, Any]]:
    lines = [line for line in path.read_text().splitlines() if line.startswith("{")]
    return [json.loads(line) for line in lines]


def test_worker_and_executor_write_json_log_lines_with_the_fields_they_concern(
    worker: Worker, run: tuple[ExecutorProcess, int, str, str]
) -> None:
    executor, _, queue, unknown = run

    def about_unknown() -> list[dict[str, Any]] | None:
        lines = json_lines(worker.log_path)
        return lines if any(line.get("job_id") == unknown for line in lines) else None

    worker_lines = poll(about_unknown, 30, "the worker's log line about the unknown job")
    assert all({"time", "level", "logger", "message"} <= line.keys() for line in worker_lines)
    (about,) = [line for line in worker_lines if line.get("job_id") == unknown]
    assert about["queue"] == queue and about["job_set"] == "ghost" and about["level"] == "warning"
    executor_lines = json_lines(executor.log_path)
    assert executor_lines and all(line["executor"] == "metrics-fake" for line in executor_lines)
