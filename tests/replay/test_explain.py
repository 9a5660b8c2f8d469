"""explain and the scheduler reports over a log the real fold, index and cycle wrote (tests.kit.loop)."""

from __future__ import annotations

import pytest

from streams.replay.explain import (
    FAIR_SHARE,
    URGENCY,
    NotFound,
    choose_cycle,
    job_report,
    queue_report,
    replayed_outcomes,
    scheduling_report,
)
from streams.replay.history import read_history
from streams.scheduler.algorithm import reasons
from streams.scheduler.algorithm.model import PriorityClass
from streams.scheduler.config import CycleConfig
from tests.replay.kit import LoggedLoop, feed_records, own_configuration, replayed, small, with_class


def fair_share_story(config: CycleConfig | None = None) -> LoggedLoop:
    """Queue a fills a 4-cpu node; w1 can never fit; b1 arrives and takes half the node back."""
    loop = LoggedLoop(config=config or CycleConfig())
    for i in range(4):
        loop.submit(f"a{i}", "a", cpu="1", at=1_000 + i)
    loop.submit("w1", "a", cpu="8", at=1_010)
    small(loop, 1_500)
    loop.cycle(2_000)
    small(loop, 2_500)
    loop.submit("b1", "b", cpu="2", at=2_600)
    loop.cycle(3_000)
    small(loop, 3_500)
    loop.cycle(4_000)
    return loop


def test_a_job_that_never_fits_waits_with_the_reason_and_its_queues_shares_each_cycle() -> None:
    loop = fair_share_story()
    report = job_report(read_history(loop.log, ["w1"]), "w1")
    assert report["state"] == "queued" and report["queue"] == "a"
    assert [e["kind"] for e in report["events"]] == ["JobSubmitted"]
    (span,) = report["waiting"][:1]
    assert span["reason"] == reasons.JOB_DOES_NOT_FIT and span["pool"] == "default"
    # cycle 1: queue a alone (fair share 1) and took the whole node
    assert span["shares"] == {"fair_share": 1.0, "adjusted_fair_share": 1.0, "share_before": 0.0, "share": 1.0}
    # cycle 2: b arrived: a's fair share is half, a's share was 1 at the start and half after
    second = report["waiting"][1]
    assert second["shares"]["fair_share"] == 0.5 and second["shares"]["share_before"] == 1.0 and second["shares"]["share"] == 0.5
    assert report["placements"] == [] and report["preemptions"] == [] and report["cycles_hidden"] == 0


def test_placement_names_node_pool_shares_and_the_jobs_it_displaced() -> None:
    loop = fair_share_story()
    report = job_report(read_history(loop.log, ["b1"]), "b1")
    (placed,) = report["placements"]
    assert (placed["executor"], placed["node"], placed["pool"]) == ("ex1", "n0", "default")
    assert sorted(placed["displaced"]) == ["a2", "a3"]
    assert placed["shares"]["fair_share"] == 0.5 and placed["shares"]["share"] == 0.5
    assert [e["kind"] for e in report["events"]] == ["JobSubmitted", "JobLeased"]


def test_fair_share_preemption_says_by_whom_and_the_queues_share_against_its_fair_share() -> None:
    loop = fair_share_story()
    report = job_report(read_history(loop.log, ["a3"]), "a3")
    assert report["state"] == "preempted"
    (preemption,) = report["preemptions"]
    assert preemption["kind"] == FAIR_SHARE and preemption["reason"] == reasons.FAIR_SHARE_PREEMPTED
    assert preemption["by"] == ["b1"] and preemption["node"] == "n0"
    assert preemption["shares"]["share_before"] == 1.0 and preemption["shares"]["fair_share"] == 0.5
    assert [e["kind"] for e in report["events"]][-1] == "JobPreempted"


def test_urgency_preemption_is_told_apart() -> None:
    loop = with_class(PriorityClass("urgent", 2000, preemptible=False))
    loop.cycle(2_000, "a")
    loop.submit("u1", "a", cpu="1", at=2_100, pc="urgent")
    small(loop, 2_500)
    loop.cycle(3_000, "a")
    history = read_history(loop.log, ["a3", "u1"])
    (preemption,) = job_report(history, "a3")["preemptions"]
    assert preemption["kind"] == URGENCY and preemption["by"] == ["u1"]
    assert job_report(history, "u1")["placements"][0]["displaced"] == ["a3"]


