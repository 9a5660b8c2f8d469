"""The job-state agent in Faust (`agent.test_context()` on the memory store, see `tests.kit.plane`):
`events` folded into the `jobs` table (published on its `job-states` changelog), with the feed
records and executor commands the fold forwards."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from schemas.codec import decode, encode
from streams.agents import job_state
from streams.agents.refold_child import RefoldChild
from streams.plane import ControlPlane
from streams.scheduler import feed
from streams.tables.job_index import JobIndexStore
from tests.kit.jobs import ENVELOPE, Events
from tests.kit.plane import agent_plane, running, sent

KEY = b"team-a/set-1"


def plane(tmp_path: Path) -> ControlPlane:
    built = agent_plane(tmp_path)
    job_state.register(built)
    return built


def message(*events: tuple[str, dict[str, Any]]) -> bytes:
    return encode("event_sequence", {**ENVELOPE, "events": [{**e, "payload": (f"flotilla.{kind}", e["payload"])} for kind, e in events]})


def feed_records(plane: ControlPlane) -> list[feed.FeedRecord]:
    return [feed.decode(s.body) for s in sent(plane, plane.topics.scheduler_feed)]


def deltas(record: feed.FeedRecord) -> list[feed.JobDelta]:
    """The job deltas of a feed record of the fold (one `Changes` per sequence)."""
    assert isinstance(record, feed.Changes)
    assert all(isinstance(change, feed.JobDelta) for change in record.records)
    return [change for change in record.records if isinstance(change, feed.JobDelta)]


def stored(plane: ControlPlane, job_id: str) -> dict[str, Any]:
    job = plane.jobs.get(job_id)
    assert job is not None, f"{job_id} is not in the jobs table"
    return job


def counted(plane: ControlPlane, outcome: str) -> float:
    return plane.metrics.registry.get_sample_value("flotilla_events_total", {"outcome": outcome}) or 0.0


def test_a_submitted_job_is_stored_published_and_sent_to_the_scheduler(tmp_path: Path) -> None:
    async def scenario() -> None:
        jobs = plane(tmp_path)
        async with running(jobs, "job-state") as agent:
            await agent.put(message(Events("job-1").submitted()), key=KEY)

        job = stored(jobs, "job-1")
        assert (job["state"], job["queue"], job["job_set_id"]) == ("queued", "team-a", "set-1")
        # writing the table is publishing: the job's state is on the job-states topic, its spec on job-specs
        [published] = sent(jobs, "flotilla.job-states")
        assert published.key == b"job-1" and published.value == jobs.jobs.table["job-1"]
        assert decode("job_state", published.body)["state"] == "queued"
        [spec] = sent(jobs, "flotilla.job-specs")
        assert spec.key == b"job-1" and spec.value == jobs.jobs.specs["job-1"]
        assert decode("job_submitted", spec.body)["pod_spec"] == job["spec"]["pod_spec"]
        [changes] = feed_records(jobs)
        [delta] = deltas(changes)
        assert (delta.job_id, delta.queue, delta.state, delta.runs) == ("job-1", "team-a", "queued", 0)
        assert delta.requests == {"cpu": 1_000, "memory": 2**30 * 1_000}
        assert sent(jobs, jobs.topics.executor_commands) == []
        assert counted(jobs, "applied") == 1

    asyncio.run(scenario())


def test_a_lease_sends_the_executor_its_command_keyed_by_executor(tmp_path: Path) -> None:
    async def scenario() -> None:
        jobs, ev = plane(tmp_path), Events("job-1")
        async with running(jobs, "job-state") as agent:
            await agent.put(message(ev.submitted()), key=KEY)
            await agent.put(message(ev.leased("run-1", node="node-2")), key=KEY)

        [command] = sent(jobs, jobs.topics.executor_commands)
        assert command.key == b"cluster-1"
        lease = decode("executor_command", command.body)
        assert (lease["kind"], lease["executor"], lease["node"], lease["run_id"], lease["job_id"]) == (
            "lease",
            "cluster-1",
            "node-2",
            "run-1",
            "job-1",
        )
        assert lease["spec"]["pod_spec"]["containers"]
        # the spec was stored once, with the job's first state; the leased state does not repeat it
        assert [s.key for s in sent(jobs, "flotilla.job-specs")] == [b"job-1"]
        assert [s.key for s in sent(jobs, "flotilla.job-states")] == [b"job-1", b"job-1"]
        _, leased = feed_records(jobs)
        assert [(d.state, d.run_id, d.executor) for d in deltas(leased)] == [("leased", "run-1", "cluster-1")]
        assert stored(jobs, "job-1")["state"] == "leased"

    asyncio.run(scenario())


def test_a_sequence_of_several_jobs_gives_one_feed_record(tmp_path: Path) -> None:
    async def scenario() -> None:
        jobs = plane(tmp_path)
        async with running(jobs, "job-state") as agent:
            await agent.put(message(Events("job-1").submitted(), Events("job-2").submitted()), key=KEY)

        [changes] = feed_records(jobs)
        assert [d.job_id for d in deltas(changes)] == ["job-1", "job-2"]
        assert {s.key for s in sent(jobs, "flotilla.job-states")} == {b"job-1", b"job-2"}

    asyncio.run(scenario())


def test_a_redelivered_sequence_changes_and_sends_nothing(tmp_path: Path) -> None:
    async def scenario() -> None:
        jobs, ev = plane(tmp_path), Events("job-1")
        sequence = message(ev.submitted(), ev.leased("run-1"))
        async with running(jobs, "job-state") as agent:
            await agent.put(sequence, key=KEY, offset=3)
            before = sent(jobs)
            await agent.put(sequence, key=KEY, offset=3)

        assert sent(jobs) == before
        assert counted(jobs, "unchanged") == 2

    asyncio.run(scenario())


def test_an_undecodable_message_is_skipped_and_the_fold_goes_on(tmp_path: Path) -> None:
    async def scenario() -> None:
        jobs = plane(tmp_path)
        async with running(jobs, "job-state") as agent:
            await agent.put(b"\x01garbage", key=KEY)
            await agent.put(message(Events("job-1").submitted()), key=KEY)

        assert counted(jobs, "undecodable") == 1
        assert jobs.jobs.get("job-1") is not None
        assert len(feed_records(jobs)) == 1

    asyncio.run(scenario())


def test_events_of_an_unknown_job_are_ignored(tmp_path: Path) -> None:
    async def scenario() -> None:
        jobs = plane(tmp_path)
        async with running(jobs, "job-state") as agent:
            await agent.put(message(Events("never-submitted").leased("run-9")), key=KEY)

        assert jobs.jobs.missing(["never-submitted"]) == ["never-submitted"]
        assert sent(jobs) == []
        assert counted(jobs, "unknown_job") == 1

    asyncio.run(scenario())


def test_each_jobs_rows_keep_where_its_events_and_its_job_sets_requests_are(tmp_path: Path) -> None:
    """A job's page reads only these records of `events`: the fold keeps their positions in the job index."""

    async def scenario() -> None:
        jobs, one, two = plane(tmp_path), Events("job-1"), Events("job-2")
        cancel_set = ("JobCancelRequested", {"event_id": "set-e1", "created": 5, "job_id": None, "payload": {"reason": "enough"}})
        async with running(jobs, "job-state") as agent:
            await agent.put(message(one.submitted(), two.submitted()), key=KEY, offset=0)
            await agent.put(message(one.leased("run-1")), key=KEY, offset=1)
            await agent.put(message(cancel_set), key=KEY, offset=2)
            await agent.put(message(two("JobRunRunning", run_id="run-7")), key=KEY, offset=3)  # refused: job-2 has no run
            written = sent(jobs, "flotilla-job-index-changelog")
            await agent.put(message(one.leased("run-1")), key=KEY, offset=1)  # delivered again after a crash

        assert counted(jobs, "refused") == 1
        # rows at each change, and the job set's requests under their own key
        assert [s.text_key for s in written] == ["job-1", "job-2", "job-1", 'job-set:["team-a","set-1"]', "job-2"]
        assert sent(jobs, "flotilla-job-index-changelog") == written  # the same positions again: nothing to write
        for index in (jobs.job_index.current(), JobIndexStore(jobs.job_index.table).current()):  # held, and rebuilt from the table
            assert index.events_of("job-1") == ((0, 0), (0, 1), (0, 2))
            assert index.events_of("job-2") == ((0, 0), (0, 2), (0, 3))
            assert index.events_of("job-3") is None

    asyncio.run(scenario())


