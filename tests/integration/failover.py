"""Failover under load: the worker that schedules is SIGKILLed while submissions and reads flow through
the others; what the callers saw, how long the takeover took, and what the log says about the jobs.

`run_failover` needs a settled group (`tests.integration.group.Group`) of at least two workers and
a fake executor. Two threads act as clients behind a load balancer that knows only the workers
left alive:

- a submitter sends requests of `PER_REQUEST` jobs of 1 s, with client ids, one job set per
  partition in turn, each through the next worker; a request that is not answered 200 is sent
  again through the next worker (the client ids make that safe) until it is, as a client would;
- a reader asks for a job already answered (REST `GET /api/v1/jobs/{id}`, then gRPC GetJobStatus)
  and the queue's counts (`GET /api/v1/job-counts`), through the workers in turn.

Every call's start, duration and status is kept. Once the load has run `BEFORE_KILL_S`, the
scheduling worker is killed; the run goes on until the cluster view names another worker that
has run a cycle since, and `AFTER_TAKEOVER_S` more; then every answered job must succeed, and
`chaos.examine` counts from the log whatever must never happen (a job lost or not succeeded, a
run leased twice, a lease after success, ...). `tests/integration/test_workers.py` runs it once;
`bench/failover.py` runs it several times and prints the figures.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import grpc
from armada_client.client import ArmadaClient

from tests.integration.chaos import ChaosReport, examine
from tests.integration.group import Group, job_set_per_partition
from tests.integration.helpers import call, create_queue, submit
from tests.integration.pipeline import Executors, fake_item
from tests.integration.workers import Worker, poll

PER_REQUEST = 5
BEFORE_KILL_S = 4.0
AFTER_TAKEOVER_S = 5.0
# A client gives up a submission after this long (it would alert someone): counted as unanswered.
SUBMIT_PATIENCE_S = 120.0


@dataclass(frozen=True)
class Call:
    kind: str
    start: float  # epoch s
    seconds: float
    status: int  # HTTP status; 0 for no answer (connection refused, timed out); 200 for a gRPC OK


@dataclass
class FailoverReport:
    workers: int
    partitions: int
    jobs: int = 0
    killed_at: float = 0.0
    scheduler_takeover_s: float = float("nan")  # kill -> the cluster view names a survivor that ran a cycle since
    first_lease_s: float = float("nan")  # kill -> the first JobLeased on the log after it
    calls: list[Call] = field(default_factory=list)
    unanswered_submissions: int = 0
    log: ChaosReport | None = None

    def refused(self, after: float = 0.0) -> list[Call]:
        """The calls started after ``after`` (epoch s) that were not answered 200."""
        return [c for c in self.calls if c.start >= after and c.status != 200]

    def longest(self, kind: str) -> float:
        return max((c.seconds for c in self.calls if c.kind == kind), default=0.0)

    def problems(self) -> list[str]:
        found = [] if self.log is None else self.log.problems()
        if self.unanswered_submissions:
            found.append(f"{self.unanswered_submissions} submissions never answered")
        return found

    def line(self) -> str:
        refused = self.refused()
        kinds = sorted({c.kind for c in self.calls})
        return (
            f"{self.workers} workers, {self.partitions} partitions, {self.jobs} jobs: scheduler takeover "
            f"{self.scheduler_takeover_s:.1f} s, first lease after the kill {self.first_lease_s:.1f} s; "
            f"{len(self.calls)} calls, {len(refused)} not answered 200 ({', '.join(sorted({str(c.status) for c in refused})) or '-'}), "
            f"longest " + ", ".join(f"{kind} {self.longest(kind):.1f} s" for kind in kinds) + f"; problems: {self.problems() or 'none'}"
        )


@dataclass
class Load:
    workers: list[Worker]
    queue: str
    job_sets: list[str]
    selector: dict[str, str]
    report: FailoverReport
    answered: list[str] = field(default_factory=list)  # job ids, in the order answered
    stopping: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)

    def start(self) -> None:
        self._threads = [threading.Thread(target=self._submit, daemon=True), threading.Thread(target=self._read, daemon=True)]
        for thread in self._threads:
            thread.start()

    def stop(self) -> None:
        self.stopping.set()
        for thread in self._threads:
            thread.join(SUBMIT_PATIENCE_S + 30)

    def _timed(self, kind: str, attempt: Callable[..., tuple[int, Any]], *args: Any) -> tuple[int, Any]:
        started, clock = time.time(), time.monotonic()
        try:
            status, body = attempt(*args)
        except (OSError, grpc.RpcError) as exc:  # no answer at all
            status, body = 0, repr(exc)
        self.report.calls.append(Call(kind, started, time.monotonic() - clock, status))
        return status, body

    def _submit(self) -> None:
        number = 0
        while not self.stopping.is_set():
            job_set = self.job_sets[number % len(self.job_sets)]
            items = [{**fake_item(self.selector, runtime_s=1.0), "client_id": f"{number}-{i}"} for i in range(PER_REQUEST)]
            deadline, attempt = time.monotonic() + SUBMIT_PATIENCE_S, number
            while True:
                worker = self.workers[attempt % len(self.workers)]
                status, body = self._timed("submit", submit, worker.client, self.queue, job_set, items)
                if status == 200:
                    self.answered += body["job_ids"]
                    break
                if time.monotonic() > deadline:
                    self.report.unanswered_submissions += 1
                    break
                attempt += 1
                time.sleep(0.2)
            number += 1

    def _read(self) -> None:
        rng = random.Random(0)
        channels = [grpc.insecure_channel(worker.grpc_target) for worker in self.workers]
        clients = [ArmadaClient(channel) for channel in channels]
        try:
            turn = 0
            while not self.stopping.is_set():
                turn += 1
                worker, client = self.workers[turn % len(self.workers)], clients[turn % len(clients)]
                if self.answered:
                    job_id = rng.choice(self.answered)
                    self._timed("rest-job", call, worker.client, "GET", f"/api/v1/jobs/{job_id}")
                    self._timed("grpc-status", grpc_status, client, job_id)
                self._timed("rest-counts", call, worker.client, "GET", f"/api/v1/job-counts?queue={self.queue}")
                time.sleep(0.05)
        finally:
            for channel in channels:
                channel.close()


def grpc_status(client: ArmadaClient, job_id: str) -> tuple[int, Any]:
    return 200, client.get_job_status([job_id])


def scheduler_since(worker: Worker, since: float) -> str | None:
    """The address of the worker that schedules, once it has run a cycle after ``since`` (epoch s)."""
    status, cluster = call(worker.client, "GET", "/api/v1/cluster")
    if status != 200 or not cluster["pools"]:
        return None
    latest = max(pool["cycle_time"] for pool in cluster["pools"]) / 1000
    return str(cluster["worker"]) if latest > since else None


def run_failover(group: Group, executors: Executors, label: str) -> FailoverReport:
    """Kill the scheduling worker of ``group`` under load; the report (the group is left one worker smaller)."""
    victim = group.scheduler()
    survivors = [worker for worker in group.live() if worker is not victim]
    report = FailoverReport(workers=len(group.live()), partitions=group.partitions)
    queue = create_queue(survivors[0].client, label)["name"]
    load = Load(survivors, queue, list(job_set_per_partition(queue, group.partitions).values()), executors.selector, report)
    load.start()
    try:
        time.sleep(BEFORE_KILL_S)
        report.killed_at = time.time()
        victim.kill()
        taken = poll(lambda: scheduler_since(survivors[0], report.killed_at), 90, "another worker to schedule", 0.2)
        report.scheduler_takeover_s = time.time() - report.killed_at
        assert taken != victim.url, "the killed worker cannot schedule"
        time.sleep(AFTER_TAKEOVER_S)
    finally:
        load.stop()
    report.jobs = len(set(load.answered))

    def all_succeeded() -> bool:
        status, counts = call(survivors[0].client, "GET", f"/api/v1/job-counts?queue={queue}")
        return status == 200 and bool(counts["groups"]) and counts["groups"][0]["counts"]["succeeded"] == report.jobs

    poll(all_succeeded, 120, f"the {report.jobs} answered jobs to succeed", 1.0)
    report.log = ChaosReport(seed=0, jobs=report.jobs)
    examine(survivors[0], report.log, [report.killed_at], queue)
    report.first_lease_s = report.log.takeover_s[0]
    return report
