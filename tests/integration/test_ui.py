"""The web UI in headless Chromium, and the job query API it reads, against a real worker and a local executor.

The journeys of a user: a queue is created and a job submitted through the API, the job is
watched on the jobs page until it succeeds, its page shows its runs and its logs; a running job
is cancelled from its page; a user without permission on the queue is refused; a job set's page
counts its jobs, a job is reprioritised and preempted from its page, a button used with a token
without permission shows the API's refusal, and a cordoned queue says so. Screenshots of
each step go to the test's directory (`ui-shots` under pytest's base temp).
"""

from __future__ import annotations

import json
import urllib.request
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from ops.broker import EmbeddedBroker, free_port
from ops.executor import ExecutorProcess
from streams.api.rest.openapi import DOCUMENT
from streams.client.rest import Client, ClientError
from tests.integration.browser import Page, chromium
from tests.integration.helpers import job_set_events
from tests.integration.workers import Worker, poll, running_worker

pytestmark = pytest.mark.integration

TOKENS = {
    "root-token": {"user": "root", "groups": ["admins"]},
    "alice-token": {"user": "alice", "groups": ["team-a"]},
    "mallory-token": {"user": "mallory", "groups": []},
}


@pytest.fixture(scope="module")
def executor_port() -> int:
    return free_port()


@pytest.fixture(scope="module")
def worker(broker: EmbeddedBroker, tmp_path_factory: pytest.TempPathFactory, executor_port: int) -> Iterator[Worker]:
    tokens = tmp_path_factory.mktemp("ui-auth") / "tokens.yaml"
    tokens.write_text(yaml.safe_dump(TOKENS))
    with running_worker(
        broker,
        tmp_path_factory,
        "ui",
        FLOTILLA_AUTH_TOKEN_FILE=str(tokens),
        FLOTILLA_SCHEDULE_PERIOD_S="0.5",
        FLOTILLA_EXECUTOR_URLS=f"ui-local=http://127.0.0.1:{executor_port}",
    ) as started:
        yield started


@pytest.fixture(scope="module")
def executor(worker: Worker, tmp_path_factory: pytest.TempPathFactory, executor_port: int) -> Iterator[ExecutorProcess]:
    directory = tmp_path_factory.mktemp("ui-executor")
    process = ExecutorProcess(
        executor_id="ui-local",
        backend="local",
        env=worker.env(),
        log_path=directory / "executor.log",
        args=("--state-dir", str(directory), "--nodes", "2", "--node-cpu", "4", "--node-memory", "4Gi", "--http-port", str(executor_port)),
    )
    process.start()
    try:
        yield process
    finally:
        process.stop()


def client(worker: Worker, token: str) -> Client:
    return Client(worker.url, timeout_s=60.0, token=token)


def shell_job(script: str, **labels: str) -> dict[str, Any]:
    amounts = {"cpu": "100m", "memory": "64Mi"}
    return {
        "priority": 0.0,
        "labels": labels,
        "pod_spec": {
            "containers": [
                {"name": "main", "image": "local", "command": ["sh", "-c", script], "resources": {"requests": amounts, "limits": amounts}}
            ],
            "termination_grace_period_seconds": 1,
        },
    }


def new_queue(worker: Worker) -> str:
    name = f"ui-{uuid.uuid4().hex[:8]}"
    client(worker, "root-token").call("POST", "/api/v1/queues", {"name": name, "priority_factor": 2.0, "user_owners": ["alice"]})
    return name


def submit(worker: Worker, queue: str, job_set: str, items: list[dict[str, Any]]) -> list[str]:
    answer = client(worker, "alice-token").call("POST", "/api/v1/jobs", {"queue": queue, "job_set_id": job_set, "items": items})
    return [str(job_id) for job_id in answer["job_ids"]]


def job_state(worker: Worker, job_id: str) -> str:
    return str(client(worker, "alice-token").call("GET", f"/api/v1/jobs/{job_id}")["state"])


