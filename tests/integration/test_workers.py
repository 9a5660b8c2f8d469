"""Two and three workers in one group, four partitions: every call answers as with one worker, through
REST, Armada's gRPC client and the flotilla command line, whichever worker is asked; and when the
worker that schedules is killed mid-load, its partitions and the scheduler feed move, calls keep
working, no job is lost and no lease is doubled (issue 14).

Each test's jobs are spread over every partition (one job set per partition), and every worker is
asked about all of them, so every worker answers for jobs another one holds. Reads are made right
after the writes they depend on, without polling: a submission is answered once its jobs are
readable from any worker, a queue change once every worker's replica has it.

The module grows one group: two workers, then a third, then the scheduling one is killed (the tests
run in this order and each leaves the group as the next expects).
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import grpc
import pytest
import yaml
from armada_client.armada import event_pb2, job_pb2, submit_pb2
from armada_client.client import ArmadaClient
from armada_client.k8s.io.api.core.v1 import generated_pb2 as core
from armada_client.k8s.io.apimachinery.pkg.api.resource.generated_pb2 import Quantity
from armada_client.typings import JobState

from ops.broker import EmbeddedBroker
from tests.integration.failover import run_failover
from tests.integration.group import Group, job_set_per_partition
from tests.integration.helpers import call, create_queue, job_set_events, submit
from tests.integration.pipeline import RUNTIME_ANNOTATION, Executors, fake_item
from tests.integration.workers import ROOT, Worker, poll

pytestmark = pytest.mark.integration

PARTITIONS = 4
FLOTILLA = Path(sys.executable).parent / "flotilla"
NOWHERE = {"flotilla.io/test": "no-such-node"}  # jobs selecting it stay queued


@pytest.fixture(scope="module")
def group(broker: EmbeddedBroker, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Group]:
    found = Group(broker, tmp_path_factory.mktemp("group"), PARTITIONS, "group", extra_env={"FLOTILLA_SCHEDULE_PERIOD_S": "0.5"})
    try:
        found.add()
        found.add()
        yield found
    finally:
        found.stop()


@pytest.fixture(scope="module")
def executors(group: Group, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Executors]:
    started = Executors(group.workers[0], tmp_path_factory.mktemp("group-executors"))
    started.fake("group-c1", nodes=4)  # 32 cpu
    try:
        yield started
    finally:
        started.stop_all()


def flotilla(worker: Worker, *args: str) -> str:
    """The command line against ``worker``, with no config file to find another."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLOTILLA_")}
    env["HOME"] = str(ROOT / ".no-home")
    done = subprocess.run([str(FLOTILLA), *args, "--url", worker.url], env=env, cwd=ROOT, capture_output=True, text=True, timeout=90)
    assert done.returncode == 0, f"flotilla {' '.join(args)}: {done.stderr}"
    return done.stdout


def grpc_items(client: ArmadaClient, selector: dict[str, str], runtimes: list[float]) -> list[submit_pb2.JobSubmitRequestItem]:
    amounts = {"cpu": Quantity(string="1"), "memory": Quantity(string="1Gi")}
    container = core.Container(name="main", image="busybox:1.36", resources=core.ResourceRequirements(requests=amounts, limits=amounts))
    spec = core.PodSpec(restartPolicy="Never", nodeSelector=selector, containers=[container])
    return [
        client.create_job_request_item(priority=1, pod_spec=spec, namespace="default", annotations={RUNTIME_ANNOTATION: str(runtime)})
        for runtime in runtimes
    ]


@dataclass
class JobSet:
    """The three jobs of a job set: one that succeeds, one that runs on, one no node takes."""

    name: str
    quick: str = ""
    long: str = ""
    stuck: str = ""

    @property
    def ids(self) -> list[str]:
        return [self.quick, self.long, self.stuck]


def rest_state(worker: Worker, job_id: str) -> str:
    status, job = call(worker.client, "GET", f"/api/v1/jobs/{job_id}")
    assert status == 200, job
    return str(job["state"])


