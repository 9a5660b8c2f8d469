"""A chaos run and what the log says about it: jobs run to the end while the worker is SIGKILLed.

Two fake executors run short jobs; the control-plane worker is killed mid-run three times, the
second time with its data directory deleted, and started again with the same identity. Then the
log is read back and everything that must never happen is counted (`ChaosReport`): a job that
did not end succeeded or succeeded in two runs, a cycle recorded twice with other decisions, a
run id leased to two jobs, a lease after a job's success, a run returned because its id was
already in use, a job whose last `job-states` record is not what folding `events` gives, a
finished job still in the scheduler's index once the run has settled.

`tests/integration/test_chaos.py` runs one seed in the suite; `bench/chaos.py` runs several and
prints a line per seed.
"""

from __future__ import annotations

import functools
import json
import random
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ops.broker import free_port
from schemas.codec import decode
from streams.domain.jobs import apply_event
from streams.domain.states import JOB_TERMINAL
from tests.integration.helpers import create_queue, submission, submit_record
from tests.integration.log import Record, latest_values
from tests.integration.pipeline import Executors, fake_item
from tests.integration.workers import Worker, expiring_after, poll, remove_tree

# The worker's scheduler configuration: leases expire 6 s after an executor stops reporting, and no
# rate limit holds the run back (Armada's 50 jobs/s per queue would; its one queue runs ~250 jobs/s).
CHAOS_CONFIG = expiring_after(6, maximumSchedulingRate=1000.0, maximumPerQueueSchedulingRate=1000.0)

PER_REQUEST = 100
# The kills, in order: how much of the run has succeeded before each, and whether the worker's data directory goes with it.
KILLS = ((0.25, False), (0.5, True), (0.75, False))
SETTLE_S = 20.0


@dataclass
class ChaosReport:
    seed: int
    jobs: int
    submitted: int = 0
    not_succeeded: int = 0
    succeeded_twice: int = 0
    cycles_recorded_twice: int = 0
    cycles_recorded_differently: int = 0
    run_ids_on_two_jobs: int = 0
    leases_after_success: int = 0
    duplicate_id_returns: int = 0
    lease_returned: int = 0
    repeated_events: int = 0  # published again with the same id (at least once): not counted as decisions above
    stale_job_states: int = 0
    terminal_in_index: int = 0
    index_jobs: int = 0
    unfinished_jobs: int = 0
    takeover_s: list[float] = field(default_factory=list)
    timed_out: str | None = None
    examples: dict[str, Any] = field(default_factory=dict)

    def problems(self) -> list[str]:
        found = [self.timed_out] if self.timed_out else []
        if self.submitted != self.jobs:
            found.append(f"{self.submitted} jobs submitted on the log, not {self.jobs}")
        for name in (
            "not_succeeded",
            "succeeded_twice",
            "cycles_recorded_differently",
            "run_ids_on_two_jobs",
            "leases_after_success",
            "duplicate_id_returns",
            "stale_job_states",
            "terminal_in_index",
        ):
            if getattr(self, name):
                found.append(f"{name.replace('_', ' ')}: {getattr(self, name)} (e.g. {self.examples.get(name)})")
        if self.index_jobs != self.unfinished_jobs:
            found.append(f"the scheduler's index holds {self.index_jobs} jobs, {self.unfinished_jobs} are unfinished")
        return found

    def line(self) -> str:
        takeovers = ", ".join(f"{s:.1f}" for s in self.takeover_s)
        return (
            f"seed {self.seed}: {self.jobs} jobs, not succeeded {self.not_succeeded}, succeeded twice {self.succeeded_twice}, "
            f"cycles recorded twice {self.cycles_recorded_twice} (differently {self.cycles_recorded_differently}), "
            f"run ids on two jobs {self.run_ids_on_two_jobs}, leases after success {self.leases_after_success}, "
            f"lease_returned {self.lease_returned} (duplicate id {self.duplicate_id_returns}), "
            f"job-states differing from events {self.stale_job_states}, events repeated {self.repeated_events}, "
            f"index {self.index_jobs} / unfinished {self.unfinished_jobs} (finished still in index {self.terminal_in_index}), "
            f"takeover s [{takeovers}]"
        )


