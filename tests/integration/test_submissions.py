"""1,000 submitted jobs reach `queued` in the jobs table, in `job-states` and through the REST API;
re-submitting the same client ids creates no new jobs.

Against the real embedded broker and a real control-plane worker (see conftest.py).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.integration.helpers import create_queue, get_job, item, submission, submit, submit_record
from tests.integration.workers import Worker, poll

pytestmark = pytest.mark.integration

QUEUE = "bulk"
REST_REQUESTS = 9  # x 100 items through POST /api/v1/jobs
DIRECT_RECORDS = 4  # x 25 items produced straight to the submissions topic
DIRECT_ITEMS = 25
TOTAL = REST_REQUESTS * 100 + DIRECT_RECORDS * DIRECT_ITEMS


def containing(mapping: dict[str, Any], key: str) -> dict[str, Any] | None:
    return mapping if key in mapping else None


def rest_batch(n: int) -> list[dict[str, Any]]:
    return [item(client_id=f"rest-{n}-{i}") for i in range(100)]


def direct_records() -> list[dict[str, Any]]:
    return [submit_record(QUEUE, "direct", [item(client_id=f"direct-{n}-{i}") for i in range(DIRECT_ITEMS)]) for n in range(DIRECT_RECORDS)]


@pytest.fixture(scope="module")
def submitted(worker: Worker) -> dict[str, str]:
    """Submits the 1,000 jobs once for the module; client id -> job id (from the REST answers
    for REST submissions, from `job-states` for the ones produced to the topic)."""
    create_queue(worker.client, QUEUE)
    by_client: dict[str, str] = {}
    for n in range(REST_REQUESTS):
        batch = rest_batch(n)
        status, body = submit(worker.client, QUEUE, f"rest-{n}", batch)
        assert status == 200, body
        assert len(body["job_ids"]) == 100 and all(body["job_ids"]), body
        by_client.update(zip((i["client_id"] for i in batch), body["job_ids"], strict=True))
    worker.produce("submissions", [submission(record) for record in direct_records()])

    def all_in_job_states() -> dict[str, dict[str, Any]] | None:
        states = worker.job_states()
        return states if len(states) >= TOTAL else None

    states = poll(all_in_job_states, 90, f"{TOTAL} jobs on job-states")
    for job_id, state in states.items():
        if state["client_id"].startswith("direct-"):
            by_client[state["client_id"]] = job_id
    return by_client


def test_every_job_is_queued_on_job_states(worker: Worker, submitted: dict[str, str]) -> None:
    states = worker.job_states()
    assert len(submitted) == TOTAL
    assert len(set(submitted.values())) == TOTAL, "two client ids were given the same job id"
    assert set(states) == set(submitted.values())
    for client_id, job_id in submitted.items():
        state = states[job_id]
        assert state["state"] == "queued", state
        assert state["client_id"] == client_id
        assert state["queue"] == QUEUE
        expected_set = "direct" if client_id.startswith("direct-") else client_id.rsplit("-", 1)[0]
        assert state["job_set_id"] == expected_set


def test_every_job_is_queued_in_the_jobs_table(worker: Worker, submitted: dict[str, str]) -> None:
    def complete() -> dict[str, dict[str, Any]] | None:
        table = worker.jobs_changelog()
        return table if len(table) >= TOTAL else None

    table = poll(complete, 60, f"{TOTAL} jobs in the jobs table changelog")
    assert set(table) == set(submitted.values())
    assert {job["state"] for job in table.values()} == {"queued"}
    assert {job["client_id"]: job_id for job_id, job in table.items()} == submitted


def test_every_job_is_queued_through_the_rest_api(worker: Worker, submitted: dict[str, str]) -> None:
    for client_id, job_id in submitted.items():
        job = get_job(worker.client, job_id)
        assert job is not None and "error" not in job, (job_id, job)
        assert job["job_id"] == job_id
        assert job["state"] == "queued", job
        assert job["client_id"] == client_id
        assert job["queue"] == QUEUE
        assert job["runs"] == []


def test_resubmitting_the_same_client_ids_creates_no_new_jobs(worker: Worker, submitted: dict[str, str]) -> None:
    before = worker.job_states()
    assert len(before) == TOTAL

    for n in range(REST_REQUESTS):
        batch = rest_batch(n)
        status, body = submit(worker.client, QUEUE, f"rest-{n}", batch)
        assert status == 200, body
        assert body["job_ids"] == [submitted[i["client_id"]] for i in batch]
    # again straight to the topic, as new requests (new request ids, new log positions)
    worker.produce("submissions", [submission(record) for record in direct_records()])
    # a fresh client id behind them on the same partition: once it is folded, so are they
    status, body = submit(worker.client, QUEUE, "sentinel", [item(client_id="sentinel")])
    assert status == 200, body
    (sentinel,) = body["job_ids"]
    assert sentinel not in submitted.values()

    after = poll(lambda: containing(worker.job_states(), sentinel), 60, "the sentinel job on job-states")
    assert set(after) == set(before) | {sentinel}, f"{len(set(after) - set(before) - {sentinel})} new job(s) appeared"
    for job_id, state in before.items():
        assert after[job_id] == state, f"job {job_id} changed on re-submission"

    table = poll(lambda: containing(worker.jobs_changelog(), sentinel), 60, "the sentinel job in the jobs table")
    assert set(table) == set(before) | {sentinel}


def test_job_is_readable_as_soon_as_submit_answers(worker: Worker, submitted: dict[str, str]) -> None:
    """README: "Writes go to the log; the API answers once their effect is visible, so a 2xx can
    be relied on." A job id from a 200 answer must therefore be found by GET /api/v1/jobs/{id}."""
    missing = []
    for n in range(5):
        status, body = submit(worker.client, QUEUE, "read-your-writes", [item(client_id=f"ryw-{n}-{i}") for i in range(20)])
        assert status == 200, body
        for job_id in body["job_ids"]:
            job = get_job(worker.client, job_id)
            if job is None or job.get("state") != "queued":
                missing.append((job_id, job))
    assert not missing, f"{len(missing)} of 100 accepted jobs were not readable right after the 200: {missing[:3]}"


