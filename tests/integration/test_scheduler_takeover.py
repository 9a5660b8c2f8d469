"""SIGKILL the worker that owns the scheduling agent mid-load and start it again.

No job may be lost, none may run twice at once, and scheduling must resume: the restarted
worker rebuilds the scheduler's index from its changelog-backed table and carries on.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest

from ops.broker import EmbeddedBroker, free_port
from tests.integration.pipeline import Executors, events, fake_item, new_queue, states, submit_jobs, wait_states
from tests.integration.workers import Worker, expiring_after, poll, running_worker

pytestmark = pytest.mark.integration


@pytest.fixture
def worker(broker: EmbeddedBroker, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Worker]:
    with running_worker(broker, tmp_path_factory, "takeover", expiring_after(6), FLOTILLA_SCHEDULE_PERIOD_S="0.5") as started:
        yield started


def test_scheduling_resumes_after_the_scheduler_worker_is_killed(worker: Worker, tmp_path: Path) -> None:
    executors = Executors(worker, tmp_path)
    try:
        queue = new_queue(worker, "takeover")
        executors.fake("takeover-c1", nodes=4)  # 32 slots for 400 jobs of 1 to 2 s: about 20 s of work
        job_ids = submit_jobs(worker, queue, "load", [fake_item(executors.selector, runtime_s=1 + (i % 2)) for i in range(400)])
        poll(lambda: sum(1 for j in states(worker, job_ids).values() if j["state"] == "succeeded") >= 60, 90, "the load under way", 0.5)

        worker.kill()
        worker.web_port = free_port()
        worker.start()  # same data dir, app id and prefix: the same group takes the feed back

        done = wait_states(worker, job_ids, {"succeeded"}, 180, "all 400 jobs to succeed after the restart")
    finally:
        executors.stop_all()

    for job in done.values():
        assert [r["state"] for r in job["runs"]].count("succeeded") == 1, job
    # Nothing ran that the fold did not accept: every run an executor reported is a run of the job.
    runs = {job_id: {r["run_id"] for r in job["runs"]} for job_id, job in done.items()}
    reported: dict[str, set[str]] = defaultdict(set)
    for kind, job_id, _, payload in events(worker, queue):
        if kind in ("JobRunPending", "JobRunRunning", "JobRunSucceeded") and job_id is not None:
            reported[job_id].add(payload["run_id"])
    stray = {job_id: reported[job_id] - runs[job_id] for job_id in job_ids if reported[job_id] - runs[job_id]}
    assert not stray, f"runs executed but never accepted (leased twice at once): {stray}"