def every_call(group: Group, executors: Executors, tmp_path: Path) -> None:
    """Every call of the public APIs through every live worker, about jobs of every partition."""
    workers = group.live()
    count = len(workers)
    queue = f"every-{uuid.uuid4().hex[:6]}"
    create_queue(workers[-1].client, queue)
    for worker in workers:  # answered once every worker's replica has it
        assert call(worker.client, "GET", f"/api/v1/queues/{queue}")[0] == 200
    with ExitStack() as stack:
        clients = [ArmadaClient(stack.enter_context(grpc.insecure_channel(worker.grpc_target))) for worker in workers]
        sets: list[JobSet] = []

        # Submit through every worker in turn, REST and gRPC by turns: readable everywhere when answered.
        for partition, name in job_set_per_partition(queue, PARTITIONS).items():
            entry = partition % count
            if partition % 2 == 0:
                items = [
                    fake_item(executors.selector, runtime_s=0.5),
                    fake_item(executors.selector, runtime_s=600),
                    fake_item(NOWHERE),
                ]
                status, body = submit(workers[entry].client, queue, name, items)
                assert status == 200, body
                job_ids = body["job_ids"]
            else:
                answer = clients[entry].submit_jobs(queue, name, grpc_items(clients[entry], executors.selector, [0.5, 600]))
                answer_stuck = clients[entry].submit_jobs(queue, name, grpc_items(clients[entry], NOWHERE, [1]))
                job_ids = [item.job_id for item in [*answer.job_response_items, *answer_stuck.job_response_items]]
                assert all(job_ids), answer
            sets.append(JobSet(name, *job_ids))
            for worker in workers:
                assert {rest_state(worker, job_id) for job_id in job_ids} <= {"queued", "leased", "pending", "running", "succeeded"}
        everything = [job_id for job_set in sets for job_id in job_set.ids]

        for client in clients:
            known = client.get_job_status(everything).job_states
            assert set(known) == set(everything) and submit_pb2.UNKNOWN not in known.values()
            details = client.get_job_details(everything).job_details
            assert {job_id: (d.queue, d.jobset) for job_id, d in details.items()} == {
                job_id: (queue, job_set.name) for job_set in sets for job_id in job_set.ids
            }
            active = client.job_stub.GetActiveQueues(job_pb2.GetActiveQueuesRequest())
            assert queue in active.active_queues_by_pool["default"].queues

        poll(lambda: all(rest_state(workers[0], s.quick) == "succeeded" for s in sets), 60, "the quick jobs to succeed", 0.5)
        poll(lambda: all(rest_state(workers[0], s.long) == "running" for s in sets), 60, "the long jobs to run", 0.5)
        for worker, client in zip(workers, clients, strict=True):
            request = job_pb2.JobDetailsRequest(job_ids=[s.quick for s in sets], expand_job_run=True)
            runs = {job_id: d.job_runs[-1].run_id for job_id, d in client.job_stub.GetJobDetails(request).job_details.items()}
            found = client.get_job_run_details(list(runs.values())).job_run_details
            assert {run_id: found[run_id].job_id for run_id in runs.values()} == {run: job for job, run in runs.items()}
            assert set(client.get_job_errors(everything).job_errors) == set(everything)
            for job_set in sets:
                assert call(worker.client, "GET", f"/api/v1/jobs/{job_set.quick}/spec")[0] == 200
                status, history = call(worker.client, "GET", f"/api/v1/jobs/{job_set.quick}/events")
                assert status == 200 and "JobSucceeded" in [e["kind"] for e in history["events"] if e["job_id"] == job_set.quick], history
                status, why = call(worker.client, "GET", f"/api/v1/jobs/{job_set.stuck}/scheduling")
                assert status == 200 and why["scheduler_here"] and why["last_cycle_reason"], why
            status, cluster = call(worker.client, "GET", "/api/v1/cluster")
            assert status == 200 and cluster["worker"] == group.scheduler().url and "group-c1" in json.dumps(cluster["executors"])

        # Lists and counts: every worker pages through every partition's jobs, in order, each job once.
        for worker in workers:
            listed, cursor = [], ""
            while True:
                status, page = call(worker.client, "GET", f"/api/v1/jobs?queue={queue}&limit=5&order=asc{cursor}")
                assert status == 200 and page["partitions"] == list(range(PARTITIONS)), page
                listed += [(row["submitted"], row["job_id"]) for row in page["jobs"]]
                if page["next_cursor"] is None:
                    break
                cursor = f"&cursor={page['next_cursor']}"
            assert listed == sorted(listed) and sorted(job_id for _, job_id in listed) == sorted(everything)
            status, counts = call(worker.client, "GET", f"/api/v1/job-counts?group_by=job_set&queue={queue}")
            assert status == 200
            assert {g["job_set"]: (g["counts"]["succeeded"], g["counts"]["running"], g["counts"]["queued"]) for g in counts["groups"]} == {
                s.name: (1, 1, 1) for s in sets
            }

        # Control through a worker other than the one each job set was submitted through.
        first, second, third, fourth = sets
        status, body = call(workers[1].client, "POST", f"/api/v1/jobs/{first.long}/cancel", {"reason": "through another worker"})
        assert status == 202, body
        clients[0].preempt_jobs(queue, second.name, second.long)
        flotilla(workers[-1], "reprioritize", "job", third.stuck, "5")
        flotilla(workers[0], "cancel", "job", third.long)
        clients[-1].cancel_jobset(queue, fourth.name, [JobState.QUEUED])  # the stuck job only
        reprioritised = clients[1].reprioritize_jobs(3, [first.stuck], first.name, queue)
        assert dict(reprioritised.reprioritization_results) == {first.stuck: ""}

        wanted = {first.long: "cancelled", second.long: "preempted", third.long: "cancelled", fourth.stuck: "cancelled"}
        poll(lambda: all(rest_state(workers[-1], j) == s for j, s in wanted.items()), 60, f"the jobs {wanted}", 0.5)
        assert rest_state(workers[0], fourth.long) == "running" and rest_state(workers[1], fourth.quick) == "succeeded"

        def priorities() -> dict[str, float]:
            return {
                job_id: call(workers[0].client, "GET", f"/api/v1/jobs/{job_id}")[1]["priority"] for job_id in (first.stuck, third.stuck)
            }

        poll(lambda: priorities() == {first.stuck: 3.0, third.stuck: 5.0}, 30, "the reprioritised jobs", 0.5)

        # A job's events through every worker (its partition's owner keeps where they are on `events`): those
        # of its job set read whole from the log, filtered to the job and the job set's requests (polled, as
        # an ended job's run may still report after the job's state changed).
        def agree(job_set: JobSet, job_id: str) -> bool:
            whole = job_set_events(group.broker.bootstrap, workers[0].topic("events"), queue, job_set.name)
            mine = [e for e in whole if e["job_id"] in (job_id, None)]
            assert any(e["job_id"] == job_id and e["kind"] == "JobSubmitted" for e in mine), mine
            return all(
                call(worker.client, "GET", f"/api/v1/jobs/{job_id}/events") == (200, {"job_id": job_id, "events": mine})
                for worker in workers
            )

        for job_set in sets:
            for job_id in [job_set.quick, *(j for j in wanted if j in job_set.ids)]:
                poll(partial(agree, job_set, job_id), 30, f"job {job_id}'s events, through every worker, as its job set's", 0.5)

        # A job set's events through any worker: gRPC's stream and the command line's watch.
        events_of = event_pb2.JobSetRequest(queue=queue, id=fourth.name, watch=False, errorIfMissing=True)
        kinds = Counter(message.message.WhichOneof("events") for message in clients[-1].event_stub.GetJobSetEvents(events_of, timeout=60))
        assert kinds["succeeded"] == 1 and kinds["cancelled"] == 1 and kinds["submitted"] == 3, kinds
        watched = [json.loads(line) for line in flotilla(workers[0], "watch", queue, second.name, "--no-follow", "--json").splitlines()]
        assert {(e["job_id"], e["kind"]) for e in watched} >= {(second.quick, "JobSucceeded"), (second.long, "JobPreempted")}

        # The command line: a job file submitted through one worker, read and cancelled through another.
        job_file = tmp_path / f"{queue}.yaml"
        job = {"priority": 0, "annotations": {RUNTIME_ANNOTATION: "600"}, "podSpec": _pod_spec(NOWHERE)}
        job_file.write_text(yaml.safe_dump({"queue": queue, "jobSetId": "cli", "jobs": [job, job]}))
        submitted = json.loads(flotilla(workers[0], "submit", str(job_file), "--json"))["job_ids"]
        assert json.loads(flotilla(workers[-1], "job", "status", submitted[0], "--json"))["state"] == "queued"
        flotilla(workers[-1], "cancel", "job-set", queue, "cli")
        poll(lambda: {rest_state(workers[0], j) for j in submitted} == {"cancelled"}, 60, "the job file's jobs cancelled", 0.5)

        # Leave nothing running for the next test.
        for job_set in sets:
            call(workers[0].client, "POST", f"/api/v1/queues/{queue}/jobsets/{job_set.name}/cancel", {"reason": "test over"})