def test_a_job_the_cap_hides_is_recomputed_by_replaying_the_feed() -> None:
    loop = fair_share_story(CycleConfig(max_unschedulable_recorded=0))
    history = read_history(loop.log, ["w1"])
    assert all(c.omitted >= 1 for c in history.cycles)
    hidden = job_report(history, "w1")
    assert hidden["cycles_hidden"] == len(history.cycles) == 2  # the third cycle decided nothing: no record
    assert "replay" in hidden["waiting"][0]["reason"]

    recomputed = replayed(loop, "w1")
    assert {c.cycle_id for c in history.cycles} < set(recomputed) and len(recomputed) == 3
    report = job_report(history, "w1", recomputed)
    assert report["cycles_hidden"] == 0
    assert {span["reason"] for span in report["waiting"]} == {reasons.JOB_DOES_NOT_FIT}
    assert report["waiting"][0]["sources"] == ["replayed"]
    # the replay agrees with what the records hold where they name the job, and adds the cycle without a record
    named = job_report(read_history(fair_share_story().log, ["w1"]), "w1")
    assert [(s["reason"], s["shares"]) for s in named["waiting"]] == [(s["reason"], s["shares"]) for s in report["waiting"]][:2]
    assert report["waiting"][-1]["to"] == 4_000


def test_a_cycle_that_decided_nothing_left_no_record_and_the_replay_tells_it() -> None:
    loop = fair_share_story()
    loop.cycle(5_000)  # nothing changes: no record
    history = read_history(loop.log, ["w1"])
    assert [c.time for c in history.cycles] == [2_000, 3_000]
    recomputed = replayed(loop, "w1")
    report = job_report(history, "w1", recomputed)
    assert report["waiting"][-1]["to"] == 5_000
    assert sum(span["cycles"] for span in report["waiting"]) == 4


def test_scheduling_and_queue_reports_answer_any_cycle() -> None:
    loop = fair_share_story()
    history = read_history(loop.log)
    first, second = history.cycles[0], history.cycles[1]
    assert choose_cycle(history).cycle_id == history.cycles[-1].cycle_id
    assert choose_cycle(history, at_ms=2_500).cycle_id == first.cycle_id
    assert choose_cycle(history, cycle_id=second.cycle_id) is second
    report = scheduling_report(second)
    assert (report["scheduled"], report["preempted"]) == (1, 2)
    assert report["preemption_reasons"] == {reasons.FAIR_SHARE_PREEMPTED: 2}
    (pool,) = report["pools"]
    assert pool["capacity"]["cpu"] == 4000 and pool["nodes"] == 1
    assert {row["queue"]: row["preempted"] for row in pool["queues"]} == {"a": 2, "b": 0}

    queue_a = queue_report(history, first, "a")
    assert queue_a["active"] and queue_a["pools"][0]["scheduled"] == 4 and queue_a["pools"][0]["share"] == 1.0
    queue_b = queue_report(history, first, "b")
    assert not queue_b["active"] and queue_b["last_active_cycle"] is None
    with pytest.raises(NotFound, match="queue nobody"):
        queue_report(history, first, "nobody")
    with pytest.raises(NotFound, match="no cycle x"):
        choose_cycle(history, cycle_id="x")
    with pytest.raises(NotFound, match="job nope is not in the log"):
        job_report(read_history(loop.log, ["nope"]), "nope")


def test_the_replays_progress_counts_the_feed_records_of_every_generation_so_far() -> None:
    loop = fair_share_story(CycleConfig(max_unschedulable_recorded=0))
    records = feed_records(loop)
    told: list[tuple[int, int]] = []
    replayed_outcomes([("first", records), ("second", records)], own_configuration(loop), "w1", progress=lambda *p: told.append(p))
    cycles = [c for c, _ in told]
    read = [r for _, r in told]
    assert cycles == list(range(1, len(told) + 1)) and len(told) % 2 == 0
    half = len(told) // 2
    assert read[half:] == [r + read[half - 1] + 1 for r in read[:half]]  # the second generation counts on from the first
