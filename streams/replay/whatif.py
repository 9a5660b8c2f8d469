"""What another scheduler configuration would have done with the recorded workload.

The recorded submissions, cancellations and cluster capacity go through the real pipeline again:
the job-state fold (`streams.scheduler.fold`), the scheduler's index and its cycle
(`streams.scheduler.cycle`, the algorithm under it) at every recorded tick, with the other
configuration, and a simulated executor that runs each leased job for as long as its recorded run
took. Nothing here reads a clock: a cycle's time is its recorded tick's.

Run times come from the log: a job's run that ended on its own (succeeded, or failed in its
container) gives its length, from its lease to its end, and the outcome. A job with no such run
(preempted, cancelled, still running or never leased in reality) runs until it is cancelled or
the window ends: how long it would have run is not on the log, and a run cut short (by a
preemption the other configuration might not make) would free its node too early. The report
counts the jobs that ran without such an end (`estimated_runtimes`).

Both sides are measured the same way from their runs (`measure`): per queue the dominant resource
share of the capacity at each tick, waiting times (submission to first lease), preemptions by the
scheduler, and the jobs whose start moved most.
"""

from __future__ import annotations

import math
import random
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from operator import is_
from typing import Any

from streams.domain import events
from streams.domain.executor_settings import SETTINGS_KIND
from streams.domain.jobs import event_kind
from streams.domain.resources import job_resource_request
from streams.scheduler import feed
from streams.scheduler.algorithm.nodedb import PoolNodes
from streams.scheduler.config import CycleConfig
from streams.scheduler.convert import scheduling_node
from streams.scheduler.cycle import SCHEDULER_USER, run_cycle
from streams.scheduler.fold import apply_sequence
from streams.scheduler.index import SchedulerIndex

ON_REQUEST = "preempted on request"
# Run-failure categories that end a run without saying how long the job would run.
_NOT_ITS_OWN_END = frozenset({"lease_returned", "lease_expired", "preempted", "cancelled"})
MOVED_SHOWN = 10


# -- the recorded workload --------------------------------------------------------------------
@dataclass
class Run:
    job_id: str
    queue: str
    requests: Mapping[str, int]
    start: int
    end: int | None = None
    node: str = ""  # executor/node, as the scheduler names it

    def active(self, now: int) -> bool:
        return self.start <= now and (self.end is None or self.end > now)


@dataclass
class RecordedJob:
    job_id: str
    queue: str
    job_set_id: str
    submitted: int
    requests: Mapping[str, int]
    # The submission, as the event sequence that carried it (one event): replayed as it was.
    sequence: dict[str, Any]
    runs: dict[str, Run] = field(default_factory=dict)
    # (length ms, succeeded) of the run that ended on its own.
    finished: tuple[int, bool] | None = None
    preempted: bool = False

    @property
    def first_start(self) -> int | None:
        return min((run.start for run in self.runs.values()), default=None)

    def runtime(self) -> tuple[int | None, bool, bool]:
        """(length ms, or None: until it is cancelled or the window ends; succeeded; unknown
        though it ran, because no run of it ended on its own)."""
        if self.finished is not None:
            return self.finished[0], self.finished[1], False
        return None, True, bool(self.runs)


