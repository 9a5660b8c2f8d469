"""Jobs run end to end on fake executors: fair shares, preemption, gangs, an executor killed.

One worker serves the module, with a short executor timeout and schedule period so that lease
expiry and scheduling happen within seconds. Every test uses its own queues and executors.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from ops.broker import EmbeddedBroker
from schemas.codec import encode
from streams.replay.cycles import Configurations, Repeated, decisions, repeat
from streams.scheduler import feed
from streams.scheduler.algorithm.model import CycleInput, Job, Node, Queue
from streams.scheduler.algorithm.preempting import schedule
from streams.scheduler.config_file import parse
from tests.integration.pipeline import (
    ACTIVE,
    Executors,
    cancel_job_set,
    count_by,
    events,
    fake_item,
    new_queue,
    settle,
    states,
    submit_jobs,
    wait_states,
)
from tests.integration.workers import Worker, expiring_after, poll, running_worker

pytestmark = pytest.mark.integration

EXECUTOR_TIMEOUT_S = 4


CONFIG = expiring_after(EXECUTOR_TIMEOUT_S)


@pytest.fixture(scope="module")
def worker(broker: EmbeddedBroker, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Worker]:
    with running_worker(broker, tmp_path_factory, "pipeline", CONFIG, FLOTILLA_SCHEDULE_PERIOD_S="0.5") as started:
        yield started


def predicted_fair_shares(weights: dict[str, float], nodes: int, cpu: int, jobs_per_queue: int) -> dict[str, int]:
    """What the pure algorithm leases for this set-up in one cycle on an empty cluster."""
    milli = {"cpu": 1000, "memory": 2**30 * 1000}
    queued = tuple(
        Job(id=f"{queue}-{i:03d}", queue=queue, priority_class="armada-default", requests=milli, submit_time=float(i))
        for queue in weights
        for i in range(jobs_per_queue)
    )
    result = schedule(
        CycleInput(
            queues=tuple(Queue(name, weight) for name, weight in weights.items()),
            nodes=tuple(Node(f"n{i}", {"cpu": cpu * 1000, "memory": 32 * 2**30 * 1000}) for i in range(nodes)),
            running=(),
            queued=queued,
            now=0.0,
        ),
        parse(CONFIG).cycle.scheduling,
    )
    by_id = {job.id: job.queue for job in queued}
    shares: dict[str, int] = {name: 0 for name in weights}
    for placed in result.scheduled:
        shares[by_id[placed.job_id]] += 1
    return shares


def test_three_queues_reach_their_fair_shares_on_two_clusters_then_all_succeed(worker: Worker, executors: Executors) -> None:
    factors = {"fair-1": 1.0, "fair-2": 2.0, "fair-4": 4.0}
    job_ids = []
    for name, factor in factors.items():
        new_queue(worker, name, factor)
        job_ids += submit_jobs(worker, name, "wave", [fake_item(executors.selector, runtime_s=10) for _ in range(100)])
    wait_states(worker, job_ids, {"queued"}, 60, "300 jobs queued")

    executors.fake("fair-c1", nodes=10)
    executors.fake("fair-c2", nodes=10)

    def filled() -> dict[str, dict[str, object]] | None:
        found = states(worker, job_ids)
        return found if sum(count_by(found).values()) >= 160 else None

    full = poll(filled, 60, "the 160 slots to fill", 0.5)

    expected = predicted_fair_shares({name: 1 / f for name, f in factors.items()}, nodes=20, cpu=8, jobs_per_queue=100)
    actual = count_by(full)
    assert sum(expected.values()) == 160
    for name in factors:
        assert abs(actual[name] - expected[name]) <= 1, (actual, expected)
    assert expected["fair-1"] > expected["fair-2"] > expected["fair-4"]

    done = wait_states(worker, job_ids, {"succeeded"}, 120, "all 300 jobs to succeed")
    assert all(len([r for r in job["runs"] if r["state"] == "succeeded"]) == 1 for job in done.values())
    assert {r["executor"] for job in done.values() for r in job["runs"]} == {"fair-c1", "fair-c2"}


def test_the_two_node_example_preempts_exactly_one_node_of_a_for_b(worker: Worker, executors: Executors) -> None:
    """Scenario file 23, for real: A fills 2 x 32 cpus with 64 jobs; B's 32-cpu job takes one node."""
    a, b = new_queue(worker, "prem-a"), new_queue(worker, "prem-b")
    executors.fake("prem-c", nodes=2, cpu="32", memory="256Gi")
    a_jobs = submit_jobs(worker, a, "fill", [fake_item(executors.selector, "1", "4Gi", 600, "armada-preemptible") for _ in range(64)])
    wait_states(worker, a_jobs, {"running"}, 60, "A's 64 jobs running")

    [b_job] = submit_jobs(worker, b, "big", [fake_item(executors.selector, "32", "256Gi", 600, "armada-preemptible")])
    wait_states(worker, [b_job], {"running"}, 60, "B's job running")
    settle(2)  # a few more cycles: nothing else may be preempted

    after = states(worker, a_jobs)
    preempted = sorted(job_id for job_id, job in after.items() if job["state"] == "preempted")
    assert len(preempted) == 32
    assert count_by(after, "state", frozenset({"running"})) == {"running": 32}
    nodes = {job["runs"][-1]["node"] for job_id, job in after.items() if job_id in preempted}
    assert len(nodes) == 1, "the preempted jobs free exactly one node"
    assert states(worker, [b_job])[b_job]["runs"][-1]["node"] in nodes
    recorded = [d for kind, _, _, payload in events(worker, "_scheduler") if kind == "SchedulingCycle" for d in payload["decisions"]]
    reasons = {d["reason"] for d in recorded if d["kind"] == "preempted" and d["job_id"] in preempted}
    assert len(reasons) == 1 and reasons != {""}, "the cycle record says why each job was preempted"
    cancel_job_set(worker, a, "fill")
    cancel_job_set(worker, b, "big")
    wait_states(worker, [*a_jobs, b_job], {"preempted", "cancelled"}, 30, "the test's jobs to end")


