"""Each scheduling feature of the configuration file, live: real broker, one worker, fake executors.

One worker serves the module with one scheduler configuration that enables every feature at once
(priority classes of several priorities, an away node type, an indexed uniformity label, a small
per-queue rate limit, pools with settings of their own). Every test uses its own queues, its own
pool (so that no other test's nodes count in its pool's totals) and nodes that only its jobs
select; jobs are mostly submitted before their executor starts, so that the first cycle that can
place them sees them all. What each test asserts is read back from the log: job states, leases
and the scheduler's cycle records.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from armada_client.armada import submit_pb2, submit_pb2_grpc

from ops.broker import EmbeddedBroker
from streams.client.cli import main
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

GPU_TAINT = {"key": "gpu", "value": "true", "effect": "NoSchedule"}
QUEUE_RATE, QUEUE_BURST = 4.0, 6
CLASSES = {
    "armada-default": {"priority": 1000, "preemptible": False},
    "armada-preemptible": {"priority": 1000, "preemptible": True},
    "background": {"priority": 100, "preemptible": True},
    "urgent": {"priority": 2000, "preemptible": False},
    "away-batch": {"priority": 1000, "preemptible": True, "awayNodeTypes": [{"priority": 500, "wellKnownNodeTypeName": "gpu"}]},
}
CONFIG = expiring_after(
    4,
    priorityClasses=CLASSES,
    wellKnownNodeTypes=[{"name": "gpu", "taints": [GPU_TAINT]}],
    indexedNodeLabels=["zone"],
    maximumPerQueueSchedulingRate=QUEUE_RATE,
    maximumPerQueueSchedulingBurst=QUEUE_BURST,
    maximumResourceFractionToScheduleByPool={"round-limited": {"cpu": 0.25}},
    pools=[{"name": "default"}, {"name": "protected", "protectedFractionOfFairShare": 2.0}],
)
CONFIG["submission"] = {"allowedPriorityClassNames": dict.fromkeys(CLASSES, True)}


@pytest.fixture(scope="module")
def worker(broker: EmbeddedBroker, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Worker]:
    with running_worker(broker, tmp_path_factory, "features", CONFIG, FLOTILLA_SCHEDULE_PERIOD_S="0.5") as started:
        yield started


def cycles(worker: Worker) -> dict[str, dict[str, Any]]:
    """Every SchedulingCycle payload by cycle id, its decisions gathered from all its records."""
    found: dict[str, dict[str, Any]] = {}
    for kind, _, _, payload in events(worker, "_scheduler"):
        if kind == "SchedulingCycle":
            cycle = found.setdefault(payload["cycle_id"], {**payload, "decisions": []})
            cycle["decisions"] += payload["decisions"]
    return found


def leases(worker: Worker, queue: str) -> list[tuple[str, dict[str, Any]]]:
    """(job id, JobLeased payload) of the queue, in log order."""
    return [(job_id, payload) for kind, job_id, _, payload in events(worker, queue) if kind == "JobLeased" and job_id]


def reasons(worker: Worker, job_ids: list[str]) -> set[str]:
    wanted = set(job_ids)
    return {d["reason"] for cycle in cycles(worker).values() for d in cycle["decisions"] if d["job_id"] in wanted}


def test_a_job_of_a_higher_class_displaces_lower_priority_jobs_and_equals_do_not(worker: Worker, executors: Executors) -> None:
    queue = new_queue(worker, "urgency")
    executors.fake("urgency-c", nodes=1, pool="urgency")
    fill = submit_jobs(worker, queue, "fill", [fake_item(executors.selector, "1", "1Gi", 600, "background") for _ in range(8)])
    wait_states(worker, fill, {"running"}, 60, "the node full of background jobs")
    [peer] = submit_jobs(worker, queue, "peer", [fake_item(executors.selector, "8", "1Gi", 600, "background")])
    settle(2)
    assert states(worker, [peer])[peer]["state"] == "queued", "a job of the same priority displaces nobody"
    assert count_by(states(worker, fill), "state", frozenset({"running"})) == {"running": 8}

    [urgent] = submit_jobs(worker, queue, "urgent", [fake_item(executors.selector, "8", "1Gi", 600, "urgent")])
    wait_states(worker, [urgent], {"running"}, 60, "the urgent job running")
    after = states(worker, fill)
    assert count_by(after, "state", frozenset({"preempted"})) == {"preempted": 8}
    assert reasons(worker, fill) >= {"preempted by a job of higher priority"}
    assert states(worker, [peer])[peer]["state"] == "queued"
    for job_set in ("peer", "urgent"):
        cancel_job_set(worker, queue, job_set)


def test_a_queue_is_leased_no_faster_than_its_rate_limit(worker: Worker, executors: Executors) -> None:
    queue = new_queue(worker, "rated")
    job_ids = submit_jobs(worker, queue, "r", [fake_item(executors.selector, "1", "1Gi", 600) for _ in range(20)])
    wait_states(worker, job_ids, {"queued"}, 30, "20 jobs queued")
    executors.fake("rated-c", nodes=3, pool="rated")  # 24 slots
    wait_states(worker, job_ids, ACTIVE, 60, "all 20 leased")

    times = {cycle_id: cycle["cycle_time"] for cycle_id, cycle in cycles(worker).items()}
    by_cycle: dict[str, int] = defaultdict(int)
    for _, payload in leases(worker, queue):
        by_cycle[payload["cycle_id"]] += 1
    ordered = sorted(by_cycle.items(), key=lambda item: times[item[0]])
    first_at = times[ordered[0][0]]
    assert ordered[0][1] == QUEUE_BURST, "the first cycle leases the burst"
    leased = 0
    for cycle_id, count in ordered:
        leased += count
        allowed = QUEUE_BURST + QUEUE_RATE * (times[cycle_id] - first_at) / 1000
        assert leased <= allowed + 1e-6, (leased, allowed, ordered)
    assert leased == 20
    cancel_job_set(worker, queue, "r")


def test_each_pool_has_its_own_round_limit(worker: Worker, executors: Executors) -> None:
    """Two pools of 32 cpus, 18 one-cpu jobs each over three queues: pool round-limited starts no new
    job once a cycle scheduled more than a quarter of it (so 9 in its first cycle), the other 18."""
    limited = {**executors.selector, "flotilla.io/pool": "round-limited"}
    plain = {**executors.selector, "flotilla.io/pool": "plain"}
    # Queues of their own in each pool: a queue's rate-limit bucket is shared by the pools.
    queues = {name: [new_queue(worker, f"round-{name}-{i}") for i in range(3)] for name in ("limited", "plain")}
    jobs: dict[str, list[str]] = {"limited": [], "plain": []}
    for name, selector in (("limited", limited), ("plain", plain)):
        for queue in queues[name]:
            jobs[name] += submit_jobs(worker, queue, name, [fake_item(selector, "1", "1Gi", 600) for _ in range(6)])
    wait_states(worker, jobs["limited"] + jobs["plain"], {"queued"}, 30, "36 jobs queued")
    executors.fake("round-limited-c", nodes=4, pool="round-limited", labels={"flotilla.io/pool": "round-limited"})
    executors.fake("round-plain-c", nodes=4, pool="plain", labels={"flotilla.io/pool": "plain"})
    wait_states(worker, jobs["limited"] + jobs["plain"], ACTIVE, 60, "all 36 leased")

    times = {cycle_id: cycle["cycle_time"] for cycle_id, cycle in cycles(worker).items()}
    for name, pool, first in (("limited", "round-limited", 9), ("plain", "plain", 18)):
        wanted = set(jobs[name])
        by_cycle: dict[str, int] = defaultdict(int)
        for queue in queues[name]:
            for job_id, payload in leases(worker, queue):
                if job_id in wanted:
                    assert payload["pool"] == pool
                    by_cycle[payload["cycle_id"]] += 1
        assert min(by_cycle.items(), key=lambda item: times[item[0]])[1] == first, (name, by_cycle)
    assert "maximum resources scheduled" in reasons(worker, jobs["limited"])
    for name, pool_queues in queues.items():
        for queue in pool_queues:
            cancel_job_set(worker, queue, name)


def test_a_queue_within_its_protected_fraction_keeps_its_jobs(worker: Worker, executors: Executors) -> None:
    """Pool protected: protectedFractionOfFairShare 2. A holds 12 of 16 slots, 1.5 times its fair
    share of a half: it is not preempted for B, which gets the 4 free slots and waits for the rest."""
    a, b = new_queue(worker, "protected-a"), new_queue(worker, "protected-b")
    executors.fake("protected-c", nodes=2, pool="protected")
    a_jobs = submit_jobs(worker, a, "a", [fake_item(executors.selector, "1", "1Gi", 600, "armada-preemptible") for _ in range(12)])
    wait_states(worker, a_jobs, {"running"}, 60, "A's 12 jobs running")
    b_jobs = submit_jobs(worker, b, "b", [fake_item(executors.selector, "1", "1Gi", 600, "armada-preemptible") for _ in range(8)])
    settle(3)
    assert count_by(states(worker, a_jobs), "state", frozenset({"running"})) == {"running": 12}
    assert count_by(states(worker, b_jobs)) == {b: 4}
    assert not [kind for kind, *_ in events(worker, a) if kind == "JobPreempted"]
    cancel_job_set(worker, a, "a")
    cancel_job_set(worker, b, "b")


def test_a_gang_with_a_uniformity_label_runs_on_nodes_sharing_one_value(worker: Worker, executors: Executors) -> None:
    queue = new_queue(worker, "zoned")
    executors.cluster(
        "zoned-c",
        [
            {"count": 2, "prefix": "a", "cpu": "8", "memory": "32Gi", "labels": {"zone": "a"}},
            {"count": 3, "prefix": "b", "cpu": "8", "memory": "32Gi", "labels": {"zone": "b"}},
        ],
        pool="zoned",
    )
    gang = {"armadaproject.io/gangId": "z", "armadaproject.io/gangCardinality": "3", "armadaproject.io/gangNodeUniformityLabel": "zone"}
    unindexed = {**gang, "armadaproject.io/gangId": "r", "armadaproject.io/gangNodeUniformityLabel": "rack"}
    # First the gang that cannot be placed: the cycle that leases the other one records why it waits.
    stuck = submit_jobs(worker, queue, "rack", [fake_item(executors.selector, "1", "1Gi", 600, annotations=unindexed) for _ in range(3)])
    members = submit_jobs(worker, queue, "zoned", [fake_item(executors.selector, "8", "1Gi", 600, annotations=gang) for _ in range(3)])
    placed = wait_states(worker, members, ACTIVE, 60, "the zoned gang leased")
    assert {job["runs"][-1]["node"].split("-")[0] for job in placed.values()} == {"b"}, "zone a has two nodes, b three"
    settle(1)
    assert {job["state"] for job in states(worker, stuck).values()} == {"queued"}
    assert "uniformity label rack is not indexed" in reasons(worker, stuck)
    for job_set in ("zoned", "rack"):
        cancel_job_set(worker, queue, job_set)


def test_fail_fast_jobs_and_gang_members_are_not_retried(worker: Worker, executors: Executors) -> None:
    queue = new_queue(worker, "fastfail")
    executors.fake("fastfail-c", nodes=4, pool="fastfail")
    returned = {"flotilla.io/fake-outcome": "returned"}
    [plain] = submit_jobs(worker, queue, "plain", [fake_item(executors.selector, runtime_s=1, annotations=returned)])
    [fast] = submit_jobs(
        worker, queue, "fast", [fake_item(executors.selector, runtime_s=1, annotations={**returned, "armadaproject.io/failFast": "true"})]
    )
    gang = {"armadaproject.io/gangId": "ff", "armadaproject.io/gangCardinality": "2"}
    doomed, survivor = submit_jobs(
        worker,
        queue,
        "gang",
        [
            fake_item(executors.selector, runtime_s=1, annotations={**gang, **returned}),
            fake_item(executors.selector, runtime_s=3, annotations=gang),
        ],
    )
    ended = wait_states(worker, [fast, doomed, survivor], {"failed", "succeeded"}, 60, "the fail-fast jobs failed, the survivor done")
    assert (ended[fast]["state"], len(ended[fast]["runs"])) == ("failed", 1)
    assert (ended[doomed]["state"], len(ended[doomed]["runs"])) == ("failed", 1)
    assert ended[survivor]["state"] == "succeeded", "the gang's other member is not stopped"
    wait_states(worker, [plain], {"failed"}, 60, "the plain job failed after its retries")
    assert len(states(worker, [plain])[plain]["runs"]) == 4, "maxRetries 3 (Armada's default): four runs"


def test_fractional_priorities_order_the_jobs_of_a_queue(worker: Worker, executors: Executors) -> None:
    queue = new_queue(worker, "fractions")
    job_ids = submit_jobs(
        worker, queue, "f", [fake_item(executors.selector, "1", "1Gi", 0.5, priority=p) for p in (2.0, 1.5, 1.25)]
    )  # truncated to whole numbers, 1.5 and 1.25 would tie and go in submission order
    wait_states(worker, job_ids, {"queued"}, 30, "the jobs queued")
    executors.fake("fractions-c", nodes=1, cpu="1", pool="fractions")
    wait_states(worker, job_ids, {"succeeded"}, 60, "all three run one after the other")
    order = [job_id for job_id, _ in leases(worker, queue)]
    assert order == [job_ids[2], job_ids[1], job_ids[0]]


def test_an_away_job_runs_on_a_node_type_of_its_class_until_a_home_job_needs_it(worker: Worker, executors: Executors) -> None:
    queue = new_queue(worker, "away")
    executors.fake("away-c", nodes=1, pool="away", taints=[GPU_TAINT])
    [away] = submit_jobs(worker, queue, "away", [fake_item(executors.selector, "8", "1Gi", 600, "away-batch")])
    [plain] = submit_jobs(worker, queue, "plain", [fake_item(executors.selector, "1", "1Gi", 600, "armada-preemptible")])
    wait_states(worker, [away], {"running"}, 60, "the away job running on the tainted node")
    assert [p["scheduled_at_priority"] for j, p in leases(worker, queue) if j == away] == [500]
    assert states(worker, [plain])[plain]["state"] == "queued", "a class without the away node type does not tolerate the taint"

    [home] = submit_jobs(
        worker, queue, "home", [fake_item(executors.selector, "8", "1Gi", 600, "armada-preemptible", tolerations=[GPU_TAINT])]
    )
    wait_states(worker, [home], {"running"}, 60, "the home job running")
    assert states(worker, [away])[away]["state"] == "preempted"
    for job_set in ("plain", "home"):
        cancel_job_set(worker, queue, job_set)


def test_armadas_queue_and_executor_operations_act_on_the_jobs_they_match(
    worker: Worker, executors: Executors, capsys: pytest.CaptureFixture[str]
) -> None:
    """gRPC PreemptOnQueue / CancelOnQueue (QueueService, as Armada's client calls them) and the
    command line's `preempt executor` and `cordon queues`, on running and queued jobs."""
    queue = new_queue(worker, "operations")
    executors.fake("operations-c", nodes=1, pool="operations")
    background = submit_jobs(worker, queue, "bg", [fake_item(executors.selector, "1", "1Gi", 600, "background") for _ in range(3)])
    preemptible = submit_jobs(
        worker, queue, "pre", [fake_item(executors.selector, "1", "1Gi", 600, "armada-preemptible") for _ in range(2)]
    )
    waiting = submit_jobs(worker, queue, "wait", [fake_item({"flotilla.io/nowhere": "true"}) for _ in range(2)])
    wait_states(worker, background + preemptible, {"running"}, 60, "five jobs running")

    with grpc.insecure_channel(worker.grpc_target) as channel:
        service = submit_pb2_grpc.QueueServiceStub(channel)
        service.PreemptOnQueue(submit_pb2.QueuePreemptRequest(name=queue, priorityClasses=["background"]))
        wait_states(worker, background, {"preempted"}, 30, "the background jobs preempted")
        service.CancelOnQueue(submit_pb2.QueueCancelRequest(name=queue, jobStates=[submit_pb2.QUEUED]))
        wait_states(worker, waiting, {"cancelled"}, 30, "the queued jobs cancelled")
        with pytest.raises(grpc.RpcError) as refused:
            service.CancelOnQueue(submit_pb2.QueueCancelRequest(name=queue, jobStates=[submit_pb2.SUCCEEDED]))
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert {job["state"] for job in states(worker, preemptible).values()} == {"running"}, "other classes and states are left alone"

    url = ["--url", worker.url]
    assert main(["preempt", "executor", "operations-c", "--all-priority-classes", "--pools", "elsewhere", *url]) == 0
    assert "preempt requested for 0 job(s) on executor operations-c" in capsys.readouterr().out
    assert main(["preempt", "executor", "operations-c", "--all-priority-classes", "--pools", "operations", "--reason", "drain", *url]) == 0
    wait_states(worker, preemptible, {"preempted"}, 30, "the executor's jobs preempted")
    requested = {job_id: payload["reason"] for kind, job_id, _, payload in events(worker, queue) if kind == "JobPreemptRequested"}
    assert requested == {**dict.fromkeys(background, "preempted by PreemptOnQueue"), **dict.fromkeys(preemptible, "drain")}
    assert main(["cordon", "queues", queue, *url]) == 0
    assert worker.client.call("GET", f"/api/v1/queues/{queue}")["cordoned"] is True


def cluster_executor(worker: Worker, name: str) -> dict[str, Any] | None:
    """The executor as `/api/v1/cluster` shows it (None until the scheduler has its report)."""
    return next((found for found in worker.client.call("GET", "/api/v1/cluster")["executors"] if found["executor"] == name), None)


def test_a_cordoned_executor_keeps_its_runs_takes_no_new_job_and_takes_them_again_once_uncordoned(
    worker: Worker, executors: Executors, capsys: pytest.CaptureFixture[str]
) -> None:
    """`flotilla cordon executor` / `uncordon executor` (Armada's UpsertExecutorSettings) through the API,
    on a fake executor with room for every job: while cordoned, its running job goes on and no job is
    leased to it; uncordoned, the waiting jobs are."""
    queue = new_queue(worker, "executor-cordon")
    executors.fake("cordon-c", nodes=1, pool="cordon")
    first = submit_jobs(worker, queue, "first", [fake_item(executors.selector, "1", "1Gi", 600)])
    wait_states(worker, first, {"running"}, 60, "the first job running")

    url = ["--url", worker.url]
    cordoned_at = int(time.time() * 1000)
    assert main(["cordon", "executor", "cordon-c", "--reason", "kernel upgrade", *url]) == 0
    assert capsys.readouterr().out == "cordoned executor cordon-c\n"
    shown = poll(
        lambda: (found := cluster_executor(worker, "cordon-c")) and found["cordoned"] and found, 30, "the scheduler holding the cordon"
    )
    assert shown["cordon_reason"] == "kernel upgrade" and shown["cordoned_by"]
    later = submit_jobs(worker, queue, "later", [fake_item(executors.selector, "1", "1Gi", 600) for _ in range(2)])
    wait_states(worker, later, {"queued"}, 30, "the later jobs queued")
    settle(4)  # eight cycles of 0.5 s
    assert {job["state"] for job in states(worker, later).values()} == {"queued"}, "nothing leased to a cordoned executor"
    assert states(worker, first)[first[0]]["state"] == "running", "its running job goes on"

    assert main(["uncordon", "executor", "cordon-c", *url]) == 0
    wait_states(worker, later, {"running"}, 60, "the later jobs running once uncordoned")
    assert (cluster_executor(worker, "cordon-c") or {}).get("cordoned") is False
    leased_to = {payload["executor"] for kind, job_id, _, payload in events(worker, queue) if kind == "JobLeased"}
    assert leased_to == {"cordon-c"}
    for job_set in ("first", "later"):
        cancel_job_set(worker, queue, job_set)
    # The cycles since the cordon, repeated from the log, decide what the scheduler decided.
    report = worker.client.call("GET", f"/api/v1/audit?since={cordoned_at}")
    assert report["divergences"] == 0, report["first_divergence"]
    assert report["ok"] and report["checked"] > 0
