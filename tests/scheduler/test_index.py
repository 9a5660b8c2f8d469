"""The scheduling agent's index: feed records, decisions ahead of the log, and its table."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from streams.scheduler import feed
from streams.scheduler.algorithm.model import LimiterState, TokenBucket
from streams.scheduler.config import CycleConfig
from streams.scheduler.convert import scheduling_job
from streams.scheduler.cycle import run_cycle
from streams.scheduler.feed import Changes, Heartbeat, JobSetAction
from streams.scheduler.index import (
    END,
    LEASE,
    LIMITERS_KEY,
    OFFSET_KEY,
    REQUEUE,
    Entry,
    SchedulerIndex,
    acceptance_key,
    executor_key,
    heartbeat_key,
    job_key,
)
from tests.kit.scheduler import delta, executor, holding, running, tick
from tests.scheduler import test_feed


def leased(d, run_id="r1", executor_name="ex1", node="n0", at=2_000):
    return replace(d, state="leased", run_state="leased", runs=d.runs + 1, run_id=run_id, executor=executor_name, node=node, leased_at=at)


def test_a_delta_adds_the_job_and_a_terminal_delta_removes_it() -> None:
    index = SchedulerIndex()
    assert index.apply(delta("j1")) == [job_key("j1")]
    assert index.jobs["j1"].delta == delta("j1")
    assert index.apply(replace(delta("j1"), state="succeeded")) == [job_key("j1")]
    assert "j1" not in index.jobs
    # a terminal delta of a job the index does not hold changes nothing
    assert index.apply(replace(delta("j2"), state="cancelled")) == []
    assert index.jobs == {}


def test_a_repeated_delta_is_harmless() -> None:
    index = SchedulerIndex()
    index.apply(delta("j1"))
    index.apply(delta("j1"))
    assert list(index.jobs) == ["j1"] and index.jobs["j1"].delta == delta("j1")


def test_stale_deltas_after_a_lease_are_skipped_until_the_confirming_one() -> None:
    index = SchedulerIndex()
    queued = delta("j1")
    index.apply(queued)
    decided = leased(queued)
    assert index.decide("j1", LEASE, decided) == job_key("j1")
    assert index.jobs["j1"].expect == LEASE and index.jobs["j1"].expect_runs == 1

    # the queued delta that was on its way (say, a reprioritisation) is older than the lease
    assert index.apply(replace(queued, priority=5.0)) == []
    assert index.jobs["j1"].delta == decided and index.jobs["j1"].expect == LEASE

    # the fold's lease says what the decision recorded: its run is now the fold's, stale deltas still
    # skipped; the entry is not written again (its acceptance goes in the batch's acceptance record)
    assert index.jobs["j1"].fold_run is None
    confirming = replace(decided, state="leased")
    assert index.apply(confirming) == []
    assert index.jobs["j1"].delta == decided and index.jobs["j1"].fold_run == "r1"
    assert index.apply(queued) == [] and index.apply(confirming) == []
    # later deltas apply as they come
    assert index.apply(replace(confirming, priority=7.0)) == [job_key("j1")]
    assert index.jobs["j1"].delta.priority == 7.0 and index.jobs["j1"].expect is None


def test_a_run_counts_as_sent_from_when_the_fold_accepts_it() -> None:
    """The fold sends the lease command when it accepts the lease, which under load is long
    after the cycle: the executor is held to list the run only from then."""
    index = SchedulerIndex()
    index.apply(executor("ex1", 1_000))
    queued = delta("j1")
    index.apply(queued)
    index.decide("j1", LEASE, leased(queued, executor_name="ex1", at=2_000))
    index.apply(Heartbeat("ex1", 90_000))
    index.apply(leased(queued, executor_name="ex1", at=2_000))
    assert (index.jobs["j1"].fold_run, index.jobs["j1"].fold_run_at) == ("r1", 90_000)
    # a running job the index first hears of from the fold: its executor's last word counts
    index.apply(running(delta("j2"), "r2", "ex1", "n0", 500))
    assert (index.jobs["j2"].fold_run, index.jobs["j2"].fold_run_at) == ("r2", 90_000)
    index.apply(running(delta("j3"), "r3", "ex9", "n0", 700))  # an executor not heard from: the lease time
    assert index.jobs["j3"].fold_run_at == 700


def test_a_confirmation_wakes_a_quiet_job_only_and_a_delta_that_changes_nothing_is_not_noted() -> None:
    """The fold's confirmation of a lease changes only the run the fold accepted: a pool's kept jobs do not
    read it (`pool_jobs`), the lifecycle does (`Cycle.lost`), so a job found quiet is walked again."""
    index = SchedulerIndex()
    index.apply(executor("ex1", 1_000))
    queued = delta("j1")
    index.apply(queued)
    run_cycle(index, tick(1_000), 1, CycleConfig())
    decided = index.jobs["j1"].delta
    assert index.jobs["j1"].expect == LEASE and decided.run_active and index.pool_jobs  # the pool's jobs are kept
    live = {"ex1": index.executors["ex1"]}
    index.take_changed()
    index.rest("j1", live["ex1"], decided.run_id or "")
    assert index.walk(live) == []
    assert index.apply(decided) == [] and index.jobs["j1"].fold_run == decided.run_id
    assert index.take_changed() == set() and index.walk(live) == ["j1"]
    index.rest("j1", live["ex1"], decided.run_id or "")
    # a delta older than the decision, and the confirmation again: nothing changed, nothing noted
    assert index.apply(queued) == [] and index.apply(decided) == []
    assert index.take_changed() == set() and index.walk(live) == []
    # a change of the job is noted for both
    assert index.apply(replace(decided, priority=3.0)) == [job_key("j1")]
    assert index.take_changed() == {"j1"} and index.walk(live) == ["j1"]


def test_a_confirmation_that_differs_from_the_decision_replaces_it() -> None:
    index = SchedulerIndex()
    queued = delta("j1")
    index.apply(queued)
    index.decide("j1", LEASE, leased(queued))
    confirming = leased(queued, at=2_001)  # the fold stamped the lease a millisecond later
    assert index.apply(confirming) == [job_key("j1")]
    assert index.jobs["j1"].delta == confirming and index.jobs["j1"].expect is None


def test_changes_apply_in_order_and_name_every_key_they_changed() -> None:
    index = SchedulerIndex()
    index.apply(delta("j0"))
    changes = Changes((delta("j1"), delta("j2"), JobSetAction("a", "s", "cancel", reason="r"), replace(delta("j1"), state="failed")))
    assert index.apply(changes) == [job_key(j) for j in ("j1", "j2", "j0", "j1", "j2", "j1")]
    assert sorted(index.jobs) == ["j0", "j2"]
    assert all(entry.delta.cancel_requested for entry in index.jobs.values())
    assert index.apply(Changes(())) == []


def test_stale_deltas_after_a_requeue_are_skipped_until_the_job_is_queued() -> None:
    index = SchedulerIndex()
    run = running(delta("j1"), "r1", "ex1", "n0", 2_000)
    index.apply(run)
    index.decide("j1", REQUEUE, replace(run, state="queued", run_state="lease_expired", returned_runs=1))

    # the fold's view of the run failing, before its requeue: still not queued
    failed = replace(run, run_state="lease_expired", returned_runs=1)
    assert index.apply(run) == [] and index.apply(failed) == []
    assert index.jobs["j1"].delta.state == "queued" and index.jobs["j1"].expect == REQUEUE

    requeued = replace(failed, state="queued")
    assert index.apply(requeued) == []  # what the decision recorded
    assert index.jobs["j1"].delta == requeued and index.apply(failed) == []
    assert index.apply(replace(requeued, priority=2.0)) == [job_key("j1")]
    assert index.jobs["j1"].expect is None


def test_a_requeue_is_also_confirmed_by_a_later_lease() -> None:
    index = SchedulerIndex()
    run = running(delta("j1"), "r1", "ex1", "n0", 2_000)
    index.apply(run)
    index.decide("j1", REQUEUE, replace(run, state="queued"))
    later = leased(replace(run, state="queued"), run_id="r2", node="n1")
    index.apply(later)
    assert index.jobs["j1"].expect is None and index.jobs["j1"].delta.run_id == "r2"


def test_an_ended_job_waits_for_its_terminal_delta() -> None:
    index = SchedulerIndex()
    run = running(delta("j1"), "r1", "ex1", "n0", 2_000)
    index.apply(run)
    index.decide("j1", END, run)
    assert index.apply(replace(run, priority=3.0)) == []
    assert index.jobs["j1"].expect == END
    index.apply(replace(run, state="cancelled", run_state="cancelled"))
    assert "j1" not in index.jobs


def test_a_stale_delta_still_brings_a_sticky_cancel_request() -> None:
    index = SchedulerIndex()
    queued = delta("j1")
    index.apply(queued)
    decided = leased(queued)
    index.decide("j1", LEASE, decided)

    assert index.apply(replace(queued, cancel_requested=True)) == [job_key("j1")]
    entry = index.jobs["j1"]
    assert entry.delta.cancel_requested and entry.expect == LEASE
    assert entry.delta.run_id == "r1" and entry.delta.state == "leased"  # nothing else taken from the stale delta
    assert entry.job.id == "j1"
    # the confirming delta, folded before the cancel request, does not drop it
    index.apply(decided)
    assert index.jobs["j1"].delta == replace(decided, cancel_requested=True)


def test_a_job_set_cancel_survives_later_deltas_of_the_job() -> None:
    """The fold does not mark each job of a cancelled job set: only the index knows, until the
    cycle cancels them. A delta that arrives between must not undo it."""
    index = SchedulerIndex()
    queued = delta("j1")
    index.apply(queued)
    index.decide("j1", LEASE, leased(queued))
    index.apply(JobSetAction("a", "s", "cancel"))
    index.apply(leased(queued))  # the lease confirmation, from the fold that knows nothing of the cancel
    assert index.jobs["j1"].delta.cancel_requested
    index.apply(replace(leased(queued), state="running", run_state="running"))
    assert index.jobs["j1"].delta.cancel_requested


def test_job_set_cancel_marks_only_that_job_set() -> None:
    index = SchedulerIndex()
    for d in (delta("j1"), delta("j2"), delta("j3", job_set="other"), delta("j4", queue="b")):
        index.apply(d)
    changed = index.apply(JobSetAction("a", "s", "cancel", reason="done"))
    assert sorted(changed) == [job_key("j1"), job_key("j2")]
    assert {j: e.delta.cancel_requested for j, e in index.jobs.items()} == {"j1": True, "j2": True, "j3": False, "j4": False}
    # again: nothing more to mark
    assert index.apply(JobSetAction("a", "s", "cancel")) == []


def test_job_set_reprioritise_sets_the_priority_and_an_announcement() -> None:
    index = SchedulerIndex()
    for d in (delta("j1"), delta("j2", job_set="other")):
        index.apply(d)
    assert index.apply(JobSetAction("a", "s", "reprioritise", new_priority=4.0)) == [job_key("j1")]
    assert index.jobs["j1"].delta.priority == 4.0 and index.jobs["j1"].announce_priority == 4.0
    assert index.jobs["j1"].job.priority == 4
    assert index.jobs["j2"].delta.priority == 0.0 and index.jobs["j2"].announce_priority is None
    assert index.apply(JobSetAction("a", "s", "reprioritise", new_priority=None)) == []


def test_the_fold_of_an_announced_reprioritisation_makes_the_announcement() -> None:
    """A refold of a restored log forwards a job-set action again, then the deltas of the JobReprioritised
    events the cycles emitted for it: the index must not announce them a second time."""
    index = SchedulerIndex()
    index.apply(delta("j1", priority=1.0))
    index.apply(JobSetAction("a", "s", "reprioritise", new_priority=4.0))
    # a delta the fold sent before it folded the announcement: still to announce
    assert index.apply(replace(delta("j1", priority=1.0), state="queued")) == [job_key("j1")]
    assert index.jobs["j1"].announce_priority == 4.0 and "j1" in index.busy
    # the fold of the announcement: the job's priority moves to the announced one
    assert index.apply(delta("j1", priority=4.0)) == [job_key("j1")]
    assert index.jobs["j1"].announce_priority is None and "j1" not in index.busy
    assert reloaded(index).jobs["j1"].announce_priority is None


def test_a_reprioritisation_to_the_priority_a_job_has_is_announced_whatever_deltas_come() -> None:
    index = SchedulerIndex()
    index.apply(delta("j1", priority=4.0))
    index.apply(JobSetAction("a", "s", "reprioritise", new_priority=4.0))
    index.apply(delta("j1", priority=4.0))
    assert index.jobs["j1"].announce_priority == 4.0
    # and the stored entry keeps what the rule needs
    again = reloaded(index)
    again.apply(delta("j1", priority=4.0))
    assert again.jobs["j1"].announce_priority == 4.0


def test_executor_reports_replace_each_other() -> None:
    index = SchedulerIndex()
    assert index.apply(executor("ex1", 1_000)) == [executor_key("ex1")]
    index.apply(executor("ex1", 2_000, runs={"r1": "j1"}))
    assert index.executors["ex1"].time == 2_000 and index.executors["ex1"].runs == {"r1": "j1"}


def test_a_heartbeat_keeps_an_executor_alive_without_replacing_its_state() -> None:
    index = SchedulerIndex()
    assert index.apply(Heartbeat("ex1", 500)) == []  # nodes not known yet: nothing to keep alive
    assert "ex1" not in index.heard
    state = executor("ex1", 1_000, runs={"r1": "j1"})
    index.apply(state)
    index.start_cycle()
    index.start_cycle()
    assert index.cycles_without_report("ex1") == 1
    assert index.apply(Heartbeat("ex1", 2_000)) == [heartbeat_key("ex1")]
    assert index.executors["ex1"] == state and index.heard["ex1"] == 2_000
    assert index.cycles_without_report("ex1") == 0
    index.apply(Heartbeat("ex1", 1_500))  # a repeat from before: liveness does not go back
    assert index.heard["ex1"] == 2_000


def test_an_executor_heard_by_heartbeat_only_keeps_its_leases() -> None:
    index = SchedulerIndex()
    index.apply(running(delta("j1"), "r1", "ex1", "n0", 500))
    index.apply(executor("ex1", 1_000, runs={"r1": "j1"}))
    config = CycleConfig(executor_timeout_ms=10_000, missed_cycles=0)
    for at in range(2_000, 30_000, 1_000):
        index.apply(Heartbeat("ex1", at))
        outcome = run_cycle(index, tick(at + 500), at, config)
        assert outcome.requeued == 0 and index.jobs["j1"].delta.run_active
    outcome = run_cycle(index, tick(45_000), 45_000, config)
    assert outcome.requeued == 1  # silent for longer than the timeout


# -- the table ---------------------------------------------------------------------------------


def snapshot(index: SchedulerIndex):
    jobs = {
        j: (e.delta, e.expect, e.expect_runs, e.announce_priority, e.cancel_reason, e.fold_run, e.fold_run_at)
        for j, e in index.jobs.items()
    }
    return jobs, dict(index.executors), dict(index.heard), index.limiters, index.cycles, dict(index.reported_in_cycle)


def reloaded(index: SchedulerIndex) -> SchedulerIndex:
    table = {}
    for key in index.keys():
        value = index.dump(key)
        assert value is not None
        table[key] = value
    other = SchedulerIndex()
    other.apply(delta("leftover"))  # load replaces whatever was there
    other.load(sorted(table.items()))
    return other


def test_dump_and_load_rebuild_an_equal_index() -> None:
    index = SchedulerIndex()
    q = delta(
        "j1",
        gang={"armadaproject.io/gangId": "g"},
        avoid_nodes=("ex2/n1",),
        affinity=(({"key": "zone", "operator": "In", "values": ["a"]},),),
        tolerations=({"key": "gpu", "operator": "Exists"},),
        node_selector={"disk": "ssd"},
        returned_runs=1,
    )
    index.apply(q)
    index.decide("j1", LEASE, leased(q))
    index.apply(running(delta("j2", queue="b", priority=2.0), "r9", "ex2", "n1", 1_500))
    index.apply(delta("j3"))
    index.decide("j3", END, index.jobs["j3"].delta)
    index.apply(delta("j4", job_set="t"))
    index.apply(JobSetAction("a", "t", "reprioritise", new_priority=3.5))
    index.apply(delta("j5", job_set="u"))
    index.apply(JobSetAction("a", "u", "cancel", reason="done with u"))
    assert index.jobs["j5"].cancel_reason == "done with u"
    index.apply(executor("ex1", 1_000))
    index.start_cycle()
    index.start_cycle()
    index.apply(executor("ex2", 1_200, runs={"r9": "j2", "old": "j0"}, active=("r9",)))
    assert (index.cycles_without_report("ex1"), index.cycles_without_report("ex2")) == (1, 0)
    index.apply(Heartbeat("ex1", 1_700))
    index.start_cycle()
    index.apply(executor("ex2", 1_900))
    index.apply(Heartbeat("ex2", 1_800))  # older than the state: the state's time stays
    assert index.heard == {"ex1": 1_700, "ex2": 1_900}
    index.set_limiters(LimiterState(TokenBucket(3.5, 10.25), {"a": TokenBucket(1.0, 2.0)}, None))

    assert snapshot(reloaded(index)) == snapshot(index)


def written_in_full(entry: Entry) -> bytes:
    """An entry's table value as `SchedulerIndex.dump` writes any entry: its delta's row and its decisions, as JSON."""
    decisions = [entry.expect, entry.expect_runs, entry.announce_priority, entry.cancel_reason, entry.fold_run, entry.fold_run_at]
    return feed.compact_json([feed.delta_row(entry.delta), *decisions, entry.announce_from]).encode()


def test_a_queued_entry_with_no_decision_is_written_byte_for_byte_as_any_entry_is() -> None:
    index = SchedulerIndex()
    first = delta("j1")
    queued = [
        first,
        replace(first, job_id="j2", submitted=1_234),  # the same part as j1 (the same values)
        delta('j\u00e9"3', queue="qu\u00eaue", job_set="set \u2603", priority=2.5, gang={"armadaproject.io/gangId": "g\u00e9"}),
        delta("j4", node_selector={"disk": "ssd"}, avoid_nodes=("ex2/n1",), returned_runs=1, cancel_requested=True),
        delta("j5", tolerations=({"key": "gpu", "operator": "Exists"},), affinity=(({"key": "z", "operator": "In", "values": ["a"]},),)),
    ]
    for d in queued:
        index.apply(d)
        entry = index.jobs[d.job_id]
        assert entry.part is not None and entry._decisions is None
        assert index.dump(job_key(d.job_id)) == written_in_full(entry)
    assert index.jobs["j1"].part is index.jobs["j2"].part
    rebuilt = SchedulerIndex()
    rebuilt.load((key, value) for key in index.keys() if (value := index.dump(key)) is not None)
    assert {job_id: entry.delta for job_id, entry in rebuilt.jobs.items()} == {d.job_id: d for d in queued}
    index.apply(JobSetAction(queued[0].queue, queued[0].job_set_id, "cancel", reason="stop"))  # a decision: written in full
    assert index.jobs["j1"].cancel_reason == "stop" and index.dump(job_key("j1")) == written_in_full(index.jobs["j1"])


def test_an_entry_written_before_rows_still_loads() -> None:
    """Index tables written by earlier releases hold each entry as a dict of fields."""
    q = delta("j1", tolerations=({"key": "gpu", "operator": "Exists"},), avoid_nodes=("ex2/n1",))
    fields = {name: getattr(q, name) for name in type(q).__slots__}
    legacy = {"d": fields | {"k": "job"}, "x": LEASE, "n": 1, "p": None, "c": None, "r": "j1-1", "a": 5}
    index = SchedulerIndex()
    index.load([(job_key("j1"), json.dumps(legacy).encode())])
    entry = index.jobs["j1"]
    assert (entry.delta, entry.expect, entry.expect_runs, entry.fold_run, entry.fold_run_at) == (q, LEASE, 1, "j1-1", 5)
    assert json.loads(index.dump(job_key("j1")) or b"")[0] == json.loads(json.dumps(feed.delta_row(q)))  # written back as a row


def test_the_table_of_an_index_after_a_cycle_reloads_equal_and_plans_the_same() -> None:
    index = SchedulerIndex()
    for i in range(6):
        index.apply(delta(f"j{i}", queue="ab"[i % 2], cpu=12, submitted=100 + i))
    index.apply(executor("ex1", 1_000))
    outcome = run_cycle(index, tick(2_000), 7, CycleConfig())
    assert outcome.leased == 4  # two 12-cpu jobs per 32-cpu node
    changed = set(outcome.changed)
    assert changed <= set(index.keys())
    other = reloaded(index)
    assert snapshot(other) == snapshot(index)

    index.apply(holding(index, "ex1", 2_500))
    other.apply(holding(other, "ex1", 2_500))
    assert run_cycle(index, tick(3_000), 8, CycleConfig()) == run_cycle(other, tick(3_000), 8, CycleConfig())


def test_dump_of_a_removed_key_is_none() -> None:
    index = SchedulerIndex()
    index.apply(delta("j1"))
    index.apply(replace(delta("j1"), state="failed"))
    assert index.dump(job_key("j1")) is None
    assert index.dump(executor_key("nobody")) is None
    assert index.dump(heartbeat_key("nobody")) is None
    assert index.dump(LIMITERS_KEY) is not None


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(["j1", "j2", "j3"]), st.sampled_from(["delta", "lease", "requeue", "end", "cancel", "terminal"])),
        max_size=12,
    )
)
def test_any_history_reloads_equal(ops) -> None:
    index = SchedulerIndex()
    for job_id, op in ops:
        entry = index.jobs.get(job_id)
        d = entry.delta if entry else delta(job_id)
        if op == "delta" or entry is None:
            index.apply(d)
        elif op == "lease":
            index.decide(job_id, LEASE, leased(d, run_id=f"r{d.runs}"))
        elif op == "requeue":
            index.decide(job_id, REQUEUE, replace(d, state="queued"))
        elif op == "end":
            index.decide(job_id, END, d)
        elif op == "cancel":
            index.apply(JobSetAction("a", "s", "cancel"))
        else:
            index.apply(replace(d, state="succeeded"))
    assert snapshot(reloaded(index)) == snapshot(index)


# -- the take-over rule: a lease is written once, its confirmation goes in the batch's acceptance record --


class Table:
    """The `scheduler-index` table as the agent writes it: each batch's keys (`SchedulerIndex.writes`),
    then its acceptance keys and its offset (`close_batch`), and the job entries it was given."""

    def __init__(self) -> None:
        self.rows: dict[str, bytes] = {}
        self.job_writes = 0

    def write(self, index: SchedulerIndex, keys: list[str]) -> None:
        for key, value in index.writes(keys):
            self.job_writes += key.startswith("j:")
            if value is None:
                self.rows.pop(key, None)
            else:
                self.rows[key] = value

    def end_batch(self, index: SchedulerIndex, offset: int) -> None:
        index.offset = offset
        self.write(index, [*index.close_batch(), OFFSET_KEY])

    def rebuilt(self) -> SchedulerIndex:
        other = SchedulerIndex()
        other.load(sorted(self.rows.items()))
        return other


def taken_over(index: SchedulerIndex):
    """Everything of the index a cycle depends on, with the bookkeeping of the acceptance records."""
    jobs = {j: (*snapshot_entry(e), e.accepted_in) for j, e in index.jobs.items()}
    return jobs, {at: sorted(held) for at, held in index.acceptances.items()}, snapshot(index)[1:], index.busy


def snapshot_entry(e):
    return e.delta, e.expect, e.expect_runs, e.announce_priority, e.cancel_reason, e.fold_run, e.fold_run_at


def test_a_lease_writes_its_entry_once_and_a_worker_taking_over_has_the_fold_s_acceptance() -> None:
    index, table = SchedulerIndex(), Table()
    table.write(index, [k for i in range(4) for k in index.apply(delta(f"j{i}", cpu=12, submitted=100 + i))])
    table.write(index, index.apply(executor("ex1", 1_000)))
    table.end_batch(index, 4)
    table.job_writes = 0

    outcome = run_cycle(index, tick(2_000), 5, CycleConfig())
    assert outcome.leased == 4
    table.write(index, outcome.changed)
    table.end_batch(index, 5)
    assert table.job_writes == 4  # one per lease

    # the fold's confirmations, after a later report: nothing of the entries to write, one acceptance record
    table.write(index, index.apply(Heartbeat("ex1", 9_000)))
    confirmations = Changes(tuple(index.jobs[f"j{i}"].delta for i in range(4)))
    assert index.apply(confirmations) == []
    table.end_batch(index, 9)
    assert table.job_writes == 4 and acceptance_key(9) in table.rows
    assert {j: (e.fold_run, e.fold_run_at) for j, e in index.jobs.items()} == {f"j{i}": (f"j{i}-1", 9_000) for i in range(4)}
    assert taken_over(table.rebuilt()) == taken_over(index)
    # the stored entries alone do not say it: the rule applies the record
    assert all(json.loads(table.rows[job_key(f"j{i}")])[5] is None for i in range(4))

    # one job ends, another is written for a change: the record keeps speaking for the other two
    table.write(index, index.apply(replace(index.jobs["j0"].delta, state="succeeded")))
    table.write(index, index.apply(replace(index.jobs["j1"].delta, priority=3.0)))
    table.end_batch(index, 12)
    assert index.acceptances == {9: {"j2", "j3"}}
    assert taken_over(table.rebuilt()) == taken_over(index)
    # once none relies on it, the record is deleted
    for job_id in ("j2", "j3"):
        table.write(index, index.apply(replace(index.jobs[job_id].delta, state="succeeded")))
    table.end_batch(index, 14)
    assert acceptance_key(9) not in table.rows and index.acceptances == {}
    assert taken_over(table.rebuilt()) == taken_over(index)


def test_a_confirmation_in_the_batch_of_a_later_decision_is_written_with_it() -> None:
    index, table = SchedulerIndex(), Table()
    table.write(index, index.apply(running(delta("j1"), "r1", "ex1", "n0", 500)))
    table.write(index, index.apply(executor("ex1", 1_000)))
    index.decide("j1", LEASE, leased(index.jobs["j1"].delta, run_id="r2"))
    table.end_batch(index, 3)
    assert index.apply(index.jobs["j1"].delta) == []  # confirmed
    table.write(index, [index.decide("j1", END, index.jobs["j1"].delta)])  # and ended by a cycle of the same batch
    table.end_batch(index, 5)
    assert not any(key.startswith("a:") for key in table.rows)
    assert json.loads(table.rows[job_key("j1")])[5] == "r2"
    assert taken_over(table.rebuilt()) == taken_over(index)


@settings(max_examples=80, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["j1", "j2", "j3"]),
            st.sampled_from(["delta", "lease", "confirm", "requeue", "end", "cancel", "terminal", "heartbeat", "batch"]),
        ),
        max_size=30,
    )
)
def test_a_worker_rebuilding_from_the_table_at_any_batch_end_has_the_same_index(ops) -> None:
    index, table = SchedulerIndex(), Table()
    table.write(index, index.apply(executor("ex1", 1_000)))
    decided: dict[str, feed.JobDelta] = {}
    clock = 1_000
    offset = 0
    for job_id, op in ops:
        offset += 1
        entry = index.jobs.get(job_id)
        d = entry.delta if entry else delta(job_id)
        if op == "batch":
            table.end_batch(index, offset)
            assert taken_over(table.rebuilt()) == taken_over(index)
        elif op == "delta" or entry is None:
            table.write(index, index.apply(d))
        elif op == "lease":
            decided[job_id] = leased(d, run_id=f"{job_id}-{d.runs + 1}")
            table.write(index, [index.decide(job_id, LEASE, decided[job_id])])
        elif op == "confirm" and job_id in decided:
            table.write(index, index.apply(decided.pop(job_id)))
        elif op == "requeue":
            table.write(index, [index.decide(job_id, REQUEUE, replace(d, state="queued"))])
        elif op == "end":
            table.write(index, [index.decide(job_id, END, d)])
        elif op == "cancel":
            table.write(index, index.apply(JobSetAction("a", "s", "cancel")))
        elif op == "heartbeat":
            clock += 1_000
            table.write(index, index.apply(Heartbeat("ex1", clock)))
        elif op == "terminal":
            table.write(index, index.apply(replace(d, state="succeeded")))
    table.end_batch(index, offset + 1)
    assert taken_over(table.rebuilt()) == taken_over(index)


# -- a job that never ran is held in part (`Entry`, `feed.part_of`) --


@given(test_feed.job_deltas)
def test_an_entry_answers_for_its_delta_whichever_way_it_holds_it(d: feed.JobDelta) -> None:
    entry = Entry(d)
    assert entry.delta == d and entry.has_run == (d.run_id is not None or d.run_state is not None)
    lease: dict[str, Any] = {
        "state": "leased",
        "runs": d.runs + 1,
        "run_id": "r",
        "executor": "e",
        "node": "n",
        "run_state": "leased",
        "leased_at": 9,
    }
    made = entry.leased(d.runs + 1, "r", "e", "n", 9)
    assert made == replace(d, **lease) and type(made) is feed.JobDelta and entry.delta == d  # the entry itself unchanged
    assert all(entry.value(name) == getattr(d, name) for name in feed.PART_FIELDS)
    assert entry.busy == (d.cancel_requested or d.run_active or d.run_returned)
    assert entry.job == scheduling_job(d) and Entry(d).job == entry.job  # the second made from a remembered part
    assert entry.job_values() == (d.job_id, d.queue, d.priority_class, d.requests, d.submitted, d.priority) + (
        d.node_selector,
        d.tolerations,
        d.affinity,
        d.avoid_nodes,
        d.gang,
    )
    entry.announce_priority = 1.0
    assert entry.busy


@given(test_feed.job_deltas, st.sampled_from((None, "lease", "requeue", "end")), st.integers(0, 3), st.sampled_from((0, 5, 0.0)))
def test_an_entry_holds_decision_fields_only_once_one_is_set_and_reads_them_back_as_set(
    d: feed.JobDelta, expect: str | None, runs: int, fold_run_at: int
) -> None:
    """A queued job's entry holds no `_Decisions` (the memory a million of them save); any field set
    to other than its default gives it one, and every field reads back what was given."""
    plain = Entry(d)
    assert plain._decisions is None
    assert (plain.expect, plain.expect_runs, plain.fold_run, plain.fold_run_at, plain.accepted_in) == (None, 0, None, 0, None)
    given_ = Entry(d, expect, runs, None, None, None, fold_run_at)
    # A default is the default object itself: a fold_run_at of 0.0 is kept, as a float.
    assert (given_._decisions is None) == (expect is None and runs == 0 and type(fold_run_at) is int and fold_run_at == 0)
    assert (given_.expect, given_.expect_runs, given_.fold_run_at) == (expect, runs, fold_run_at)
    assert type(given_.fold_run_at) is type(fold_run_at)
    plain.fold_run, plain.accepted_in = "r1", 3
    assert (plain.fold_run, plain.accepted_in, plain.expect) == ("r1", 3, None) and plain._decisions is not None


def test_queued_jobs_read_from_rows_share_one_part_and_their_entries_write_the_rows_they_came_from() -> None:
    index = SchedulerIndex()
    rows = [json.loads(feed.compact_json(feed.job_row(job))) for job in ({**_queued("j1"), "submitted": 7}, _queued("j2"))]
    for row in rows:
        index.apply(feed.delta_from_row(row))
    first, second = index.jobs["j1"], index.jobs["j2"]
    assert not first.has_run and first._view is second._view
    assert [json.loads(index.dump(job_key(job_id)) or b"")[0] for job_id in ("j1", "j2")] == rows
    index.decide("j1", LEASE, leased(first.delta))
    assert first.has_run and first.delta.run_id == "r1" and first.delta.submitted == 7
    assert snapshot(reloaded(index)) == snapshot(index)


def _queued(job_id: str) -> dict:
    return {
        "job_id": job_id,
        "queue": "a",
        "job_set_id": "s",
        "state": "queued",
        "priority_class": "armada-default",
        "priority": 0.0,
        "submitted": 1_000,
        "runs": [],
        "cancel_requested": False,
        "preempt_requested": False,
        "spec": {"pod_spec": {"containers": [{"resources": {"requests": {"cpu": "1"}}}]}},
    }


def test_the_jobs_of_one_submit_request_share_their_submission_time() -> None:
    index = SchedulerIndex()
    for job_id in ("j1", "j2"):
        row = json.loads(feed.compact_json(feed.job_row({**_queued(job_id), "submitted": 1_700_000_000_123})))
        index.apply(feed.delta_from_row(row))
    first, second = index.jobs["j1"], index.jobs["j2"]
    assert first.delta.submitted is second.delta.submitted and first.job.submit_time is second.job.submit_time
    assert first.job.submit_time == 1_700_000_000.123