def test_metrics_count_what_the_pipeline_did(worker: Worker, submitted: dict[str, str]) -> None:
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    states = worker.job_states()
    with urllib.request.urlopen(f"{worker.url}/metrics", timeout=10) as response:
        assert response.headers["Content-Type"].startswith("text/plain")
        families = {f.name: f for f in text_string_to_metric_families(response.read().decode())}

    def value(family: str, **labels: str) -> float:
        return sum(s.value for s in families[family].samples if s.name.endswith("_total") and labels.items() <= s.labels.items())

    assert value("flotilla_jobs_submitted", queue=QUEUE) == len(states) >= TOTAL
    assert value("flotilla_jobs_deduplicated", queue=QUEUE) >= TOTAL  # the re-submission of every client id
    assert value("flotilla_jobs_rejected", queue=QUEUE) == 0
    assert value("flotilla_events", outcome="applied") >= len(states)
    assert value("flotilla_submissions", outcome="malformed") == 0


WHOLE = {
    "restartPolicy": "Never",
    "securityContext": {"runAsNonRoot": True},
    "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "datasets"}}],
    "containers": [
        {
            "name": "main",
            "image": "busybox:1.36",
            "command": ["sh", "-c", "true"],
            "volumeMounts": [{"name": "data", "mountPath": "/data"}],
            "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {"cpu": "100m", "memory": "64Mi"}},
        }
    ],
}


def test_a_pod_spec_given_whole_is_kept_whole_over_rest_and_from_a_producer(worker: Worker) -> None:
    """Runs last (its jobs are not counted above). The scheduler reads what it needs, the rest travels."""
    create_queue(worker.client, "whole")
    status, body = submit(worker.client, "whole", "rest", [{"priority": 1.0, "pod_spec": {"manifest": WHOLE}}])
    assert status == 200, body
    status, refused = submit(worker.client, "whole", "rest", [{"priority": 1.0, "pod_spec": {"manifest": {**WHOLE, "hostPID": True}}}])
    assert status == 422 and "pod spec field hostPID is refused" in refused["items"][0]["error"], refused
    # A producer of the submissions topic gives the manifest alone: what Flotilla reads is derived from it.
    worker.produce(
        "submissions", [submission(submit_record("whole", "direct", [{"client_id": "whole-1", "pod_spec": {"manifest": WHOLE}}]))]
    )

    def both() -> list[dict[str, Any]] | None:
        found = [job for job in worker.job_states().values() if job["queue"] == "whole"]
        return found if len(found) == 2 else None

    def specs() -> dict[str, dict[str, Any]] | None:
        found = {job_id: spec for job_id, spec in worker.job_specs().items() if job_id in jobs}
        return found if len(found) == len(jobs) else None

    jobs = {job["job_id"]: job for job in poll(both, 30, "both jobs on job-states")}
    for job_id, whole in poll(specs, 30, "their specs on job-specs").items():
        spec, job = whole["pod_spec"], jobs[job_id]
        assert json.loads(spec["manifest"]) == WHOLE, job["job_set_id"]
        assert spec["containers"][0]["resources"]["requests"] == {"cpu": "100m", "memory": "64Mi"}, job["job_set_id"]
