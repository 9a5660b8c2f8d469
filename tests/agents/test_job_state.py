"""The job-state agent's fold over one event sequence (`apply_sequence`) and over a batch of messages
(`fold_batch`), with the jobs store over a plain dict.

Stored values are real job_state Avro bytes, so what is folded, stored and read back is exactly
what the Faust table and the job-states topic hold.
"""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

import pytest
from faust.types import Message

from schemas.codec import Encoded, Partial, decode, encode
from streams.agents import job_state
from streams.agents.job_state import FoldedPart, encoded_command, fold_batch
from streams.scheduler import feed
from streams.scheduler.fold import MAX_CHANGES_PER_RECORD, Folded, apply_sequence, feed_records
from streams.scheduler.fold import deltas as feed_deltas
from streams.tables.jobs import SPEC_TYPE, JobStore
from tests.kit.jobs import ENVELOPE, Events
from tests.kit.stores import dict_jobs, settle


def fold(jobs: JobStore, sequence: dict[str, Any], rng: random.Random) -> Folded:
    """One sequence folded and its job states written, as the agent's batch does."""
    folded = apply_sequence(jobs, sequence, rng)
    settle(jobs)
    return folded


def sequence(*events: tuple[str, dict[str, Any]]) -> dict[str, Any]:
    return {**ENVELOPE, "events": [{**event, "payload": (f"flotilla.{kind}", event["payload"])} for kind, event in events]}


def deltas(folded: Folded | FoldedPart) -> list[feed.JobDelta]:
    """What a fold of job events forwards: job deltas only."""
    forwarded = feed_deltas(folded.changes)
    assert all(isinstance(change, feed.JobDelta) for change in forwarded), forwarded
    return [change for change in forwarded if isinstance(change, feed.JobDelta)]


def message(partition: int, offset: int, value: bytes) -> Message:
    """An `events` message as Faust delivers it to the agent."""
    return Message("flotilla.events", partition, offset, 0.0, 0, None, b"team-a/set-1", value, None)


def test_events_are_folded_and_counted_by_outcome() -> None:
    jobs, ev = dict_jobs(), Events("job-1")
    submitted, leased = ev.submitted(), ev.leased("run-1")
    stray = Events("never-submitted").leased("run-9")
    refused = ev("JobRunRunning", run_id="run-404", node="node-1")  # a run the job never had
    cycle = (
        "SchedulingCycle",
        {
            "event_id": "c1",
            "created": 5,
            "job_id": None,
            "payload": {"cycle_id": "c1", "cycle_time": 5, "seed": 1, "feed_offsets": {}, "decisions": []},
        },
    )

    folded = fold(jobs, sequence(submitted, leased, submitted, stray, refused, cycle), random.Random(1))

    assert folded.outcomes == {"applied": 2, "unchanged": 1, "unknown_job": 1, "refused": 1}
    stored = decode("job_state", jobs.table["job-1"])
    assert stored["state"] == "leased" and [r["run_id"] for r in stored["runs"]] == ["run-1"]
    assert set(jobs.table) == {"job-1"}


def test_replaying_a_sequence_changes_nothing() -> None:
    jobs, ev = dict_jobs(), Events("job-2")
    events = sequence(ev.submitted(), ev.leased("run-1"), ev("JobRunRunning", run_id="run-1", node="node-1"))
    fold(jobs, events, random.Random(1))
    first = dict(jobs.table)

    again = fold(jobs, events, random.Random(1))
    assert again.outcomes == {"unchanged": 3}
    assert again.feed == [] and again.commands == []
    assert jobs.table == first


def test_a_lease_and_a_cancel_forward_deltas_and_executor_commands() -> None:
    jobs, ev = dict_jobs(), Events("job-3")
    first = fold(jobs, sequence(ev.submitted(), ev.leased("run-1", node="node-2")), random.Random(7))

    assert [(d.state, d.runs, d.run_id) for d in deltas(first)] == [("queued", 0, None), ("leased", 1, "run-1")]
    [lease] = first.commands
    assert (lease["kind"], lease["executor"], lease["node"], lease["run_id"], lease["job_id"]) == (
        "lease",
        "cluster-1",
        "node-2",
        "run-1",
        "job-3",
    )
    assert lease["spec"]["pod_spec"]["containers"] and lease["created"] == 2_000
    encode("executor_command", lease)

    progress = apply_sequence(
        jobs,
        sequence(ev("JobRunPending", run_id="run-1", node="node-2"), ev("JobRunRunning", run_id="run-1", node="node-2")),
        random.Random(8),
    )
    assert progress.outcomes == {"applied": 2}
    assert progress.feed == [] and progress.commands == []

    cancel = fold(jobs, sequence(ev("JobCancelled", run_id="run-1", reason="by user")), random.Random(9))
    [terminal] = deltas(cancel)
    assert terminal.state == "cancelled" and terminal.terminal
    [stop] = cancel.commands
    assert (stop["kind"], stop["executor"], stop["run_id"], stop["spec"]) == ("cancel_run", "cluster-1", "run-1", None)
    encode("executor_command", stop)
    assert stop["command_id"] != lease["command_id"]


