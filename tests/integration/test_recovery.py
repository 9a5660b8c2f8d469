"""Kill the worker with SIGKILL, delete its local data directory, start it again: the `jobs` table
is rebuilt from its changelog and every job has the same state as before.

Jobs are first moved into different states (leased, running, cancelled, requeued, reprioritised)
with events produced to the public `events` topic, so "the same state" is not just "queued".

Found by this test (fixed since by the tansu:// transport, streams/transport.py): Tansu answers ListOffsets(latest) with the base offset of
the partition's last record batch + 1 instead of the log end offset. Faust takes that as the
changelog's high watermark and stops restoring there, so the records of the last changelog batch
(the latest states of the jobs written last, the last client ids) are not restored.
"""

from __future__ import annotations

import itertools
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from ops.broker import EmbeddedBroker, free_port
from schemas.codec import encode
from tests.integration.helpers import USER, create_queue, get_job, item, submit
from tests.integration.workers import Worker, poll, remove_tree, running_worker

pytestmark = pytest.mark.integration

QUEUE = "durable"
JOB_SETS = 3
PER_SET = 100

_clock = itertools.count(int(time.time() * 1000))


def event(job_id: str, kind: str, **payload: Any) -> dict[str, Any]:
    return {"event_id": f"it-{uuid.uuid4().hex}", "created": next(_clock), "job_id": job_id, "payload": (f"flotilla.{kind}", payload)}


def leased(job_id: str, run_id: str) -> dict[str, Any]:
    return event(
        job_id,
        "JobLeased",
        run_id=run_id,
        executor="cluster-1",
        node="node-1",
        pool="default",
        scheduled_at_priority=1000,
        cycle_id="cycle-1",
    )


def lifecycle(job_id: str, n: int) -> tuple[str, list[dict[str, Any]]]:
    """The events moving job number ``n`` to one of several states, and that state."""
    run = f"run-{n}"
    match n % 6:
        case 0:
            return "leased", [leased(job_id, run)]
        case 1:
            return "running", [
                leased(job_id, run),
                event(job_id, "JobRunPending", run_id=run),
                event(job_id, "JobRunRunning", run_id=run, node="node-2"),
            ]
        case 2:
            return "cancelled", [
                event(job_id, "JobCancelRequested", reason="by test"),
                event(job_id, "JobCancelled", run_id=None, reason="by test"),
            ]
        case 3:
            return "queued", [
                leased(job_id, run),
                event(job_id, "JobRequeued", run_id=run, reason="lease returned", avoid_nodes=["node-1"]),
            ]
        case 4:
            return "queued", [event(job_id, "JobReprioritised", new_priority=7.0)]
        case _:
            return "queued", []


def sequence(job_set: str, events: list[dict[str, Any]]) -> tuple[bytes, bytes]:
    record = {"queue": QUEUE, "job_set_id": job_set, "user": USER, "groups": [], "events": events}
    return f"{QUEUE}/{job_set}".encode(), encode("event_sequence", record)


@pytest.fixture(scope="module")
def worker(broker: EmbeddedBroker, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Worker]:
    """A worker whose scheduler never runs a cycle (no early ticks either): the jobs here are leased to
    an executor that does not exist, whose leases a cycle would expire, changing the states this test compares."""
    with running_worker(broker, tmp_path_factory, "recovery", FLOTILLA_SCHEDULE_PERIOD_S="3600", FLOTILLA_EARLY_TICKS="false") as started:
        yield started


def snapshot(worker: Worker, job_ids: list[str]) -> dict[str, dict[str, Any]]:
    jobs = {job_id: get_job(worker.client, job_id) for job_id in job_ids}
    missing = [j for j, job in jobs.items() if not job or "error" in job]
    assert not missing, f"{len(missing)} jobs not found through the REST API: {missing[:3]}"
    return {job_id: job for job_id, job in jobs.items() if job is not None}


