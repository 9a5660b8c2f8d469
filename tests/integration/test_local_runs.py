"""Jobs run as real processes on the local backend: exit codes, logs, and cancelling a job set."""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ops.broker import EmbeddedBroker
from tests.integration.pipeline import Executors, cancel_job_set, count_by, new_queue, states, submit_jobs, wait_states
from tests.integration.workers import ROOT, Worker, poll, running_worker

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def worker(broker: EmbeddedBroker, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Worker]:
    with running_worker(broker, tmp_path_factory, "local-runs", FLOTILLA_SCHEDULE_PERIOD_S="0.5") as started:
        yield started


@pytest.fixture(scope="module")
def local(worker: Worker, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """One local executor with 2 nodes of 10 cpus; yields the directory that holds executor state."""
    root = tmp_path_factory.mktemp("executors")
    executors = Executors(worker, root)
    executors.start("local", "local", "--nodes", "2", "--node-cpu", "10", "--node-memory", "8Gi")
    try:
        yield root
    finally:
        executors.stop_all()


def shell_item(script: str, cpu: str = "1") -> dict[str, Any]:
    amounts = {"cpu": cpu, "memory": "64Mi"}
    return {
        "priority": 0.0,
        "pod_spec": {
            "containers": [
                {"name": "main", "image": "local", "command": ["sh", "-c", script], "resources": {"requests": amounts, "limits": amounts}}
            ],
            "termination_grace_period_seconds": 1,
        },
    }


def flotilla(*args: str, worker: Worker) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "streams.client.cli", *args],
        cwd=ROOT,
        env={**worker.env(), "FLOTILLA_URL": worker.url},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_a_failing_command_ends_failed_with_its_exit_code_and_its_output_in_the_logs(worker: Worker, local: Path) -> None:
    queue = new_queue(worker, "exit-codes")
    [job_id] = submit_jobs(worker, queue, "one", [shell_item("echo hi; exit 3")])

    job = wait_states(worker, [job_id], {"failed"}, 60, "the job to fail")[job_id]
    assert job["runs"][-1]["exit_code"] == 3
    assert job["runs"][-1]["executor"] == "local"

    logs = flotilla("job", "logs", job_id, "--state-dir", str(local), worker=worker)
    assert logs.returncode == 0, logs.stderr
    assert "hi" in logs.stdout


def test_cancelling_a_job_set_ends_its_queued_and_running_jobs_and_their_processes(worker: Worker, local: Path) -> None:
    queue = new_queue(worker, "cancels")
    marker = f"flotilla-test-{uuid.uuid4().hex}"
    job_ids = submit_jobs(worker, queue, "many", [shell_item(f"sleep 300; echo {marker}") for _ in range(100)])

    poll(lambda: count_by(states(worker, job_ids), "state", frozenset({"running"}))["running"] >= 20, 90, "20 jobs running", 0.5)
    assert _processes(marker), "the running jobs are real processes"

    cancel_job_set(worker, queue, "many")
    ended = wait_states(worker, job_ids, {"cancelled"}, 60, "all 100 jobs cancelled")
    assert len(ended) == 100
    assert sum(1 for job in ended.values() if job["runs"]) >= 20, "running jobs were cancelled, not only queued ones"
    poll(lambda: not _processes(marker), 30, "the jobs' processes to be gone")


def _processes(marker: str) -> list[int]:
    """Pids whose command line mentions ``marker`` (from /proc: a fresh machine may lack pgrep)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if marker.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:  # the process ended while we looked
                continue
    return found