def test_a_gang_runs_all_or_nothing_across_the_pools_clusters(worker: Worker, executors: Executors) -> None:
    queue = new_queue(worker, "gang")
    executors.fake("gang-c1", nodes=3)
    gang = {"armadaproject.io/gangId": "g1", "armadaproject.io/gangCardinality": "4"}
    members = submit_jobs(worker, queue, "g", [fake_item(executors.selector, "8", "8Gi", 3, annotations=gang) for _ in range(4)])
    wait_states(worker, members, {"queued"}, 30, "the gang queued")
    settle(3)
    assert count_by(states(worker, members), "state", frozenset({"queued"})) == {"queued": 4}, "3 nodes cannot hold a gang of 4"

    executors.fake("gang-c2", nodes=1)  # 4 nodes now, in two clusters: without a uniformity label a gang may span them (Armada)
    leased = wait_states(worker, members, ACTIVE | {"succeeded"}, 30, "the whole gang leased")
    cycles = {payload["cycle_id"] for kind, job_id, _, payload in events(worker, queue) if kind == "JobLeased" and job_id in members}
    assert len(cycles) == 1, "all members leased by one cycle"
    assert sorted(job["runs"][-1]["executor"] for job in leased.values()) == ["gang-c1"] * 3 + ["gang-c2"]
    assert len({(job["runs"][-1]["executor"], job["runs"][-1]["node"]) for job in leased.values()}) == 4
    wait_states(worker, members, {"succeeded"}, 30, "the gang to succeed")