def _pod_spec(selector: dict[str, str]) -> dict[str, Any]:
    amounts = {"cpu": "100m", "memory": "64Mi"}
    container = {"name": "main", "image": "local", "command": ["true"], "resources": {"requests": amounts, "limits": amounts}}
    return {"restartPolicy": "Never", "nodeSelector": selector, "containers": [container]}


def test_two_workers_answer_every_call_about_every_partition(group: Group, executors: Executors, tmp_path: Path) -> None:
    assert len(group.live()) == 2
    every_call(group, executors, tmp_path)


def test_each_of_two_workers_keeps_standby_copies_the_one_that_joined_last_too(group: Group) -> None:
    """Faust starts the standby follower after a worker's first assignment; it must follow that assignment then."""
    for worker in group.live():
        kept = poll(functools.partial(standby_lines, worker), 30.0, f"{worker.url} keeping standby copies")
        assert worker.changelog("jobs") in kept[-1], kept[-1]


def standby_lines(worker: Worker) -> list[str]:
    return [line for line in worker.log_path.read_text(errors="replace").splitlines() if "keeping standby copies" in line]


def test_a_third_worker_joins_and_every_worker_answers_every_call(group: Group, executors: Executors, tmp_path: Path) -> None:
    group.add()
    assert len(group.live()) == 3
    every_call(group, executors, tmp_path)


def test_killing_the_scheduling_worker_under_load_loses_no_job_and_doubles_no_lease(group: Group, executors: Executors) -> None:
    assert len(group.live()) == 3
    report = run_failover(group, executors, f"failover-{uuid.uuid4().hex[:6]}")
    print(report.line())
    assert report.problems() == [], report.line()
    assert report.log is not None and report.log.submitted == report.jobs > 0
    # Calls made while the group rebalanced waited for it; none was refused, and every call works after.
    assert report.refused() == [], report.line()
    group.settle()
    live = {worker.url for worker in group.live()}
    for worker in group.live():
        assert call(worker.client, "GET", "/api/v1/cluster")[1]["worker"] in live