def test_command_ids_come_from_the_seeded_generator() -> None:
    ev = Events("job-4")
    events = sequence(ev.submitted(), ev.leased("run-1"))
    one = fold(dict_jobs(), events, random.Random("events/0/12"))
    two = fold(dict_jobs(), events, random.Random("events/0/12"))
    other = fold(dict_jobs(), events, random.Random("events/0/13"))
    assert one.commands == two.commands
    assert one.commands[0]["command_id"] != other.commands[0]["command_id"]


def test_a_job_set_action_is_forwarded_and_changes_no_job() -> None:
    jobs, ev = dict_jobs(), Events("job-5")
    fold(jobs, sequence(ev.submitted()), random.Random(1))
    before = dict(jobs.table)
    cancel = ("JobCancelRequested", {"event_id": "set-cancel", "created": 9_000, "job_id": None, "payload": {"reason": "all done"}})
    reprioritise = ("JobReprioritised", {"event_id": "set-prio", "created": 9_500, "job_id": None, "payload": {"new_priority": 3.0}})

    folded = fold(jobs, sequence(cancel, reprioritise), random.Random(2))

    assert folded.feed == [
        feed.JobSetAction(queue="team-a", job_set_id="set-1", action="cancel", reason="all done", event_id="set-cancel", time=9_000),
        feed.JobSetAction(queue="team-a", job_set_id="set-1", action="reprioritise", new_priority=3.0, event_id="set-prio", time=9_500),
    ]
    assert folded.commands == []
    assert folded.outcomes == {"job_set_action": 2}
    assert jobs.table == before
    assert decode("job_state", jobs.table["job-5"])["cancel_requested"] is False


def test_forwarded_changes_go_to_the_feed_in_order_in_records_of_bounded_size() -> None:
    actions: list[feed.JobDelta | feed.JobSetAction | feed.ExecutorSettings] = [
        feed.JobSetAction("q", "s", "cancel", event_id=f"e{i}") for i in range(MAX_CHANGES_PER_RECORD + 1)
    ]
    records = feed_records(actions)
    assert [len(r.records) for r in records] == [MAX_CHANGES_PER_RECORD, 1]
    assert [a for r in records for a in r.records] == actions
    assert feed_records([]) == []


def test_a_batch_folds_its_messages_in_order_skipping_what_does_not_decode() -> None:
    jobs, one, two = dict_jobs(), Events("job-6"), Events("job-7")
    batch = [
        message(0, 10, encode("event_sequence", sequence(one.submitted(), one.leased("run-1")))),
        message(0, 11, b"\x00not an event sequence"),
        message(1, 4, encode("event_sequence", sequence(two.submitted()))),
    ]

    [folded] = fold_batch(jobs, batch)

    assert folded.messages == batch
    assert folded.outcomes == {"applied": 3, "undecodable": 1}
    # each job's last delta only: it states the whole job
    assert [(d.job_id, d.state) for d in deltas(folded)] == [("job-6", "leased"), ("job-7", "queued")]
    [lease] = folded.commands
    assert (lease["kind"], lease["job_id"]) == ("lease", "job-6")
    # the job states wait for the agent's write, each on its message's partition
    assert [(partition, job_id) for partition, job_id, _ in jobs.pending()] == [(0, "job-6"), (1, "job-7")]
    assert dict(jobs.table) == {}
    # command ids are seeded by the message's position: the same when the batch is folded again after a crash
    [again] = fold_batch(dict_jobs(), batch)
    assert again.commands == folded.commands
    [elsewhere] = next(fold_batch(dict_jobs(), [message(0, 12, batch[0].value or b"")])).commands
    assert elsewhere["command_id"] != lease["command_id"]


def test_a_job_folded_again_after_a_crash_forwards_its_end_even_when_its_whole_life_is_in_one_part() -> None:
    """A part's deltas are sent before its job states are written: a worker killed in between leaves
    the scheduler knowing the job while the table does not. Folded again, the job is created anew by
    the same part that ends it, and its end must still be forwarded, or the scheduler keeps it
    leased and leases it again after its success (test_chaos, seed 21, on restore2)."""
    ev = Events("job-1")
    life = [ev.submitted(), ev.leased("run-1"), ev("JobRunRunning", run_id="run-1", node="node-1")]
    life += [ev("JobRunSucceeded", run_id="run-1"), ev("JobSucceeded", run_id="run-1")]
    batch = [message(0, n, encode("event_sequence", sequence(event))) for n, event in enumerate(life)]

    [part] = fold_batch(dict_jobs(), batch)  # the table lost the first fold's writes

    assert [(d.job_id, d.state) for d in deltas(part)] == [("job-1", "succeeded")]


