"""what-if over a recorded workload: the real fold, index and cycle with another configuration."""

from __future__ import annotations

from dataclasses import replace

from streams.domain.executor_settings import SETTINGS_JOB_SET, SETTINGS_QUEUE, settings_payload
from streams.replay.whatif import Run, Workload, capacity_at, measure, percentile, simulate
from streams.scheduler import feed
from streams.scheduler.algorithm.model import PriorityClass
from streams.scheduler.config import CycleConfig
from tests.kit.quantities import CPU
from tests.kit.scheduler import executor, nodes
from tests.replay.kit import LoggedLoop, small, with_class

RUN_MS = 2_000


def recorded(config: CycleConfig | None = None, cordoned: tuple[int, int] | None = None) -> LoggedLoop:
    """Queues a and b each submit 8 one-cpu jobs of 2 s at once onto one 4-cpu node; an executor
    runs each for 2 s; a cycle every second. ``cordoned``: the cycles from which, and from which no
    longer, an administrator cordoned the executor."""
    loop = LoggedLoop(config=config or CycleConfig())
    for i in range(8):
        loop.submit(f"a{i}", "a", cpu="1", at=1_000 + i)
        loop.submit(f"b{i}", "b", cpu="1", at=1_000 + i)
    ends: dict[str, int] = {}
    for at in range(2_000, 16_001, 1_000):
        for job_id, end in sorted(ends.items()):
            if end <= at and loop.job(job_id)["state"] in ("leased", "running"):
                run_id = loop.job(job_id)["runs"][-1]["run_id"]
                loop.run_event(job_id, "JobRunRunning", end - RUN_MS, run_id=run_id, node="n0")
                loop.run_event(job_id, "JobRunSucceeded", end, run_id=run_id)
                loop.run_event(job_id, "JobSucceeded", end, run_id=run_id)
        if cordoned is not None and at in cordoned:
            kind, fields = settings_payload("ex1", at == cordoned[0], "drain")
            loop.event(None, kind.rsplit(".", 1)[-1], at - 200, SETTINGS_QUEUE, SETTINGS_JOB_SET, **fields)
        small(loop, at - 100)
        outcome = loop.cycle(at)
        for sequence in outcome.sequences:
            for event in sequence["events"]:
                if event["payload"][0] == "flotilla.JobLeased":
                    ends[event["job_id"]] = at + RUN_MS
    return loop


def workload_of(loop: LoggedLoop) -> Workload:
    workload = Workload()
    workload.read_events(loop.log)
    workload.read_feed(feed.decode(raw) for _, raw in loop.feed_log)
    return workload


def test_the_same_configuration_reproduces_what_happened() -> None:
    loop = recorded()
    workload = workload_of(loop)
    assert all(job.finished == (RUN_MS, True) for job in workload.jobs.values())
    report = measure(workload, simulate(workload, loop.config), loop.config)
    for queue in ("a", "b"):
        actual, what_if = report["queues"][queue]["actual"], report["queues"][queue]["what_if"]
        assert actual == what_if, queue
        assert actual["started"] == 8 and actual["preemptions"] == 0
    assert report["series"]["actual"] == report["series"]["what_if"]
    assert report["moved"] == []
    # equal weights: a and b share the node half and half while both wait
    assert report["series"]["actual"]["a"][0] == report["series"]["actual"]["b"][0] == 0.5


def test_a_cordon_on_the_log_holds_in_the_what_if_too() -> None:
    loop = recorded(cordoned=(4_000, 9_000))
    workload = workload_of(loop)
    report = measure(workload, simulate(workload, loop.config), loop.config)
    for queue in ("a", "b"):
        assert report["queues"][queue]["actual"] == report["queues"][queue]["what_if"], queue
    assert report["series"]["actual"] == report["series"]["what_if"] and report["moved"] == []
    # While cordoned nothing started: the cluster emptied, and the jobs that waited started later than without it.
    uncordoned = measure(workload_of(recorded()), simulate(workload_of(recorded()), loop.config), loop.config)
    assert report["queues"]["a"]["actual"] != uncordoned["queues"]["a"]["actual"]


def test_a_heavier_queue_gets_more_and_waits_less_and_the_other_waits_more() -> None:
    loop = recorded()
    workload = workload_of(loop)
    report = measure(workload, simulate(workload, loop.config, weights={"a": 3.0}), loop.config)
    a, b = report["queues"]["a"], report["queues"]["b"]
    # a, three times as heavy, starts sooner; b later
    assert a["what_if"]["wait_p50_s"] < a["actual"]["wait_p50_s"]
    assert b["what_if"]["wait_p95_s"] > b["actual"]["wait_p95_s"]
    # weight 3 to 1: a holds three of the four cpus in the first cycle
    assert a["what_if"]["mean_share"] == a["actual"]["mean_share"]
    assert report["series"]["what_if"]["a"][0] == 0.75 and report["series"]["what_if"]["b"][0] == 0.25
    moved = report["moved"]
    assert moved and abs(moved[0]["moved_s"]) >= abs(moved[-1]["moved_s"]) > 0
    assert {m["queue"] for m in moved} <= {"a", "b"}


def test_an_urgent_class_preempts_in_the_what_if_and_the_count_shows_it() -> None:
    """Recorded with b's jobs in a class of equal priority; the what-if makes that class urgent."""
    loop = with_class(PriorityClass("other", 1000, preemptible=True))
    config = loop.config
    loop.cycle(2_000, "a", "b")
    loop.submit("b0", "b", cpu="4", at=2_100, pc="other")
    small(loop, 2_500)
    loop.cycle(3_000, "a", "b")
    small(loop, 3_500)
    loop.cycle(4_000, "a", "b")
    workload = workload_of(loop)
    urgent = {**config.scheduling.priority_classes, "other": PriorityClass("other", 2000, preemptible=False)}
    what_if_config = CycleConfig(scheduling=replace(config.scheduling, priority_classes=urgent, enable_fairshare_preemption=False))
    same = measure(workload, simulate(workload, config), config)
    report = measure(workload, simulate(workload, what_if_config), what_if_config)
    assert same["queues"]["a"]["actual"]["preemptions"] == same["queues"]["a"]["what_if"]["preemptions"]
    assert report["queues"]["a"]["what_if"]["preemptions"] == 4
    assert report["queues"]["b"]["what_if"]["started"] == 1


def test_the_capacity_shares_are_taken_of_leaves_out_unschedulable_nodes_no_run_is_on() -> None:
    """As the scheduler's pool totals (`PoolNodes.totals`): ex1's unschedulable node n1 counts while a
    run is on it, and not before or after; ex2, stale by then, counts not at all."""
    cordoned = replace(nodes(2)[1], unschedulable=True)
    workload = Workload(reports=[(1_000, executor("ex1", 1_000, (nodes(1)[0], cordoned))), (1_000, executor("ex2", 1_000))])
    workload.heard = [(5_000, "ex1")]
    on_n1 = Run("j", "a", {"cpu": 4 * CPU}, start=2_000, end=3_000, node="ex1/n1")
    found = capacity_at(workload, [1_500, 2_500, 5_000], 2_000, [on_n1])
    assert [capacity["cpu"] for capacity in found] == [96 * CPU, 128 * CPU, 32 * CPU]


def test_percentiles_are_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]
    assert (percentile(values, 50), percentile(values, 95), percentile(values, 99)) == (50.0, 95.0, 99.0)
    assert percentile([], 50) is None and percentile([7.0], 99) == 7.0
