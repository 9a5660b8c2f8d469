"""A real `flotilla-executor` process on the embedded broker, with no control plane: lease commands
are produced by hand and what the executor says is read back from `events` and `executor-reports`.
"""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition

from ops.broker import EmbeddedBroker
from ops.executor import ExecutorProcess
from schemas.codec import decode, encode
from streams.config import Settings
from streams.topics import ensure_topics
from tests.executor.builders import job_spec
from tests.integration.log import produce, read_topic
from tests.integration.workers import poll

pytestmark = pytest.mark.integration

RUNTIME_ANNOTATION = "flotilla.io/fake-runtime-seconds"
OUTCOME_ANNOTATION = "flotilla.io/fake-outcome"


@dataclass
class Log:
    """One test's topics on the shared broker, and its executors."""

    broker: EmbeddedBroker
    directory: Path
    prefix: str
    started: list[ExecutorProcess]

    @property
    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("FLOTILLA_")}
        env.update(
            FLOTILLA_BROKER=self.broker.url,
            FLOTILLA_TOPIC_PREFIX=self.prefix,
            FLOTILLA_APP_ID=self.prefix.rstrip("."),
            FLOTILLA_PARTITIONS="2",  # the executor must consume every partition
            PYTHONUNBUFFERED="1",
        )
        return env

    def executor(self, executor_id: str, backend: str, *args: str) -> ExecutorProcess:
        process = ExecutorProcess(executor_id, backend, self.env, self.directory / f"{executor_id}.log", args)
        self.started.append(process)
        return process

    def command(self, executor_id: str, kind: str, run_id: str, job_id: str, **fields: Any) -> None:
        record = {
            "command_id": uuid.uuid4().hex,
            "executor": executor_id,
            "kind": kind,
            "job_id": job_id,
            "run_id": run_id,
            "queue": "queue-a",
            "job_set_id": "set-a",
            "node": None,
            "spec": None,
            "grace_period_seconds": None,
            "reason": None,
            "created": int(time.time() * 1000),
            **fields,
        }
        produce(self.broker.bootstrap, f"{self.prefix}executor-commands", [(executor_id.encode(), encode("executor_command", record))])

    def lease(self, executor_id: str, run_id: str, node: str, spec: dict[str, Any]) -> None:
        self.command(executor_id, "lease", run_id, f"job-of-{run_id}", node=node, spec=spec)

    def events(self) -> list[tuple[str, str, str, dict[str, Any], dict[str, Any]]]:
        """(key, kind, run id or job id, payload, sequence) for every event, per partition in order."""
        found = []
        records = sorted(read_topic(self.broker.bootstrap, f"{self.prefix}events"), key=lambda r: (r.partition, r.offset))
        for record in records:
            sequence = decode("event_sequence", record.value)
            for event in sequence["events"]:
                name, payload = event["payload"]
                found.append(((record.key or b"").decode(), name.rsplit(".", 1)[-1], event["job_id"], payload, sequence))
        return found

    def kinds(self, job_id: str) -> list[str]:
        return [kind for _, kind, job, _, _ in self.events() if job == job_id]

    def committed(self, group: str) -> int:
        """Commands the consumer group ``group`` committed, over every partition."""

        async def fetch() -> int:
            topic = f"{self.prefix}executor-commands"
            consumer = AIOKafkaConsumer(bootstrap_servers=self.broker.bootstrap, group_id=group, enable_auto_commit=False)
            await consumer.start()
            try:
                partitions = [TopicPartition(topic, p) for p in range(2)]
                consumer.assign(partitions)
                return sum([await consumer.committed(tp) or 0 for tp in partitions])
            finally:
                await consumer.stop()

        return asyncio.run(fetch())

    def reports(self) -> list[dict[str, Any]]:
        return [decode("executor_report", r.value) for r in read_topic(self.broker.bootstrap, f"{self.prefix}executor-reports")]


@pytest.fixture
def log(broker: EmbeddedBroker, tmp_path: Path) -> Iterator[Log]:
    prefix = f"it-executor-{uuid.uuid4().hex[:8]}."
    settings = Settings(broker=broker.url, topic_prefix=prefix, app_id=prefix.rstrip("."), partitions=2)
    asyncio.run(ensure_topics(settings))
    found = Log(broker, tmp_path, prefix, [])
    try:
        yield found
    finally:
        for process in found.started:
            process.stop()
            if process.process is not None and process.process.returncode not in (0, -9):
                print(process.log_tail())


