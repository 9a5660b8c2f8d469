"""Nothing lost, nothing doubled: jobs run to the end while the worker is SIGKILLed three times.

Two fake executors run short jobs; the control-plane worker is killed mid-run three times, once
with its data directory deleted, and started again with the same identity. Then the log must
show every job succeeded exactly once (one succeeded run, no lease after success), no run id
leased to two jobs, and each job's last `job-states` record saying what folding `events` gives.
The batched agents write a batch's tables and messages before Faust commits its input offsets,
and every handler is idempotent, so a batch replayed after a kill changes nothing.
"""

from __future__ import annotations

import os
import random
from collections import Counter, defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ops.broker import EmbeddedBroker, free_port
from schemas.codec import decode
from streams.domain.jobs import apply_event
from tests.integration.helpers import create_queue, submission, submit_record
from tests.integration.pipeline import Executors, fake_item, states
from tests.integration.workers import Worker, poll, remove_tree, running_worker

pytestmark = pytest.mark.integration

# The suite runs one seed of 3,000 jobs (about 2 minutes here); FLOTILLA_CHAOS_JOBS=20000 and
# FLOTILLA_CHAOS_SEED=N run the size and other seeds by hand.
JOBS = int(os.environ.get("FLOTILLA_CHAOS_JOBS", "3000"))
SEED = int(os.environ.get("FLOTILLA_CHAOS_SEED", "21"))
PER_REQUEST = 100


@pytest.fixture
def worker(broker: EmbeddedBroker, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Worker]:
    with running_worker(broker, tmp_path_factory, "chaos", FLOTILLA_EXECUTOR_TIMEOUT_S="6", FLOTILLA_SCHEDULE_PERIOD_S="0.5") as started:
        yield started


def fold_events(worker: Worker) -> tuple[dict[str, dict[str, Any]], dict[str, list[tuple[str, dict[str, Any]]]]]:
    """Every job as folding `events` from the start gives it, and each job's events in log order."""
    jobs: dict[str, dict[str, Any]] = {}
    history: dict[str, list[tuple[str, dict[str, Any]]]] = defaultdict(list)
    for record in sorted(worker.read(worker.topic("events")), key=lambda r: (r.partition, r.offset)):
        sequence = decode("event_sequence", record.value)
        envelope = {key: sequence[key] for key in ("queue", "job_set_id", "user", "groups")}
        for event in sequence["events"]:
            job_id = event["job_id"]
            if job_id is None:
                continue
            kind, payload = event["payload"]
            history[job_id].append((kind.rsplit(".", 1)[-1], payload))
            try:
                folded = apply_event(jobs.get(job_id), kind, event, envelope)
            except ValueError:
                continue
            if folded is not None:
                jobs[job_id] = folded
    return jobs, history


def test_every_job_succeeds_exactly_once_through_three_worker_kills(worker: Worker, tmp_path: Path) -> None:
    rng = random.Random(SEED)
    executors = Executors(worker, tmp_path)
    try:
        queue = create_queue(worker.client, f"chaos-{SEED}")["name"]
        executors.fake("chaos-a", nodes=8, cpu="16")
        executors.fake("chaos-b", nodes=8, cpu="16")  # 256 slots for jobs of 0.5 to 1.5 s
        items = [fake_item(executors.selector, runtime_s=round(rng.uniform(0.5, 1.5), 2)) for _ in range(JOBS)]
        worker.produce(
            "submissions",
            [submission(submit_record(queue, f"set-{n // 1000}", items[n : n + PER_REQUEST])) for n in range(0, JOBS, PER_REQUEST)],
        )

        def succeeded() -> int:
            return sum(1 for job in worker.job_states().values() if job["state"] == "succeeded")

        for kill, lose_data in ((1, False), (2, True), (3, False)):
            poll(lambda kill=kill: succeeded() >= kill * JOBS // 4, 240, f"{kill * JOBS // 4} jobs to succeed before kill {kill}", 1.0)
            worker.kill()
            if lose_data:
                remove_tree(worker.data_dir)
            worker.web_port = free_port()
            worker.start()

        poll(lambda: succeeded() >= JOBS, 120 + JOBS // 20, f"all {JOBS} jobs to succeed after the kills", 2.0)
        folded, history = fold_events(worker)
        published = worker.job_states()
    finally:
        executors.stop_all()

    problems: list[str] = []
    submitted = [job_id for job_id, events in history.items() if any(kind == "JobSubmitted" for kind, _ in events)]
    if len(submitted) != JOBS:
        problems.append(f"{len(submitted)} jobs submitted on the log, not {JOBS}")
    succeeded_runs = {job_id: {p["run_id"] for kind, p in events if kind == "JobRunSucceeded"} for job_id, events in history.items()}
    doubled = [job_id for job_id, runs in succeeded_runs.items() if len(runs) > 1]
    if doubled:
        problems.append(f"{len(doubled)} jobs succeeded in more than one run, e.g. {doubled[:3]}")
    not_done = [job_id for job_id in submitted if folded[job_id]["state"] != "succeeded"]
    if not_done:
        problems.append(f"{len(not_done)} jobs did not end succeeded on events, e.g. {[(j, folded[j]['state']) for j in not_done[:3]]}")
    leased_after: list[str] = []
    for job_id, events in history.items():
        kinds = [kind for kind, _ in events]
        if "JobSucceeded" in kinds and "JobLeased" in kinds[kinds.index("JobSucceeded") :]:
            leased_after.append(job_id)
    if leased_after:
        problems.append(f"{len(leased_after)} jobs leased again after they succeeded, e.g. {leased_after[:3]}")
    owners: dict[str, set[str]] = defaultdict(set)
    for job_id, events in history.items():
        for kind, payload in events:
            if kind == "JobLeased":
                owners[payload["run_id"]].add(job_id)
    shared = {run_id: jobs for run_id, jobs in owners.items() if len(jobs) > 1}
    if shared:
        problems.append(f"{len(shared)} run ids leased to two jobs, e.g. {list(shared.items())[:2]}")
    stale = Counter(
        (published.get(job_id) or {}).get("state", "missing")
        for job_id in submitted
        if published.get(job_id, {}).get("state") != folded[job_id]["state"]
    )
    if stale:
        problems.append(f"job-states disagrees with the fold of events: {dict(stale)}")
    assert not problems, "; ".join(problems)
    assert len(states(worker, submitted)) == JOBS