@dataclass
class Workload:
    """What happened, as the log tells it: jobs, their runs, cancellations, capacity and ticks."""

    jobs: dict[str, RecordedJob] = field(default_factory=dict)
    # Cancel requests (the event sequence that carried them), by time.
    cancels: list[tuple[int, dict[str, Any]]] = field(default_factory=list)
    # Executors cordoned and uncordoned (`streams.domain.executor_settings`), folded at their time as recorded.
    settings: list[tuple[int, dict[str, Any]]] = field(default_factory=list)
    # Per executor its reports on the feed (time, nodes and pool), and times it was heard (heartbeats).
    reports: list[tuple[int, feed.ExecutorState]] = field(default_factory=list)
    heard: list[tuple[int, str]] = field(default_factory=list)
    ticks: list[feed.Tick] = field(default_factory=list)

    def read_events(self, sequences: Iterable[dict[str, Any]]) -> None:
        for sequence in sequences:
            envelope = {k: sequence[k] for k in ("queue", "job_set_id", "user", "groups")}
            for event in sequence["events"]:
                self._event(envelope, event)

    def _event(self, envelope: dict[str, Any], event: dict[str, Any]) -> None:
        kind, payload = event["payload"]
        kind, job_id, at = event_kind(kind), event["job_id"], event["created"]
        if kind == "JobCancelRequested":
            self.cancels.append((at, {**envelope, "events": [event]}))
            return
        if kind == SETTINGS_KIND:
            self.settings.append((at, {**envelope, "events": [event]}))
            return
        if kind == "JobSubmitted":
            requests = job_resource_request(payload.get("pod_spec") or {})
            self.jobs[job_id] = RecordedJob(
                job_id, envelope["queue"], envelope["job_set_id"], at, requests, {**envelope, "events": [event]}
            )
            return
        job = self.jobs.get(job_id or "")
        if job is None:
            return
        if kind == "JobLeased":
            job.runs[payload["run_id"]] = Run(job_id, job.queue, job.requests, at, node=feed.node_id(payload["executor"], payload["node"]))
            return
        run = job.runs.get(payload.get("run_id") or "")
        if kind == "JobRunSucceeded" and run is not None:
            run.end = at
            job.finished = (at - run.start, True)
        elif kind == "JobRunFailed" and run is not None:
            run.end = at
            if payload.get("category") not in _NOT_ITS_OWN_END:
                job.finished = (at - run.start, False)
        elif kind in ("JobPreempted", "JobCancelled", "JobFailed") and run is not None and run.end is None:
            run.end = at
        if kind == "JobPreempted" and payload.get("reason") != ON_REQUEST:
            job.preempted = True

    def read_feed(self, records: Iterable[feed.FeedRecord | None]) -> None:
        """The scheduler feed's records, in order (None: a record that is not one)."""
        for record in records:
            if isinstance(record, feed.Tick):
                self.ticks.append(record)
            elif isinstance(record, feed.ExecutorState):
                self.reports.append((record.time, record))
            elif isinstance(record, feed.Heartbeat):
                self.heard.append((record.time, record.executor))


# -- the simulation -----------------------------------------------------------------------------
class _Jobs:
    """The fold's store over a dict: the simulation keeps job states in memory, undecoded."""

    def __init__(self) -> None:
        self.values: dict[str, dict[str, Any]] = {}

    def latest(self, job_id: str) -> dict[str, Any] | None:
        return self.values.get(job_id)

    def put(self, job: dict[str, Any], partition: int) -> None:
        self.values[job["job_id"]] = job


@dataclass
class Simulated:
    runs: dict[str, Run] = field(default_factory=dict)  # by run id
    preempted: set[str] = field(default_factory=set)
    started: dict[str, int] = field(default_factory=dict)  # job id -> first lease
    cycles: int = 0