def test_a_fake_executor_runs_leases_reports_them_and_ignores_other_executors_commands(log: Log) -> None:
    executor = log.executor("fake-1", "fake", "--nodes", "3").start()
    produce(log.broker.bootstrap, f"{log.prefix}executor-commands", [(b"fake-1", b"not a command")])  # skipped
    log.lease("fake-1", "run-ok", "node-1", job_spec(annotations={RUNTIME_ANNOTATION: "0.3"}))
    log.lease("fake-1", "run-back", "node-2", job_spec(annotations={OUTCOME_ANNOTATION: "returned"}))
    log.lease("fake-1", "run-long", "node-0", job_spec(annotations={RUNTIME_ANNOTATION: "600"}))
    log.lease("someone-else", "run-theirs", "node-0", job_spec(annotations={RUNTIME_ANNOTATION: "0.1"}))
    poll(lambda: "JobRunRunning" in log.kinds("job-of-run-long"), 30, "the long run to start")
    log.command("fake-1", "cancel_run", "run-long", "job-of-run-long", grace_period_seconds=1)
    log.command("fake-1", "cancel_run", "run-unknown", "job-of-run-unknown")  # ignored

    poll(lambda: "JobSucceeded" in log.kinds("job-of-run-ok"), 30, "the short run to succeed")
    poll(lambda: "JobRunFailed" in log.kinds("job-of-run-long"), 30, "the cancelled run to end")
    events = log.events()
    assert log.kinds("job-of-run-ok") == ["JobRunPending", "JobRunRunning", "JobRunSucceeded", "JobSucceeded"]
    assert log.kinds("job-of-run-back") == ["JobRunPending", "JobRunFailed"]
    assert log.kinds("job-of-run-long") == ["JobRunPending", "JobRunRunning", "JobRunFailed"]
    assert log.kinds("job-of-run-theirs") == []
    assert log.kinds("job-of-run-unknown") == []
    by_kind = {(job, kind): payload for _, kind, job, payload, _ in events}
    assert by_kind[("job-of-run-ok", "JobRunRunning")] == {"run_id": "run-ok", "node": "node-1"}
    assert by_kind[("job-of-run-back", "JobRunFailed")]["category"] == "lease_returned"
    assert by_kind[("job-of-run-back", "JobRunFailed")]["retryable"] is True
    assert by_kind[("job-of-run-long", "JobRunFailed")]["category"] == "cancelled"
    assert {key for key, *_ in events} == {"queue-a/set-a"}
    assert {sequence["user"] for *_, sequence in events} == {"executor:fake-1"}

    def report_with_ended_runs() -> dict[str, Any] | None:
        """The latest report made after the runs ended: reports go out every second, so the one made
        between run-ok's end and the cancel of run-long (sent once it ran) may be the latest for a while."""
        for report in reversed(log.reports()):
            states = {r["run_id"]: r["state"] for r in report["runs"]}
            if states.get("run-ok") == "succeeded" and states.get("run-long") not in (None, "pending", "running"):
                return report
        return None

    report = poll(report_with_ended_runs, 15, "a report listing the ended runs")
    assert report["executor"] == "fake-1"
    assert report["pool"] == "default"
    assert [node["name"] for node in report["nodes"]] == ["node-0", "node-1", "node-2"]
    assert {r["run_id"]: r["state"] for r in report["runs"]} == {"run-ok": "succeeded", "run-back": "returned", "run-long": "cancelled"}
    # every command was acted on (or skipped) and committed, other executors' and garbage included
    poll(lambda: log.committed(f"{log.prefix.rstrip('.')}-executor-fake-1") == 7, 15, "offsets of all 7 commands committed")
    executor.stop()
    assert executor.process is not None and executor.process.returncode == 0, executor.log_tail()


def test_a_fake_executor_refuses_at_once_a_run_id_it_holds_for_another_job_and_a_job_it_finished(log: Log) -> None:
    """Issue 21: either lease is answered with the run returned, not with silence."""
    executor = log.executor("fake-2", "fake", "--nodes", "2").start()
    log.command("fake-2", "lease", "run-shared", "job-a", node="node-0", spec=job_spec(annotations={RUNTIME_ANNOTATION: "600"}))
    log.command("fake-2", "lease", "run-c-1", "job-c", node="node-1", spec=job_spec(annotations={RUNTIME_ANNOTATION: "0.1"}))
    poll(lambda: "JobSucceeded" in log.kinds("job-c"), 30, "job c to succeed")
    log.command("fake-2", "lease", "run-shared", "job-b", node="node-1", spec=job_spec())
    log.command("fake-2", "lease", "run-c-2", "job-c", node="node-1", spec=job_spec())

    poll(lambda: "JobRunFailed" in log.kinds("job-b") and log.kinds("job-c")[-1] == "JobRunFailed", 30, "both refusals")
    failed = {(job, payload["run_id"]): payload for _, kind, job, payload, _ in log.events() if kind == "JobRunFailed"}
    assert {key: (p["category"], p["retryable"], p["reason"]) for key, p in failed.items()} == {
        ("job-b", "run-shared"): ("lease_returned", True, "run_id_in_use"),
        ("job-c", "run-c-2"): ("lease_returned", True, "job_already_finished"),
    }
    assert log.kinds("job-b") == ["JobRunFailed"]
    assert log.kinds("job-a")[0] == "JobRunPending" and not {"JobRunFailed", "JobSucceeded"} & set(log.kinds("job-a")), "a's run goes on"
    executor.stop()
    assert executor.process is not None and executor.process.returncode == 0, executor.log_tail()


def test_a_local_run_outlives_a_killed_executor_and_its_outcome_is_reported_once(log: Log, tmp_path: Path) -> None:
    marker = tmp_path / "starts"
    state_dir = tmp_path / "state"
    executor = log.executor("local-1", "local", "--nodes", "1", "--state-dir", str(state_dir)).start()
    spec = job_spec(args=[f"echo started >> {marker}; sleep 3; echo finished"])
    log.lease("local-1", "run-survivor", "local-0", spec)
    poll(lambda: "JobRunRunning" in log.kinds("job-of-run-survivor"), 30, "the run to start")

    executor.kill()
    executor.start()
    log.lease("local-1", "run-survivor", "local-0", spec)  # a replayed lease starts no second process
    log.lease("local-1", "run-after", "local-0", job_spec(args=["true"]))  # consumed after the replay
    poll(lambda: "JobSucceeded" in log.kinds("job-of-run-after"), 30, "the next run to succeed")
    poll(lambda: "JobSucceeded" in log.kinds("job-of-run-survivor"), 30, "the survivor to succeed")

    assert marker.read_text() == "started\n"
    kinds = log.kinds("job-of-run-survivor")
    assert kinds.count("JobRunSucceeded") == 1 and kinds.count("JobSucceeded") == 1
    assert kinds[0] == "JobRunPending" and kinds[-2:] == ["JobRunSucceeded", "JobSucceeded"]
    assert (state_dir / "runs" / "run-survivor" / "output.log").read_text() == "finished\n"