def test_a_batch_of_many_job_events_is_written_in_parts_with_a_turn_of_the_event_loop_between(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The event loop serves the API between parts: a batch of 500 submissions of 100 jobs held it for seconds."""
    monkeypatch.setattr(job_state, "PART_MAX_EVENTS", 2)

    async def scenario() -> None:
        jobs = plane(tmp_path)
        seen: list[int] = []

        async def meanwhile() -> None:
            """What another coroutine sees once the fold has sent anything."""
            while not feed_records(jobs):
                await asyncio.sleep(0)
            seen.append(len(feed_records(jobs)))

        async with running(jobs, "job-state") as agent:
            other = asyncio.ensure_future(meanwhile())
            await agent.put_batch([message(*(Events(f"job-{n}{i}").submitted() for i in "ab")) for n in range(3)], key=KEY)
            await other

        assert seen == [1]  # after the first part was sent and written, before the others
        assert [[d.job_id for d in deltas(record)] for record in feed_records(jobs)] == [
            ["job-0a", "job-0b"],
            ["job-1a", "job-1b"],
            ["job-2a", "job-2b"],
        ]
        assert all(stored(jobs, f"job-{n}{i}")["state"] == "queued" for n in range(3) for i in "ab")
        assert counted(jobs, "applied") == 6

    asyncio.run(scenario())


def test_while_a_restored_log_is_refolded_a_batch_is_written_in_larger_parts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing waits on the loop during a refold: the parts grow to `REFOLD_PART_MAX_EVENTS`, and a job's
    events in one part give one delta (and one state write), not one per part. The job index holds the
    refolded rows and sorts its lists once it is read, and from then on moves each row as it changes."""
    monkeypatch.setattr(job_state, "PART_MAX_EVENTS", 2)
    monkeypatch.setattr(job_state, "REFOLD_PART_MAX_EVENTS", 12)
    monkeypatch.setattr(job_state, "BATCH_WITHIN_S", 1.0)  # the six messages in one take, however busy the machine
    ids = [f"job-{n}{i}" for n in range(3) for i in "ab"]

    async def scenario() -> None:
        jobs = plane(tmp_path)
        jobs.refold.arm({0: 6})  # the restored log: the six messages of the first batch
        events = {job_id: Events(job_id) for job_id in ids}
        submitted = [message(*(events[job_id].submitted() for job_id in ids[n : n + 2])) for n in range(0, 6, 2)]
        leased = [message(*(events[job_id].leased(f"{job_id}-run") for job_id in ids[n : n + 2])) for n in range(0, 6, 2)]
        async with running(jobs, "job-state") as agent:
            await agent.put_batch([*submitted, *leased], key=KEY)
            assert jobs.refold.caught_up
            assert [row.job_id for row in jobs.job_index.current().in_states({"leased"})] == ids
            await agent.put(message(events["job-0a"]("JobRunPending", run_id="job-0a-run")), key=KEY)

        assert [(d.job_id, d.state) for d in deltas(feed_records(jobs)[0])] == [(job_id, "leased") for job_id in ids]
        assert [s.key for s in sent(jobs, "flotilla.job-states")] == [job_id.encode() for job_id in ids] + [b"job-0a"]
        index = jobs.job_index.current()
        assert [row.job_id for row in index.in_states({"leased"})] == ids[1:]
        assert [row.job_id for row in index.in_states({"pending"})] == ["job-0a"]
        rebuilt = JobIndexStore(jobs.job_index.table).current()
        assert (index.rows, index.by_state, index.ordered, index.counts) == (
            rebuilt.rows,
            rebuilt.by_state,
            rebuilt.ordered,
            rebuilt.counts,
        )

    asyncio.run(scenario())


def test_a_refold_child_holding_too_many_jobs_is_stopped_and_the_worker_folds_the_rest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The refold's child keeps every job it made in memory; past `REFOLD_CHILD_MOST_JOBS` the worker stops it and
    folds the next batches itself, reading the jobs the child's parts wrote to the tables."""
    monkeypatch.setattr(job_state, "REFOLD_CHILD_MOST_JOBS", 3)
    monkeypatch.setattr(job_state, "BATCH_WITHIN_S", 1.0)  # each put_batch in one take, however busy the machine
    ids = [f"job-{n}{i}" for n in range(3) for i in "ab"]
    sent_to_child: list[int] = []
    send = RefoldChild.send

    def counted_send(child: RefoldChild, messages: Sequence[Any]) -> None:
        sent_to_child.append(len(messages))
        send(child, messages)

    monkeypatch.setattr(RefoldChild, "send", counted_send)

    async def scenario() -> None:
        jobs = plane(tmp_path)
        jobs.refold.arm({0: 6})  # the restored log: six messages in two batches
        events = {job_id: Events(job_id) for job_id in ids}
        submitted = [message(*(events[job_id].submitted() for job_id in ids[n : n + 2])) for n in range(0, 6, 2)]
        leased = [message(*(events[job_id].leased(f"{job_id}-run") for job_id in ids[n : n + 2])) for n in range(0, 6, 2)]
        async with running(jobs, "job-state") as agent:
            with caplog.at_level("INFO", logger=job_state.__name__):
                await agent.put_batch(submitted, key=KEY)  # folded by the child, which then holds six jobs
            assert "the refold's child holds 6 jobs, more than 3" in caplog.text
            assert not jobs.refold.caught_up
            await agent.put_batch(leased, key=KEY)  # folded by the worker, from the tables the child's parts filled
            assert jobs.refold.caught_up

        assert sent_to_child == [3]  # the first batch only
        assert all(stored(jobs, job_id)["state"] == "leased" for job_id in ids)
        assert [(d.job_id, d.state) for r in feed_records(jobs) for d in deltas(r)] == [
            *[(job_id, "queued") for job_id in ids],
            *[(job_id, "leased") for job_id in ids],
        ]
        assert [row.job_id for row in jobs.job_index.current().in_states({"leased"})] == ids
        assert counted(jobs, "applied") == 12

    asyncio.run(scenario())