def test_runs_of_a_killed_executor_expire_and_finish_on_the_other(worker: Worker, executors: Executors) -> None:
    queue = new_queue(worker, "expiry")
    doomed = executors.fake("expiry-c1", nodes=4)
    executors.fake("expiry-c2", nodes=4)
    job_ids = submit_jobs(worker, queue, "e", [fake_item(executors.selector, runtime_s=6) for _ in range(48)])

    def on_both() -> dict[str, dict[str, Any]] | None:
        found = states(worker, job_ids)
        return found if {j["runs"][-1]["executor"] for j in found.values() if j["runs"]} == {"expiry-c1", "expiry-c2"} else None

    running = poll(on_both, 60, "runs on both executors", 0.5)
    on_doomed = {job_id for job_id, job in running.items() if job["runs"] and job["runs"][-1]["executor"] == "expiry-c1"}
    doomed.kill()

    done = wait_states(worker, job_ids, {"succeeded"}, 120, "every job to succeed")
    for job in done.values():
        succeeded = [r for r in job["runs"] if r["state"] == "succeeded"]
        assert len(succeeded) == 1, job
    moved = [job for job_id, job in done.items() if job_id in on_doomed and job["runs"][-1]["executor"] == "expiry-c2"]
    assert moved, "jobs of the killed executor finished on the other"
    for job in moved:
        assert job["runs"][0]["executor"] == "expiry-c1" and job["runs"][0]["state"] == "lease_expired"


def test_an_executor_holding_30k_runs_reaches_the_scheduler(worker: Worker) -> None:
    """Its report and the node state forwarded from it are each over Kafka's default 1 MB limit."""
    runs = [{"run_id": f"01RUN{i:021d}", "job_id": f"01JOB{i:021d}", "node": "n0", "state": "succeeded"} for i in range(30_000)]
    report = {"executor": "bulky", "pool": "default", "time": 0, "nodes": [], "runs": runs}
    value = encode("executor_report", report)
    assert len(value) > 1024 * 1024
    worker.produce("executor-reports", [(b"bulky", value)])

    def forwarded() -> feed.ExecutorState | None:
        records = (feed.decode(r.value) for r in worker.read(worker.topic("scheduler-feed")) if r.value)
        return next((s for s in records if isinstance(s, feed.ExecutorState) and s.executor == "bulky"), None)

    state = poll(forwarded, 30, "the bulky executor's state on the scheduler feed")
    assert len(state.runs) == 30_000 and state.active == ()


def test_reports_between_full_states_reach_the_scheduler_as_heartbeats(worker: Worker) -> None:
    """Runs after tests whose executors reported every second for longer than the full-state interval."""
    records = [feed.decode(r.value) for r in worker.read(worker.topic("scheduler-feed")) if r.value]
    beating = {r.executor for r in records if isinstance(r, feed.Heartbeat)}
    in_full = {r.executor for r in records if isinstance(r, feed.ExecutorState)}
    assert beating and beating <= in_full


def test_replaying_the_feed_repeats_every_recorded_cycle(worker: Worker) -> None:
    """Runs last: the cycles of every test above, decided again from the feed alone."""
    feed_records = sorted(worker.read(worker.topic("scheduler-feed")), key=lambda r: r.offset)
    # No configuration given: the feed says which one decided (the worker put it there before its first tick).
    steps = repeat("feed", ((r, feed.decode(r.value)) for r in feed_records if r.value is not None), Configurations())
    replayed = [(step.outcome.cycle_id, decisions(step.outcome)) for step in steps if isinstance(step, Repeated) and step.outcome.records]
    by_cycle: dict[str, list[dict[str, object]]] = {}
    hashes = set()
    for kind, _, _, payload in events(worker, "_scheduler"):
        if kind == "SchedulingCycle":
            by_cycle.setdefault(payload["cycle_id"], []).extend(payload["decisions"])
            hashes.add(payload["config_hash"])
    recorded = list(by_cycle.items())
    assert recorded and any(d["kind"] == "leased" for _, found in recorded for d in found)
    assert replayed == recorded
    assert hashes == {parse(CONFIG).hash}, "every cycle names the configuration that decided it"
