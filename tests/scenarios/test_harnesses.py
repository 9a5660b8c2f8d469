"""The harness features the scenarios' README documents (section 3) that none of the shared files
uses yet, each on a small document built from that description and the Go case it paraphrases."""

from __future__ import annotations

from typing import Any

import pytest

from streams.scenarios.runner import ScenarioError, differences, run

NODE_32 = {"cpu": "32", "memory": "256Gi"}


def job(job_id: str, queue: str = "A", cpu: str = "1", memory: str = "4Gi", pc: str = "priority-0") -> dict[str, Any]:
    return {"id": job_id, "queue": queue, "priority_class": pc, "requests": {"cpu": cpu, "memory": memory}}


def doc(harness: str, rounds: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {
        "name": "case",
        "harness": harness,
        "config": {"base": "testfixtures"},
        "queues": [{"name": "A", "priority_factor": 1.0}],
        "rounds": rounds,
        **extra,
    }


def scheduled(document: dict[str, Any], round_number: int = 0) -> set[str]:
    return set(run(document).rounds[round_number].scheduled)


def test_initial_allocation_counts_in_fairness_but_takes_no_node() -> None:
    """Go: "fairness two queues with initial allocation": A already holds 100 cpus elsewhere, so B,
    far cheaper, takes the whole 32-cpu node."""
    jobs = [job(f"a{i}") for i in range(32)] + [job(f"b{i}", "B") for i in range(32)]
    case = doc(
        "queue_scheduler_single_round",
        [{"round": 0, "submit": jobs, "expected": {"scheduled": [f"b{i}" for i in range(32)]}}],
        nodes=[{"id": "n0", "resources": NODE_32}],
        queues=[{"name": "A", "priority_factor": 1.0}, {"name": "B", "priority_factor": 1.0}],
        initial_allocation={"A": {"priority-0": {"cpu": "100"}}},
    )
    assert differences(case, run(case)) == []
    without = {**case, "initial_allocation": {}}
    assert {j[0] for j in scheduled(without)} == {"a", "b"}, "with no allocation elsewhere the queues share the node"


def test_initial_allocation_counts_against_the_per_queue_class_limit() -> None:
    case = doc(
        "queue_scheduler_single_round",
        [{"round": 0, "submit": [job(f"a{i}") for i in range(8)]}],
        nodes=[{"id": "n0", "resources": NODE_32}],
        config={"base": "testfixtures", "priority_class_overrides": {"priority-0": {"maximum_resource_fraction_per_queue": {"cpu": 0.25}}}},
        initial_allocation={"A": {"priority-0": {"cpu": "6"}}},
    )
    assert len(scheduled(case)) == 2  # 6 held elsewhere + 2 = 8 cpus, a quarter of the node's 32


def test_a_cordoned_node_counts_in_the_pool_totals_as_in_the_go_harness() -> None:
    """Go's TestPreemptingQueueScheduler cordons a node by a taint alone (NodeIndicesToCordon), so an
    empty cordoned node still counts in the totals the round limit is taken of: a quarter of 64 cpus
    lets six 3-cpu jobs on. A node the executor reports unschedulable (`unschedulable: true`, Armada's
    production flag) with no job on it does not count: a quarter of 32 lets three on."""
    rounds = [{"round": 0, "cordon": ["n1"], "submit": [job(f"j{i}", cpu="3") for i in range(10)]}]
    config = {"base": "testfixtures", "maximum_resource_fraction_to_schedule": {"cpu": 0.25}}
    nodes = [{"id": "n0", "resources": NODE_32}, {"id": "n1", "resources": NODE_32}]
    case = doc("preempting_multi_round", rounds, nodes=nodes, config=config)
    assert run(case).rounds[0].placements == {f"j{i}": "n0" for i in range(6)}
    reported = {**case, "rounds": [{**rounds[0], "cordon": []}], "nodes": [nodes[0], {**nodes[1], "unschedulable": True}]}
    assert run(reported).rounds[0].placements == {f"j{i}": "n0" for i in range(3)}


def algo(rounds: list[dict[str, Any]], executors: list[dict[str, Any]], nodes: int, **extra: Any) -> dict[str, Any]:
    return doc("scheduling_algo", rounds, executors=executors, nodes=[{"id": f"n{i}", "resources": NODE_32} for i in range(nodes)], **extra)


def test_the_algo_harness_does_not_schedule_onto_stale_executors() -> None:
    """Go: "do not schedule onto stale executors": executor2 last updated an hour ago (timeout 15m)."""
    executors = [
        {"id": "executor1", "pool": "testPool", "nodes": ["n0"]},
        {"id": "executor2", "pool": "testPool", "nodes": ["n1"], "last_update": "-1h"},
    ]
    jobs = [job(f"j{i}", cpu="16", memory="128Gi", pc="priority-3") for i in range(10)]
    outcome = run(algo([{"round": 0, "submit": jobs}], executors, 2)).rounds[0]
    assert set(outcome.scheduled) == {"j0", "j1"}
    fresh = [{**e, "last_update": "-10m"} for e in executors]
    assert len(run(algo([{"round": 0, "submit": jobs}], fresh, 2)).rounds[0].scheduled) == 4


@pytest.mark.parametrize(("allowed", "expected"), [(16, 48), (15, 32)])
def test_the_algo_harness_skips_executors_with_too_many_unacknowledged_jobs(allowed: int, expected: int) -> None:
    """Go: "(do not) schedule onto executors with (too many) unacknowledged jobs"."""
    executors = [{"id": "executor1", "nodes": ["n0"]}, {"id": "executor2", "nodes": ["n1"]}]
    held = [{"node": "n0", "acknowledged": False, "jobs": [job(f"r{i}", pc="priority-3") for i in range(16)]}]
    case = algo(
        [{"round": 0, "submit": [job(f"j{i}", pc="priority-3") for i in range(48)]}],
        executors,
        2,
        initial_running=held,
        config={"base": "testfixtures", "max_unacknowledged_jobs_per_executor": allowed},
    )
    assert len(scheduled(case)) == expected


@pytest.mark.parametrize("unusable", [{"last_update": "-1h"}, {"lagging": True}])
def test_the_algo_harness_counts_the_jobs_of_unusable_executors_in_their_queues_share(unusable: dict[str, Any]) -> None:
    """Go's FairSchedulingAlgo sums every executor's jobs into the queues' allocation and demand before it
    leaves the stale and lagging executors out of the node db: A's two 16-cpu jobs on executor2 let B
    take both slots of executor1's node, and none of A's jobs is preempted."""
    executors = [{"id": "executor1", "nodes": ["n0"]}, {"id": "executor2", "nodes": ["n1"]}]
    if "last_update" in unusable:
        executors[1]["last_update"] = unusable["last_update"]
    held = [{"node": "n1", "acknowledged": "lagging" not in unusable, "jobs": [job(f"r{i}", cpu="16", pc="priority-3") for i in range(2)]}]
    jobs = [job(f"{q.lower()}{i}", q, cpu="16", pc="priority-3") for q in "AB" for i in range(2)]
    case = algo(
        [{"round": 0, "submit": jobs}],
        executors,
        2,
        initial_running=held,
        queues=[{"name": "A", "priority_factor": 1.0}, {"name": "B", "priority_factor": 1.0}],
        config={"base": "testfixtures", "max_unacknowledged_jobs_per_executor": 1},
    )
    outcome = run(case).rounds[0]
    assert set(outcome.scheduled) == {"b0", "b1"} and outcome.preempted == ()
    alone = {**case, "initial_running": [], "executors": executors[:1]}
    assert set(run(alone).rounds[0].scheduled) == {"a0", "b0"}, "without executor2's jobs the queues share the node"


def test_the_algo_harness_keeps_unscheduled_jobs_queued_for_the_next_round() -> None:
    """Production semantics: a job the rate limit held back is scheduled a round later (the other
    harnesses delete it)."""
    rounds = [{"round": 0, "submit": [job("j0"), job("j1"), job("j2")]}, {"round": 1, "submit": []}]
    config = {"base": "testfixtures", "maximum_scheduling_rate": 1, "maximum_scheduling_burst": 2}
    outcome = run(algo(rounds, [{"id": "executor1", "nodes": ["n0"]}], 1, config=config))
    assert set(outcome.rounds[0].scheduled) == {"j0", "j1"} and outcome.rounds[0].still_queued == ("j2",)
    assert outcome.rounds[1].scheduled == ("j2",)
    single = run(doc("queue_scheduler_single_round", rounds, nodes=[{"id": "n0", "resources": NODE_32}], config=config))
    assert single.rounds[1].scheduled == (), "the queue scheduler's harness drops what it did not schedule"


def test_the_algo_harness_schedules_each_pool_apart_and_a_gang_within_one_pool() -> None:
    executors = [
        {"id": "e1", "pool": "cpu", "nodes": ["n0"]},
        {"id": "e2", "pool": "other", "nodes": ["n1"]},
        {"id": "e3", "pool": "other", "nodes": ["n2"]},
    ]
    gang = {"armadaproject.io/gangId": "g", "armadaproject.io/gangCardinality": "2"}
    members = [{**job(f"g{i}", cpu="32", memory="256Gi"), "annotations": gang} for i in range(2)]
    # Pool "cpu" has room for one member, so the gang waits there...
    assert run(algo([{"round": 0, "submit": members}], executors[:1], 1)).rounds[0].scheduled == ()
    # ...and is placed by the cycle of pool "other", whose two clusters hold one member each.
    assert set(run(algo([{"round": 0, "submit": members}], executors, 3)).rounds[0].scheduled) == {"g0", "g1"}


def test_unknown_harnesses_and_misplaced_keys_are_refused() -> None:
    with pytest.raises(ScenarioError, match="unknown harness"):
        run(doc("magic", []))
    with pytest.raises(ScenarioError, match="scheduling_algo harness only"):
        run(doc("queue_scheduler_single_round", [], nodes=[], executors=[]))
    with pytest.raises(ScenarioError, match="neither a number of seconds nor a duration"):
        run(algo([], [{"id": "e", "nodes": ["n0"], "last_update": "yesterday"}], 1))