def run_chaos(worker: Worker, directory: Path, jobs: int, seed: int) -> ChaosReport:
    """Run ``jobs`` jobs through ``worker`` (started) with two fake executors and three kills; the report of the log."""
    rng = random.Random(seed)
    report = ChaosReport(seed=seed, jobs=jobs)
    executors = Executors(worker, directory)
    kills: list[float] = []
    try:
        queue = create_queue(worker.client, f"chaos-{seed}")["name"]
        executors.fake("chaos-a", nodes=8, cpu="16")
        executors.fake("chaos-b", nodes=8, cpu="16")  # 256 slots for jobs of 0.5 to 1.5 s
        items = [fake_item(executors.selector, runtime_s=round(rng.uniform(0.5, 1.5), 2)) for _ in range(jobs)]
        requests = [submission(submit_record(queue, f"set-{n // 1000}", items[n : n + PER_REQUEST])) for n in range(0, jobs, PER_REQUEST)]
        worker.produce("submissions", requests)

        def succeeded(share: float) -> bool:
            return sum(1 for job in worker.job_states().values() if job["state"] == "succeeded") >= share * jobs

        for share, lose_data in KILLS:
            poll(functools.partial(succeeded, share), 240, f"{share:.0%} of the jobs to succeed before a kill", 1.0)
            kills.append(time.time())
            worker.kill()
            if lose_data:
                remove_tree(worker.data_dir)
            worker.web_port = free_port()
            worker.start()
        try:
            poll(functools.partial(succeeded, 1.0), 120 + jobs // 20, f"all {jobs} jobs to succeed after the kills", 2.0)
        except AssertionError as timed_out:
            report.timed_out = str(timed_out)
        settle(worker)
    finally:
        executors.stop_all()
    examine(worker, report, kills)
    return report


def settle(worker: Worker) -> None:
    """Wait (up to `SETTLE_S`) until the scheduler's index holds no finished job."""
    deadline = time.monotonic() + SETTLE_S
    while time.monotonic() < deadline:
        finished = {job_id for job_id, job in worker.job_states().items() if job["state"] in JOB_TERMINAL}
        if not finished & index_jobs(worker):
            return
        time.sleep(1.0)


def index_jobs(worker: Worker) -> set[str]:
    """The job ids the scheduler's index holds, as its table's changelog says."""
    latest = latest_values(worker.read(worker.changelog("scheduler-index")))
    return {key[2:] for key, value in latest.items() if key.startswith("j:") and value is not None}


def examine(worker: Worker, report: ChaosReport, kills: list[float], queue: str | None = None) -> None:
    """Count in ``report`` what the log says went wrong with the jobs (of ``queue``, or every queue)."""
    events = sorted(worker.read(worker.topic("events")), key=lambda r: (r.partition, r.offset))
    folded, history, cycles, leases, report.repeated_events = fold_events(events, queue)
    published = worker.job_states()
    submitted = [job_id for job_id, kinds in history.items() if any(kind == "JobSubmitted" for kind, _ in kinds)]
    report.submitted = len(submitted)

    def count(name: str, found: list[Any]) -> None:
        setattr(report, name, len(found))
        if found:
            report.examples[name] = found[:3]

    count("not_succeeded", [(j, folded[j]["state"]) for j in submitted if folded[j]["state"] != "succeeded"])
    succeeded_runs = {j: {p["run_id"] for kind, p in h if kind == "JobRunSucceeded"} for j, h in history.items()}
    count("succeeded_twice", [j for j, runs in succeeded_runs.items() if len(runs) > 1])
    report.cycles_recorded_twice = sum(1 for records in cycles.values() if len(records) > len(set(records)))
    count("cycles_recorded_differently", [cycle_id for cycle_id, records in cycles.items() if differ(records)])
    owners: dict[str, set[str]] = defaultdict(set)
    for job_id, h in history.items():
        for kind, payload in h:
            if kind == "JobLeased":
                owners[payload["run_id"]].add(job_id)
    count("run_ids_on_two_jobs", [(run, sorted(j)) for run, j in owners.items() if len(j) > 1])
    after = []
    for job_id, h in history.items():
        kinds = [kind for kind, _ in h]
        if "JobSucceeded" in kinds and "JobLeased" in kinds[kinds.index("JobSucceeded") :]:
            after.append(job_id)
    count("leases_after_success", after)
    returned = [(j, p) for j, h in history.items() for kind, p in h if kind == "JobRunFailed" and p.get("category") == "lease_returned"]
    report.lease_returned = len(returned)
    count("duplicate_id_returns", [j for j, p in returned if "run_id_in_use" in (p.get("reason") or "")])
    count(
        "stale_job_states",
        [(j, (published.get(j) or {}).get("state"), folded[j]["state"]) for j in submitted if not same_state(published.get(j), folded[j])],
    )
    in_index = index_jobs(worker)
    if queue is not None:  # other queues' jobs are not this report's
        in_index &= set(submitted)
    unfinished = {j for j in submitted if folded[j]["state"] not in JOB_TERMINAL}
    count("terminal_in_index", sorted(in_index - unfinished))
    report.index_jobs, report.unfinished_jobs = len(in_index), len(unfinished)
    report.takeover_s = [min((t for t in leases if t > kill), default=float("nan")) - kill for kill in kills]


def differ(records: list[tuple[str, str]]) -> bool:
    """Whether a cycle's records, (event id, decisions as JSON) each, say two things: one record
    with two contents, or two records deciding about one job (a cycle's decisions are split across
    records with disjoint jobs, so only a second run of the cycle can do that)."""
    distinct = set(records)
    if len({event_id for event_id, _ in distinct}) < len(distinct):
        return True
    jobs = [decision["job_id"] for _, decisions in distinct for decision in json.loads(decisions)]
    return len(jobs) != len(set(jobs))


def same_state(published: dict[str, Any] | None, folded: dict[str, Any]) -> bool:
    return published is not None and all(published[name] == folded[name] for name in ("state", "reason", "runs"))


def fold_events(
    events: list[Record], queue: str | None = None
) -> tuple[dict[str, dict[str, Any]], dict[str, list[tuple[str, dict[str, Any]]]], dict[str, list[tuple[str, str]]], list[float], int]:
    """Folding `events` from the start: every job (of ``queue``, when given), each job's events in log
    order, each cycle id's records as (event id, decisions as JSON), the log times (epoch s) of
    JobLeased events, and how many job events were a repeat of one already on the log (same id:
    published again, at least once), which the histories leave out."""
    jobs: dict[str, dict[str, Any]] = {}
    history: dict[str, list[tuple[str, dict[str, Any]]]] = defaultdict(list)
    cycles: dict[str, list[tuple[str, str]]] = defaultdict(list)
    leases: list[float] = []
    seen: set[str] = set()
    repeated = 0
    for record in events:
        sequence = decode("event_sequence", record.value)
        envelope = {key: sequence[key] for key in ("queue", "job_set_id", "user", "groups")}
        for event in sequence["events"]:
            kind, payload = event["payload"]
            kind = kind.rsplit(".", 1)[-1]
            if kind == "SchedulingCycle":
                cycles[payload["cycle_id"]].append((event["event_id"], json.dumps(payload["decisions"], sort_keys=True)))
            job_id = event["job_id"]
            if job_id is None or (queue is not None and sequence["queue"] != queue):
                continue
            if event["event_id"] in seen:
                repeated += 1
                continue
            seen.add(event["event_id"])
            if kind == "JobLeased":
                leases.append(record.timestamp / 1000)
            history[job_id].append((kind, payload))
            try:
                folded = apply_event(jobs.get(job_id), kind, event, envelope)
            except ValueError:
                continue
            if folded is not None:
                jobs[job_id] = folded
    return jobs, history, cycles, leases, repeated