def simulate(
    workload: Workload,
    config: CycleConfig,
    *,
    weights: Mapping[str, float] | None = None,
    until_ms: int | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> Simulated:
    """Run the recorded workload through the fold, index and cycle with ``config`` at every
    recorded tick (up to ``until_ms``). ``weights`` replaces queues' weights (1 / priority factor)."""
    sim = _Simulation(workload, config, dict(weights or {}))
    ticks = [t for t in workload.ticks if until_ms is None or t.time <= until_ms]
    for count, tick in enumerate(ticks, start=1):
        sim.cycle(tick)
        if progress is not None:
            progress(count, len(ticks))
    return sim.result


class _Simulation:
    def __init__(self, workload: Workload, config: CycleConfig, weights: dict[str, float]) -> None:
        self.workload, self.config, self.weights = workload, config, weights
        self.jobs = _Jobs()
        self.index = SchedulerIndex()
        self.result = Simulated()
        self.rng = random.Random(0)
        # Inputs in time order: submissions, cancellations and executors' settings; executor reports and heartbeats.
        inputs = [(job.submitted, 0, job.sequence) for job in workload.jobs.values()]
        inputs += [(at, 1, seq) for at, seq in (*workload.cancels, *workload.settings)]
        self.inputs = iter(sorted(inputs, key=lambda item: (item[0], item[1])))
        self.next_input = next(self.inputs, None)
        self.reports = iter(sorted(workload.reports, key=lambda r: r[0]))
        self.next_report = next(self.reports, None)
        self.heartbeats = iter(sorted(workload.heard))
        self.next_heartbeat = next(self.heartbeats, None)
        self.executors: dict[str, feed.ExecutorState] = {}
        self.last_heard: dict[str, int] = {}
        self.ends: list[tuple[int, str, str, bool]] = []  # (time, job id, run id, succeeded), kept sorted
        self.run_executor: dict[str, str] = {}
        self.offset = 0

    def fold(self, sequence: dict[str, Any]) -> None:
        self.offset += 1
        folded = apply_sequence(self.jobs, sequence, self.rng)
        for change in folded.feed:
            self.index.apply(change)

    def emit(self, job_id: str, at: int, kind: str, payload: dict[str, Any]) -> None:
        job = self.jobs.latest(job_id)
        assert job is not None
        event = events.event(f"sim-{self.offset}-{kind}", at, job_id, events.payload(kind, payload))
        self.fold({"queue": job["queue"], "job_set_id": job["job_set_id"], "user": SCHEDULER_USER, "groups": [], "events": [event]})

    def advance(self, now: int) -> None:
        """Everything recorded or simulated up to ``now``, in time order."""
        while True:
            candidates = []
            if self.next_input is not None and self.next_input[0] <= now:
                candidates.append((self.next_input[0], 1))
            if self.ends and self.ends[0][0] <= now:
                candidates.append((self.ends[0][0], 0))
            if not candidates:
                break
            _, which = min(candidates)
            if which == 0:
                self.finish(*self.ends.pop(0))
            else:
                assert self.next_input is not None
                self.fold(self.next_input[2])
                self.next_input = next(self.inputs, None)
        while self.next_report is not None and self.next_report[0] <= now:
            state = self.next_report[1]
            self.executors[state.executor] = state
            self.last_heard[state.executor] = max(self.last_heard.get(state.executor, 0), state.time)
            self.next_report = next(self.reports, None)
        while self.next_heartbeat is not None and self.next_heartbeat[0] <= now:
            at, name = self.next_heartbeat
            self.last_heard[name] = max(self.last_heard.get(name, 0), at)
            self.next_heartbeat = next(self.heartbeats, None)

    def finish(self, at: int, job_id: str, run_id: str, succeeded: bool) -> None:
        run = self.result.runs.get(run_id)
        if run is None or run.end is not None:
            return
        run.end = at
        if succeeded:
            self.emit(job_id, at, "JobRunSucceeded", {"run_id": run_id})
            self.emit(job_id, at, "JobSucceeded", {"run_id": run_id})
        else:
            failed = {"run_id": run_id, "reason": "failed", "message": "failed as recorded", "exit_code": 1, "category": "container_error"}
            self.emit(job_id, at, "JobRunFailed", {**failed, "retryable": False})
            self.emit(job_id, at, "JobFailed", {"reason": "failed", "message": "failed as recorded", "exit_code": 1})

    def report_executors(self, now: int) -> None:
        """Each executor heard from lately in reality reports now, holding the simulated runs."""
        held: dict[str, dict[str, str]] = defaultdict(dict)
        for run_id, run in self.result.runs.items():
            if run.end is None:
                held[self.run_executor[run_id]][run_id] = run.job_id
        for name, state in sorted(self.executors.items()):
            if now - self.last_heard.get(name, 0) > self.config.stale_executor_ms:
                continue
            runs = held.get(name, {})
            self.index.apply(replace(state, time=now, runs=runs, active=tuple(runs)))

    def cycle(self, tick: feed.Tick) -> None:
        now = tick.time
        self.advance(now)
        self.report_executors(now)
        if self.weights:
            tick = replace(tick, queues=tuple(replace(q, weight=self.weights.get(q.name, q.weight)) for q in tick.queues))
        self.offset += 1
        outcome = run_cycle(self.index, tick, self.offset, self.config)
        self.result.cycles += 1
        for sequence in outcome.sequences:
            self.fold(sequence)
            for event in sequence["events"]:
                self.decided(now, event)

    def decided(self, now: int, event: dict[str, Any]) -> None:
        kind, payload = event["payload"]
        kind, job_id = event_kind(kind), event["job_id"]
        if kind == "JobLeased":
            recorded = self.workload.jobs[job_id]
            run = Run(job_id, recorded.queue, recorded.requests, now, node=feed.node_id(payload["executor"], payload["node"]))
            self.result.runs[payload["run_id"]] = run
            self.run_executor[payload["run_id"]] = payload["executor"]
            self.result.started.setdefault(job_id, now)
            self.emit(job_id, now, "JobRunRunning", {"run_id": payload["run_id"], "node": payload["node"]})
            length, succeeded, _ = recorded.runtime()
            if length is not None:
                self.ends.append((now + length, job_id, payload["run_id"], succeeded))
                self.ends.sort()
        elif kind in ("JobPreempted", "JobCancelled", "JobFailed"):
            for run in self.result.runs.values():
                if run.job_id == job_id and run.end is None:
                    run.end = now
            if kind == "JobPreempted" and payload.get("reason") != ON_REQUEST:
                self.result.preempted.add(job_id)


# -- measuring both sides -----------------------------------------------------------------------
def percentile(values: list[float], p: float) -> float | None:
    """The nearest-rank percentile (None for no values)."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)]


def capacity_at(workload: Workload, times: list[int], stale_ms: int, runs: Iterable[Run]) -> list[dict[str, int]]:
    """Per time, what the scheduler's shares were fractions of then (`PoolNodes.totals`): the nodes of
    the executors reporting then (their last report's), less the unschedulable ones none of ``runs`` was on."""
    runs = list(runs)
    reports = sorted(workload.reports, key=lambda r: r[0])
    heard = sorted(workload.heard)
    latest: dict[str, feed.ExecutorState] = {}
    last: dict[str, int] = {}
    found = []
    r = h = 0
    pool = PoolNodes(())
    reporting: tuple[feed.ExecutorState, ...] = ()
    for now in times:
        while r < len(reports) and reports[r][0] <= now:
            latest[reports[r][1].executor] = reports[r][1]
            last[reports[r][1].executor] = max(last.get(reports[r][1].executor, 0), reports[r][0])
            r += 1
        while h < len(heard) and heard[h][0] <= now:
            last[heard[h][1]] = max(last.get(heard[h][1], 0), heard[h][0])
            h += 1
        fresh = tuple(state for name, state in sorted(latest.items()) if now - last.get(name, 0) <= stale_ms)
        if len(fresh) != len(reporting) or not all(map(is_, fresh, reporting)):  # the nodes are made again only when they change
            pool, reporting = PoolNodes([scheduling_node(state, node, 0) for state in fresh for node in state.nodes]), fresh
        found.append(dict(pool.totals(run.node for run in runs if run.active(now))))
    return found


def shares_over_time(
    runs: Iterable[Run], times: list[int], capacity: list[dict[str, int]], resources: tuple[str, ...], queues: list[str]
) -> dict[str, list[float]]:
    """Per queue, at each time, its dominant resource share of the capacity then."""
    by_queue: dict[str, list[Run]] = defaultdict(list)
    for run in runs:
        by_queue[run.queue].append(run)
    shares: dict[str, list[float]] = {}
    for queue in queues:
        series = []
        for now, total in zip(times, capacity, strict=True):
            held: dict[str, int] = defaultdict(int)
            for run in by_queue.get(queue, ()):
                if run.active(now):
                    for name, amount in run.requests.items():
                        held[name] += amount
            series.append(max((held[r] / total[r] for r in resources if total.get(r)), default=0.0))
        shares[queue] = series
    return shares


def _side(jobs: list[RecordedJob], starts: Mapping[str, int], preempted: set[str], shares: list[float]) -> dict[str, Any]:
    waits = [(starts[j.job_id] - j.submitted) / 1000 for j in jobs if j.job_id in starts]
    return {
        "jobs": len(jobs),
        "started": len(waits),
        "not_started": len(jobs) - len(waits),
        "wait_p50_s": percentile(waits, 50),
        "wait_p95_s": percentile(waits, 95),
        "wait_p99_s": percentile(waits, 99),
        "preemptions": sum(1 for j in jobs if j.job_id in preempted),
        "mean_share": sum(shares) / len(shares) if shares else 0.0,
    }


def measure(
    workload: Workload,
    simulated: Simulated,
    config: CycleConfig,
    *,
    since_ms: int | None = None,
    until_ms: int | None = None,
    moved_shown: int = MOVED_SHOWN,
) -> dict[str, Any]:
    """Both sides side by side over the window: per queue shares, waits, preemptions; the jobs
    whose start moved most; and the share series for a plot."""
    times = [t.time for t in workload.ticks if (since_ms is None or t.time >= since_ms) and (until_ms is None or t.time <= until_ms)]
    start, end = (times[0], times[-1]) if times else (since_ms or 0, until_ms or 0)
    jobs = [j for j in workload.jobs.values() if (since_ms is None or j.submitted >= since_ms) and j.submitted <= end]
    queues = sorted({j.queue for j in workload.jobs.values()})
    resources = config.scheduling.dominant_resource_fairness_resources
    actual_runs = [run for job in workload.jobs.values() for run in job.runs.values()]
    # Each side's own: an unschedulable node counts while a run of that side is on it.
    actual_capacity = capacity_at(workload, times, config.stale_executor_ms, actual_runs)
    what_if_capacity = capacity_at(workload, times, config.stale_executor_ms, simulated.runs.values())
    actual = shares_over_time(actual_runs, times, actual_capacity, resources, queues)
    what_if = shares_over_time(simulated.runs.values(), times, what_if_capacity, resources, queues)
    actual_starts = {j.job_id: s for j in workload.jobs.values() if (s := j.first_start) is not None and s <= end}
    what_if_starts = {job_id: s for job_id, s in simulated.started.items() if s <= end}
    actual_preempted = {j.job_id for j in workload.jobs.values() if j.preempted}
    per_queue = {}
    for queue in queues:
        mine = [j for j in jobs if j.queue == queue]
        per_queue[queue] = {
            "actual": _side(mine, actual_starts, actual_preempted, actual[queue]),
            "what_if": _side(mine, what_if_starts, simulated.preempted, what_if[queue]),
        }
    moved: list[dict[str, Any]] = []
    for job in jobs:
        before, after = actual_starts.get(job.job_id), what_if_starts.get(job.job_id)
        if before is None and after is None:
            continue
        delta = None if before is None or after is None else (after - before) / 1000
        moved.append({"job_id": job.job_id, "queue": job.queue, "actual_start": before, "what_if_start": after, "moved_s": delta})
    moved.sort(key=lambda m: (-(math.inf if m["moved_s"] is None else abs(m["moved_s"])), m["job_id"]))
    return {
        "window": {"from": since_ms if since_ms is not None else start, "to": end},
        "cycles": len(times),
        "simulated_cycles": simulated.cycles,
        "jobs": len(jobs),
        "estimated_runtimes": sum(1 for j in jobs if j.runtime()[2]),
        "queues": per_queue,
        "moved": [m for m in moved if m["moved_s"] != 0][:moved_shown],
        "series": {"times": times, "actual": actual, "what_if": what_if},
    }