def test_a_batch_of_many_job_events_is_folded_in_parts_each_given_before_the_next_is_folded(monkeypatch: pytest.MonkeyPatch) -> None:
    """The agent writes a part, and lets the event loop turn, before the next is folded."""
    monkeypatch.setattr(job_state, "PART_MAX_EVENTS", 3)
    jobs = dict_jobs()
    batch = [message(0, n, encode("event_sequence", sequence(*(Events(f"job-{n}{i}").submitted() for i in "ab")))) for n in range(5)]

    parts = fold_batch(jobs, batch)
    first = next(parts)

    # two messages reach three job events; the others are not folded yet
    assert (first.messages, first.job_events) == (batch[:2], 4)
    assert [job_id for _, job_id, _ in jobs.pending()] == ["job-0a", "job-0b", "job-1a", "job-1b"]
    assert first.events == {f"job-{n}{i}": [(0, n)] for n in range(2) for i in "ab"}
    settle(jobs)
    rest = list(parts)
    assert [part.messages for part in rest] == [batch[2:4], batch[4:]]
    assert [[d.job_id for d in deltas(part)] for part in rest] == [["job-2a", "job-2b", "job-3a", "job-3b"], ["job-4a", "job-4b"]]
    assert sum((part.outcomes for part in [first, *rest]), Counter()) == {"applied": 10}


def test_the_next_part_is_folded_on_the_jobs_of_the_part_being_written() -> None:
    """The agent writes a part while it folds the next: the store's handed-over jobs are read until written,
    and a job created in the part being written does not have its spec stored again with the next."""
    jobs, ev = dict_jobs(), Events("job-1")
    folding = job_state.PartFold(jobs, part_max=1)
    first = folding.add(message(0, 0, encode("event_sequence", sequence(ev.submitted(), ev.leased("run-1")))))
    assert first is not None
    writes = jobs.hand_over()

    second = folding.add(message(0, 1, encode("event_sequence", sequence(ev("JobRunPending", run_id="run-1")))))

    assert second is not None and second.outcomes == {"applied": 1}
    assert (jobs.latest("job-1") or {}).get("state") == "pending"
    assert jobs.new_specs() == []
    assert [job_id for _, job_id, _ in jobs.new_specs(writes)] == ["job-1"]
    for _, job_id, raw in jobs.new_specs(writes):
        jobs.specs[job_id] = raw
    for _, job_id, raw in jobs.encoded(writes):
        jobs.table[job_id] = raw
    jobs.written(writes)
    assert decode("job_state", jobs.table["job-1"])["state"] == "leased"
    assert (jobs.latest("job-1") or {}).get("state") == "pending"  # the next part's, still pending
    settle(jobs)
    assert decode("job_state", jobs.table["job-1"])["state"] == "pending"
    assert jobs.get("job-1")["spec"] == decode("job_submitted", jobs.specs["job-1"], keep=SPEC_TYPE)  # type: ignore[index]


def test_a_lease_command_carries_the_spec_job_specs_stored_as_encode_writes_it() -> None:
    """Its spec's encoding is copied from where the spec was read (the event, or job-specs): for a job
    just submitted in the same batch, and for one read back from the tables."""
    jobs, ev = dict_jobs(), Events("job-9")
    submitted = decode("event_sequence", encode("event_sequence", sequence(ev.submitted())), keep=SPEC_TYPE)
    apply_sequence(jobs, submitted, random.Random(1))
    [lease] = apply_sequence(jobs, sequence(ev.leased("run-1")), random.Random(1)).commands
    assert lease["kind"] == "lease" and isinstance(lease["spec"], Encoded)
    assert encoded_command(lease) == encode("executor_command", lease)
    settle(jobs)
    assert decode("job_submitted", jobs.specs["job-9"]) == decode("executor_command", encoded_command(lease))["spec"]

    stored, other = dict_jobs(), Events("job-10")
    fold(stored, sequence(other.submitted()), random.Random(2))
    reread = dict_jobs()
    reread.table.update(stored.table)  # another worker's tables: nothing cached
    reread.specs.update(stored.specs)
    [lease] = apply_sequence(reread, sequence(other.leased("run-1")), random.Random(3)).commands
    # Read back in part (what the fold reads of a spec), written whole: as if the whole spec had been encoded.
    assert isinstance(lease["spec"], Partial)
    assert encoded_command(lease) == encode("executor_command", {**lease, "spec": decode("job_submitted", reread.specs["job-10"])})
    cancelled = apply_sequence(reread, sequence(other("JobCancelled", reason="no")), random.Random(4)).commands
    assert [encoded_command(c) for c in cancelled] == [encode("executor_command", c) for c in cancelled]