@pytest.fixture
def page(
    worker: Worker, executor: ExecutorProcess, tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[Page]:
    directory = tmp_path_factory.mktemp(f"ui-shots-{request.node.name[:40]}")
    with chromium(tmp_path_factory.mktemp("chromium-profile"), directory / "chromedriver.log") as driver:
        yield Page(driver, worker.url, directory)


def sign_in(page: Page, token: str) -> None:
    page.open("/queues")
    field = page.wait(lambda d: d.find_element("id", "token"), "the token field")
    field.clear()
    field.send_keys(token)
    page.click("#token-form button")
    page.wait_text("#status", "token in use")


def test_a_job_submitted_through_the_api_is_watched_to_success_and_its_logs_read_on_its_page(worker: Worker, page: Page) -> None:
    queue = new_queue(worker)
    (job_id,) = submit(worker, queue, "first", [shell_job("echo hello-from-flotilla; sleep 1")])
    sign_in(page, "alice-token")
    page.screenshot("queues")
    page.open(f"/jobs?queue={queue}")
    row = f"tr[data-job='{job_id}']"
    page.wait_text(row, queue)
    page.screenshot("jobs-page-job-listed")
    page.wait_text(row, "succeeded", timeout=60)  # the page refreshes itself
    page.screenshot("jobs-page-job-succeeded")
    page.click(f"{row} a[href='#/job/{job_id}']")
    page.wait_text("#job-state", "succeeded")
    page.wait_text("#job-logs", "hello-from-flotilla")
    page.wait_text("main", "JobSucceeded")  # its events
    page.wait_text("#job-spec", "hello-from-flotilla")  # its spec
    assert "ui-local" in page.text("main")  # the run's executor
    page.screenshot("job-page-succeeded-with-logs")


def test_a_running_job_is_cancelled_from_its_page_and_its_queue_shows_its_share(worker: Worker, page: Page) -> None:
    queue = new_queue(worker)
    (job_id,) = submit(worker, queue, "long", [shell_job("sleep 120")])
    poll(lambda: job_state(worker, job_id) == "running", 60, f"job {job_id} running")
    sign_in(page, "alice-token")
    row = page.wait_text(f"tr[data-queue='{queue}']", "100.0%")  # the only active queue holds its whole fair share
    assert " 2 " in f" {row} "  # its weight (priority factor)
    page.screenshot("queues-page-with-share")
    page.open(f"/job/{job_id}")
    page.wait_text("#job-state", "running")
    page.click("#cancel-job")
    page.wait_text("#status", "request written")
    page.wait_text("#job-state", "cancelled", timeout=60)
    page.screenshot("job-page-cancelled")
    assert job_state(worker, job_id) == "cancelled"


def test_a_user_without_permission_on_the_queue_sees_the_refusal(worker: Worker, page: Page) -> None:
    queue = new_queue(worker)
    (job_id,) = submit(worker, queue, "private", [shell_job("true")])
    sign_in(page, "mallory-token")
    page.open(f"/job/{job_id}")
    refusal = page.wait_text("main", "may not watch")
    assert "HTTP 403" in refusal and "mallory" in refusal
    page.screenshot("job-page-refused")
    page.open(f"/jobs?queue={queue}")
    page.wait_text("main", "partitions")
    assert job_id not in page.text("main")  # listing shows only the queues the user may watch
    page.screenshot("jobs-page-nothing-visible")


def test_a_job_sets_page_counts_its_jobs_and_the_job_buttons_act_or_show_the_apis_refusal(worker: Worker, page: Page) -> None:
    queue = new_queue(worker)
    first, second = submit(worker, queue, "buttons", [shell_job("sleep 120"), shell_job("sleep 120")])
    poll(lambda: job_state(worker, first) == job_state(worker, second) == "running", 60, "both jobs running")
    sign_in(page, "alice-token")
    page.open(f"/jobset/{queue}/buttons")
    page.wait_text("td[data-state='running']", "2")
    assert page.text("td[data-state='queued']") == "0"
    assert first in page.text("main") and second in page.text("main")
    page.screenshot("job-set-page")

    page.open(f"/job/{first}")
    page.wait_text("#job-state", "running")
    priority = page.wait(lambda d: d.find_element("id", "new-priority"), "the priority field")
    priority.clear()
    priority.send_keys("7")
    page.click("#reprioritize-job")
    page.wait_text("#status", "Reprioritise: request written")
    poll(lambda: client(worker, "alice-token").call("GET", f"/api/v1/jobs/{first}")["priority"] == 7, 30, "the new priority")
    page.wait_text("main", "7 (")  # the page shows it once refreshed
    page.click("#preempt-job")
    page.wait_text("#status", "Preempt: request written")
    page.wait_text("#job-state", "preempted", timeout=60)
    page.screenshot("job-page-reprioritised-and-preempted")

    # The buttons call the API with the token in use: one without permission on the queue is refused, with the reason.
    page.open(f"/job/{second}")
    page.wait_text("#job-state", "running")
    page.driver.execute_script("sessionStorage.setItem('flotilla-token', 'mallory-token')")
    page.click("#cancel-job")
    refusal = page.wait_text("#status", "Cancel refused")
    assert "may not cancel" in refusal and "HTTP 403" in refusal, refusal
    page.screenshot("job-page-cancel-refused")
    assert job_state(worker, second) == "running"

    # The queues page shows the queue's usage (its one running job of 100m) and, once cordoned, its cordon.
    sign_in(page, "alice-token")
    page.wait_text(f"tr[data-queue='{queue}']", "0.10 cpu")
    root = client(worker, "root-token")
    root.call("PUT", f"/api/v1/queues/{queue}", {**root.call("GET", f"/api/v1/queues/{queue}"), "cordoned": True})
    page.wait_text(f"tr[data-queue='{queue}']", "cordoned")  # the page refreshes itself
    page.screenshot("queues-page-usage-and-cordon")
    client(worker, "alice-token").call("POST", f"/api/v1/jobs/{second}/cancel", {"reason": "test over"})
    poll(lambda: job_state(worker, second) == "cancelled", 60, f"job {second} cancelled (its process stopped)")


# ---------------------------------------------------------------------- the job query API behind the pages


def test_jobs_are_listed_filtered_sorted_and_paged_and_counted_by_state(worker: Worker, executor: ExecutorProcess) -> None:
    queue = new_queue(worker)
    first = submit(worker, queue, "set-a", [shell_job("true", team="x") for _ in range(3)])
    second = submit(worker, queue, "set-b", [shell_job("sleep 120", team="y") for _ in range(2)])
    alice = client(worker, "alice-token")
    poll(lambda: all(job_state(worker, j) == "succeeded" for j in first), 60, "the set-a jobs to succeed")
    poll(lambda: all(job_state(worker, j) == "running" for j in second), 60, "the set-b jobs to run")

    pages, cursor = [], None
    while True:
        answer = alice.list_jobs(queues=[queue], limit=2, order="asc", cursor=cursor)
        assert len(answer.jobs) <= 2 and answer.partitions == [0] and answer.partitions_total == 1
        pages.append([job.job_id for job in answer.jobs])
        cursor = answer.next_cursor
        if cursor is None:
            break
    everything = [job_id for page_ in pages for job_id in page_]
    assert sorted(everything) == sorted(first + second) and len(pages) == 3
    submitted = [job.submitted for job in alice.list_jobs(queues=[queue], order="asc").jobs]
    assert submitted == sorted(submitted)

    assert {j.job_id for j in alice.list_jobs(queues=[queue], job_set="set-b").jobs} == set(second)
    assert {j.job_id for j in alice.list_jobs(queues=[queue], labels={"team": "x"}).jobs} == set(first)
    running = alice.list_jobs(queues=[queue], states=["running"]).jobs
    assert {j.job_id for j in running} == set(second) and all(j.node and j.executor == "ui-local" for j in running)
    assert alice.list_jobs(queues=[queue], node=running[0].node).jobs[0].node == running[0].node

    counts = {(g.job_set, state): n for g in alice.job_counts(group_by="job_set", queues=[queue]) for state, n in g.counts.items() if n}
    assert counts == {("set-a", "succeeded"): 3, ("set-b", "running"): 2}
    assert client(worker, "mallory-token").list_jobs(queues=[queue]).jobs == []
    with pytest.raises(ClientError, match="unknown state"):
        alice.list_jobs(states=["sleeping"])
    for job_id in second:
        alice.call("POST", f"/api/v1/jobs/{job_id}/cancel", {"reason": "test over"})
    # Before the module's executor stops: a run it no longer supervises would sleep on after the suite.
    poll(lambda: all(job_state(worker, j) == "cancelled" for j in second), 60, "the set-b jobs cancelled (their processes stopped)")


def test_a_jobs_events_are_those_of_its_job_set_read_whole_yet_only_its_own_records_are_read(
    worker: Worker, broker: EmbeddedBroker, executor: ExecutorProcess
) -> None:
    """GET /api/v1/jobs/{id}/events reads the records whose positions the job index keeps; the answer is
    what reading the job set from the start of `events` and keeping the job's events and the job set's
    requests gives."""
    queue = new_queue(worker)
    jobs = submit(worker, queue, "story", [shell_job("true") for _ in range(3)])
    submit(worker, queue, "other", [shell_job("true")])  # records of another job set in between
    alice = client(worker, "alice-token")
    poll(lambda: all(job_state(worker, j) == "succeeded" for j in jobs), 60, "the jobs to succeed")
    alice.call("POST", f"/api/v1/queues/{queue}/jobsets/story/reprioritize", {"priority": 3})

    def kinds(job_id: str) -> list[str]:
        return [e["kind"] for e in alice.call("GET", f"/api/v1/jobs/{job_id}/events")["events"]]

    poll(lambda: "JobReprioritised" in kinds(jobs[1]), 30, "the job set's request on a job's page")
    whole = job_set_events(broker.bootstrap, worker.topic("events"), queue, "story")
    for job_id in jobs:
        answer = alice.call("GET", f"/api/v1/jobs/{job_id}/events")["events"]
        assert answer == [e for e in whole if e["job_id"] in (job_id, None)]
        assert [e["kind"] for e in answer][:1] + [e["kind"] for e in answer][-2:] == ["JobSubmitted", "JobSucceeded", "JobReprioritised"]


def test_the_openapi_document_is_served(worker: Worker) -> None:
    with urllib.request.urlopen(f"{worker.url}/api/v1/openapi.json", timeout=10) as response:
        assert json.loads(response.read()) == json.loads(json.dumps(DOCUMENT))