def test_jobs_table_is_rebuilt_from_the_changelog_after_sigkill_and_lost_data_dir(worker: Worker) -> None:
    create_queue(worker.client, QUEUE)
    job_ids: list[str] = []
    client_ids: list[str] = []
    batches: list[list[dict[str, Any]]] = []
    for s in range(JOB_SETS):
        batch = [item(client_id=f"durable-{s}-{i}") for i in range(PER_SET)]
        status, body = submit(worker.client, QUEUE, f"set-{s}", batch)
        assert status == 200, body
        batches.append(batch)
        job_ids += body["job_ids"]
        client_ids += [i["client_id"] for i in batch]

    expected: dict[str, str] = {}
    messages = []
    for n, job_id in enumerate(job_ids):
        state, events = lifecycle(job_id, n)
        expected[job_id] = state
        if events:
            messages.append(sequence(f"set-{n // PER_SET}", events))
    worker.produce("events", messages)
    assert set(expected.values()) == {"leased", "running", "cancelled", "queued"}

    def settled() -> dict[str, dict[str, Any]] | None:
        states = worker.job_states()
        return states if all(j in states and states[j]["state"] == s for j, s in expected.items()) else None

    poll(settled, 60, "every job in its intended state on job-states")
    before = snapshot(worker, job_ids)
    assert {j: job["state"] for j, job in before.items()} == expected
    assert sum(1 for job in before.values() if job["priority"] == 7.0) == len(job_ids) // 6
    assert sum(1 for job in before.values() if job["runs"] and job["state"] == "queued") == len(job_ids) // 6

    # the changelog has caught up with what the API shows (it is what the restart reads)
    def changelog_settled() -> bool:
        table = worker.jobs_changelog()
        return all(j in table and table[j]["state"] == s for j, s in expected.items())

    poll(changelog_settled, 60, "the jobs changelog to hold every job's state")
    # and the worker has committed its input offsets: nothing will be re-folded after the restart,
    # so what the restarted worker shows can only come from the changelogs
    for name in ("submissions", "events"):

        def caught_up(name: str = name) -> bool:
            committed, end = worker.committed(name)
            return committed == end

        poll(caught_up, 30, f"the worker to commit its offsets on {name}")

    worker.kill()
    assert worker.process is not None and worker.process.returncode == -9
    assert worker.data_dir.exists() and any(worker.data_dir.iterdir()), "the worker kept no local table data"
    remove_tree(worker.data_dir)
    worker.web_port = free_port()
    worker.start()  # same app id and topic prefix: same group, same changelogs

    after = snapshot(worker, job_ids)
    problems: list[str] = []
    changed = {j: (before[j], after[j]) for j in job_ids if before[j] != after[j]}
    if changed:
        examples = "; ".join(f"{j}: {b['state']} -> {a['state']}" for j, (b, a) in list(changed.items())[:5])
        problems.append(f"{len(changed)} of {len(job_ids)} jobs differ after recovery (before -> after), e.g. {examples}")
    assert any(worker.data_dir.iterdir()), "the rebuilt table was not written to the new data directory"
    restart_log = worker.log_path.read_text(errors="replace").rsplit("===== start #2", 1)[1]
    assert "Restoring state from changelog topics" in restart_log, "the restarted worker did not read the changelog"

    # the recovered table is live: a further event folds onto the recovered state
    leased_job = next(j for j, s in expected.items() if s == "leased" and j not in changed)
    run_id = before[leased_job]["runs"][0]["run_id"]
    worker.produce("events", [sequence(before[leased_job]["job_set"], [event(leased_job, "JobRunRunning", run_id=run_id)])])
    running = poll(
        lambda: (job := get_job(worker.client, leased_job)) and job["state"] == "running" and job,
        30,
        f"job {leased_job} to move from the recovered leased state to running",
    )
    assert running["runs"][0]["run_id"] == run_id and len(running["runs"]) == 1

    # the client-id index survived too: re-submitting gives the same job ids and creates nothing
    duplicated = []
    for s, batch in enumerate(batches):
        status, body = submit(worker.client, QUEUE, f"set-{s}", batch)
        assert status == 200, body
        original = job_ids[s * PER_SET : (s + 1) * PER_SET]
        duplicated += [(c["client_id"], new) for c, old, new in zip(batch, original, body["job_ids"], strict=True) if new != old]
    if duplicated:
        problems.append(f"{len(duplicated)} re-submitted client ids got a NEW job id after recovery, e.g. {duplicated[:3]}")
    status, body = submit(worker.client, QUEUE, "after-restart", [item(client_id="after-restart")])
    assert status == 200, body
    (fresh,) = body["job_ids"]
    assert fresh not in job_ids

    def with_fresh() -> dict[str, dict[str, Any]] | None:
        found = worker.job_states()
        return found if fresh in found else None

    states = poll(with_fresh, 30, "the new job on job-states")
    assert states[fresh]["state"] == "queued"
    if set(states) != set(job_ids) | {fresh}:
        problems.append(f"{len(set(states) - set(job_ids) - {fresh})} unexpected new jobs on job-states")
    assert not problems, "\n".join(problems)
