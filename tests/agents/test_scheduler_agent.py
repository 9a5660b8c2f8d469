"""The scheduling agent in Faust (`agent.test_context()` on the memory store, see `tests.kit.plane`):
feed records fold into the index and its `scheduler-index` table, and a tick runs a cycle whose
events, commands and cycle record are committed on the feed, then published. A worker taking the
feed over catches up without publishing, publishes again what was committed, and commits what
was not."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from aiokafka.errors import KafkaTimeoutError
from faust.types import TP

from schemas.codec import decode, encode
from streams.agents import scheduler
from streams.plane import ControlPlane
from streams.scheduler import feed
from streams.scheduler.cycle import CYCLES_JOB_SET, CYCLES_QUEUE, CycleOutcome
from streams.scheduler.index import CYCLES_KEY
from tests.kit.jobs import QUEUE
from tests.kit.plane import AgentUnderTest, agent_plane, running, sent
from tests.kit.scheduler import delta, executor, tick

T_MS = 1_717_000_000_000


def plane(tmp_path: Path) -> tuple[ControlPlane, scheduler.SchedulerState]:
    built = agent_plane(tmp_path)
    return built, scheduler.register(built)


async def put(agent: AgentUnderTest, *records: feed.FeedRecord) -> None:
    for record in records:
        await agent.put(feed.encode(record))


def published(plane: ControlPlane) -> list[tuple[str | None, dict[str, Any]]]:
    return [(s.text_key, decode("event_sequence", s.body)) for s in sent(plane, plane.topics.events)]


def kinds(sequence: dict[str, Any]) -> list[tuple[str | None, str]]:
    return [(e["job_id"], e["payload"][0].removeprefix("flotilla.")) for e in sequence["events"]]


def test_feed_records_and_a_tick_lease_jobs_publish_the_cycle_and_fill_the_index_table(tmp_path: Path) -> None:
    async def scenario() -> None:
        sched, state = plane(tmp_path)
        async with running(sched, "scheduler") as agent:
            await put(
                agent, delta("job-1", "a", submitted=T_MS - 2_000), delta("job-2", "a", submitted=T_MS - 1_000), executor("ex1", time=T_MS)
            )
            await agent.put(feed.encode(tick(T_MS + 500, "a", owner=state.owner)), offset=3)

        (leases_key, leases), (cycle_key, cycle) = published(sched)
        assert leases_key == "a/s" and (leases["queue"], leases["job_set_id"], leases["user"]) == ("a", "s", "scheduler")
        assert kinds(leases) == [("job-1", "JobLeased"), ("job-2", "JobLeased")]
        assert {e["payload"][1]["executor"] for e in leases["events"]} == {"ex1"}
        assert {e["created"] for e in leases["events"]} == {T_MS + 500}  # the tick's clock
        # the cycle record, under its own key, names the tick's feed offset as its seed
        assert cycle_key == f"{CYCLES_QUEUE}/{CYCLES_JOB_SET}"
        assert kinds(cycle) == [(None, "SchedulingCycle")]
        record = cycle["events"][0]["payload"][1]
        assert (record["seed"], record["feed_offsets"], record["cycle_time"]) == (3, {"0": 3}, T_MS + 500)
        assert [(d["job_id"], d["kind"], d["executor"]) for d in record["decisions"]] == [
            ("job-1", "leased", "ex1"),
            ("job-2", "leased", "ex1"),
        ]
        # the index is in the table (and so on its changelog), leases included
        table = sched.scheduler_index
        assert {"j:job-1", "j:job-2", "e:ex1", CYCLES_KEY} <= set(table.keys())
        assert feed.delta_from_row(json.loads(table["j:job-1"])[0]).state == "leased"
        assert json.loads(table[CYCLES_KEY]) == 1
        assert {s.text_key for s in sent(sched, "flotilla-scheduler-index-changelog")} >= {"j:job-1", "e:ex1", CYCLES_KEY}
        # leases reach the executor through the job-state fold, not from here
        assert sent(sched, sched.topics.executor_commands) == []
        assert sched.metrics.registry.get_sample_value("flotilla_scheduling_decisions_total", {"kind": "leased"}) == 2

    asyncio.run(scenario())


def test_records_before_the_tick_decide_nothing(tmp_path: Path) -> None:
    async def scenario() -> None:
        sched, _ = plane(tmp_path)
        async with running(sched, "scheduler") as agent:
            await put(agent, delta("job-1", "a"), executor("ex1", time=T_MS))

            assert published(sched) == []
            assert "j:job-1" in sched.scheduler_index and CYCLES_KEY not in sched.scheduler_index

    asyncio.run(scenario())


def test_a_tick_with_nothing_to_decide_publishes_nothing_but_counts_the_cycle(tmp_path: Path) -> None:
    async def scenario() -> None:
        sched, state = plane(tmp_path)
        async with running(sched, "scheduler") as agent:
            await put(agent, executor("ex1", time=T_MS), tick(T_MS + 500, "a", owner=state.owner))

        assert published(sched) == []
        assert json.loads(sched.scheduler_index[CYCLES_KEY]) == 1
        assert sched.metrics.registry.get_sample_value("flotilla_scheduling_cycles_total") == 1

    asyncio.run(scenario())


def test_a_run_the_index_does_not_hold_is_cancelled_on_its_executor(tmp_path: Path) -> None:
    async def scenario() -> None:
        sched, state = plane(tmp_path)
        async with running(sched, "scheduler") as agent:
            await put(agent, executor("ex1", time=T_MS, runs={"run-9": "gone-job"}), tick(T_MS + 500, "a", owner=state.owner))

        [command] = sent(sched, sched.topics.executor_commands)
        assert command.key == b"ex1"
        cancel = decode("executor_command", command.body)
        assert (cancel["kind"], cancel["executor"], cancel["run_id"], cancel["job_id"]) == ("cancel_run", "ex1", "run-9", "gone-job")
        [(cycle_key, _)] = published(sched)  # the cycle is recorded
        assert cycle_key == f"{CYCLES_QUEUE}/{CYCLES_JOB_SET}"

    asyncio.run(scenario())


def test_a_cycle_runs_off_the_event_loop_which_serves_others_meanwhile(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A cycle over many queued jobs takes about a second: the worker's API and fold go on meanwhile."""
    served = threading.Event()
    real_cycle = scheduler.cycle

    def slow_cycle(*args: Any) -> tuple[CycleOutcome, float]:
        # Ends only once a coroutine on the loop has run while it was running (or gives up after 10 s).
        assert served.wait(10), "nothing else ran on the event loop during the cycle"
        return real_cycle(*args)

    monkeypatch.setattr(scheduler, "cycle", slow_cycle)

    async def scenario() -> None:
        sched, state = plane(tmp_path)
        async with running(sched, "scheduler") as agent:
            await put(agent, delta("job-1", "a"), executor("ex1", time=T_MS))
            ticked = asyncio.ensure_future(put(agent, tick(T_MS + 500, "a", owner=state.owner)))
            await asyncio.sleep(0.05)
            served.set()  # runs on the loop while the cycle waits for it
            await ticked
        (_, leases), _ = published(sched)
        assert kinds(leases) == [("job-1", "JobLeased")]

    asyncio.run(scenario())


def test_after_partitions_are_reassigned_the_index_is_rebuilt_from_the_table(tmp_path: Path) -> None:
    async def scenario() -> None:
        sched, state = plane(tmp_path)
        async with running(sched, "scheduler") as agent:
            await put(agent, delta("job-1", "a"), executor("ex1", time=T_MS))
            await sched.app.on_partitions_assigned.send(set())
            assert state.index is None
            await put(agent, tick(T_MS + 500, "a", owner=state.owner))

        assert state.index is not None and set(state.index.jobs) == {"job-1"}
        (_, leases), _ = published(sched)
        assert kinds(leases) == [("job-1", "JobLeased")]

    asyncio.run(scenario())


def test_an_unreadable_feed_record_is_skipped(tmp_path: Path) -> None:
    async def scenario() -> None:
        sched, state = plane(tmp_path)
        async with running(sched, "scheduler") as agent:
            await agent.put(b"{not json")
            await agent.put(b'{"k": "no-such-kind"}')
            await agent.put(b'{"k": "job"}')  # a job delta without its fields
            await agent.put(b"\x00FC1\x00")  # a committed cycle cut short
            await put(agent, delta("job-1", "a"), executor("ex1", time=T_MS), tick(T_MS + 500, "a", owner=state.owner))

        (_, leases), _ = published(sched)
        assert kinds(leases) == [("job-1", "JobLeased")]

    asyncio.run(scenario())


def committed_on_feed(plane: ControlPlane) -> list[feed.Committed]:
    records = [feed.decode(s.body) for s in sent(plane, plane.topics.scheduler_feed)]
    return [record for record in records if isinstance(record, feed.Committed)]


def events_sent(plane: ControlPlane) -> list[tuple[bytes | None, bytes]]:
    return [(s.key, s.body) for s in sent(plane, plane.topics.events)]


WORK = (delta("job-1", "a", submitted=T_MS - 2_000), delta("job-2", "a", submitted=T_MS - 1_000), executor("ex1", time=T_MS))


def test_a_cycle_is_committed_on_the_feed_whole_before_any_of_it_is_published(tmp_path: Path) -> None:
    async def scenario() -> None:
        sched, state = plane(tmp_path)
        async with running(sched, "scheduler") as agent:
            await put(agent, *WORK, tick(T_MS + 500, "a", owner=state.owner))

        [commit] = committed_on_feed(sched)
        assert commit.tick == 3
        order = [
            s.topic for s in sent(sched) if s.topic in (sched.topics.scheduler_feed.get_topic_name(), sched.topics.events.get_topic_name())
        ]
        assert order == [sched.topics.scheduler_feed.get_topic_name()] + [sched.topics.events.get_topic_name()] * 2
        assert list(commit.events) == events_sent(sched)  # the same bytes, in the same order
        assert state.index is not None and (state.index.offset, state.index.published) == (3, 3)

    asyncio.run(scenario())


def test_a_worker_catching_up_runs_earlier_ticks_and_publishes_what_was_committed_byte_for_byte(tmp_path: Path) -> None:
    async def scenario() -> None:
        first, first_state = plane(tmp_path / "first")
        async with running(first, "scheduler") as agent:
            await put(agent, *WORK, tick(T_MS + 500, "a", owner=first_state.owner))
        [commit] = committed_on_feed(first)

        second, second_state = plane(tmp_path / "second")
        async with running(second, "scheduler") as agent:
            await put(agent, *WORK, tick(T_MS + 500, "a", owner=first_state.owner))
            assert events_sent(second) == [] and committed_on_feed(second) == []  # not ours to publish (yet)
            assert second_state.index is not None and second_state.index.jobs["job-1"].delta.state == "leased"
            await put(agent, commit)
            assert events_sent(second) == events_sent(first)  # what the first owner committed, again
            await put(agent, tick(T_MS + 1_500, "a", owner=second_state.owner))

        assert committed_on_feed(second) == []  # nothing left to commit, nothing new decided
        assert second.metrics.registry.get_sample_value("flotilla_scheduling_cycles_diverged_total") == 0

    asyncio.run(scenario())


def test_a_cycle_nobody_committed_is_committed_by_the_new_owner_at_its_first_tick(tmp_path: Path) -> None:
    async def scenario() -> None:
        sched, state = plane(tmp_path)
        async with running(sched, "scheduler") as agent:
            await put(agent, *WORK, tick(T_MS + 500, "a", owner="an-owner-killed-before-committing"))
            assert events_sent(sched) == []
            await put(agent, tick(T_MS + 1_500, "a", owner=state.owner))

        [commit] = committed_on_feed(sched)  # the earlier tick's; the new one leased nothing more
        assert commit.tick == 3
        (_, leases), _ = published(sched)
        assert kinds(leases) == [("job-1", "JobLeased"), ("job-2", "JobLeased")]
        assert {e["created"] for e in leases["events"]} == {T_MS + 500}  # decided at the earlier tick, from its inputs

    asyncio.run(scenario())


def test_a_rebuilt_index_skips_what_it_has_folded_so_a_redelivered_tick_decides_nothing_again(tmp_path: Path) -> None:
    async def scenario() -> None:
        sched, state = plane(tmp_path)
        async with running(sched, "scheduler") as agent:
            await put(agent, *WORK, tick(T_MS + 500, "a", owner=state.owner))
            commits = committed_on_feed(sched)
            await sched.app.on_partitions_assigned.send(set())  # the index is rebuilt from the table
            await agent.put(feed.encode(WORK[0]), offset=0)  # redelivered from an older committed offset
            await put(agent, *WORK[1:], tick(T_MS + 500, "a", owner=state.owner), commits[0])

        assert committed_on_feed(sched) == commits and len(published(sched)) == 2
        assert sched.metrics.registry.get_sample_value("flotilla_scheduling_cycles_total") == 1

    asyncio.run(scenario())


def test_a_rerun_that_differs_from_the_committed_cycle_is_counted_and_the_committed_one_wins(tmp_path: Path) -> None:
    async def scenario() -> None:
        sched, _ = plane(tmp_path)
        other = feed.Committed(tick=3, cycle_id="01OTHER", events=((b"a/s", b"not what this worker would decide"),))
        async with running(sched, "scheduler") as agent:
            await put(agent, *WORK, tick(T_MS + 500, "a", owner="someone-else"), other)

        assert events_sent(sched) == list(other.events)
        assert sched.metrics.registry.get_sample_value("flotilla_scheduling_cycles_diverged_total") == 1

    asyncio.run(scenario())


def test_a_lease_is_written_to_the_index_table_once_and_a_rebuild_has_its_confirmation(tmp_path: Path) -> None:
    async def scenario() -> None:
        sched, state = plane(tmp_path)
        async with running(sched, "scheduler") as agent:
            await put(agent, *WORK, tick(T_MS + 500, "a", owner=state.owner))
            assert state.index is not None
            entries = {key: sched.scheduler_index[key] for key in ("j:job-1", "j:job-2")}
            job_writes = sched.metrics.registry.get_sample_value("flotilla_scheduler_index_job_writes_total")
            await put(agent, feed.Heartbeat("ex1", T_MS + 2_000))
            await put(agent, feed.Changes((state.index.jobs["job-1"].delta, state.index.jobs["job-2"].delta)))
            index = state.index

        # the fold's confirmations wrote no job entry: one acceptance record holds them
        assert {key: sched.scheduler_index[key] for key in entries} == entries
        assert sched.metrics.registry.get_sample_value("flotilla_scheduler_index_job_writes_total") == job_writes == 4
        assert [key for key in sched.scheduler_index.keys() if key.startswith("a:")] == ["a:5"]
        rebuilt = scheduler.rebuild(sched.scheduler_index)
        accepted = {job_id: (entry.fold_run, entry.fold_run_at) for job_id, entry in index.jobs.items()}
        assert accepted == {"job-1": ("job-1-1", T_MS + 2_000), "job-2": ("job-2-1", T_MS + 2_000)}
        assert {job_id: (entry.fold_run, entry.fold_run_at) for job_id, entry in rebuilt.jobs.items()} == accepted

    asyncio.run(scenario())


@dataclass
class FailingOnce:
    """The batch path with the broker failing the first send of each listed topic that it is given."""

    producer: Any
    topics: set[str]

    async def send_partition(self, topic: str, partition: int, records: Any, headers: Any = ()) -> asyncio.Future[int]:
        if topic in self.topics:
            self.topics.discard(topic)
            raise KafkaTimeoutError(f"{topic}: no broker answered")
        return await self.producer.send_partition(topic, partition, records, headers)

    async def send_keyed(self, topic: str, records: Any, headers: Any = ()) -> asyncio.Future[dict[int, int]]:
        if topic in self.topics:
            self.topics.discard(topic)
            raise KafkaTimeoutError(f"{topic}: no broker answered")
        return await self.producer.send_keyed(topic, records, headers)


def leased(plane: ControlPlane) -> list[str]:
    """The job of each distinct lease event published. A cycle whose publication may have been cut short is
    published again, the same events (their readers skip repeats by id): those count once."""
    leases = {
        (e["job_id"], json.dumps(e, sort_keys=True))
        for _, s in published(plane)
        for e in s["events"]
        if e["payload"][0].endswith("JobLeased")
    }
    return sorted(job for job, _ in leases)


def failing_plane(tmp_path: Path, failing: str) -> tuple[ControlPlane, scheduler.SchedulerState]:
    """The plane of the worker holding the feed, with the broker failing the first send to the scheduler's
    feed, to events or to the index's changelog."""
    built = agent_plane(tmp_path)
    feed_partition = TP(built.topics.scheduler_feed.get_topic_name(), 0)
    built.app.assignor.assigned_actives = lambda: {feed_partition}  # type: ignore[method-assign]
    topics = {
        "feed": built.topics.scheduler_feed.get_topic_name(),
        "events": built.topics.events.get_topic_name(),
        "index": built.scheduler_index.changelog_topic.get_topic_name(),
    }
    built.batch_producer = FailingOnce(built.batch_producer, {topics[failing]})
    return built, scheduler.register(built)


@pytest.mark.parametrize("failing", ["feed", "events", "index"])
def test_a_batch_that_fails_half_way_is_folded_again_from_the_table_and_nothing_in_it_is_lost(tmp_path: Path, failing: str) -> None:
    """A broker error while the cycle is committed (the feed), published (events) or the batch's index
    written (its changelog): the index had taken the cycle's decisions, so it is rebuilt from the table
    and the batch folded again, as by a worker that took the feed over. Its cycle is published once
    committed; the record after the tick in the same batch is folded, not lost with the failed batch."""

    async def scenario() -> None:
        sched, state = failing_plane(tmp_path, failing)
        first_owner = state.owner
        later = delta("job-3", "a", submitted=T_MS + 100)
        async with running(sched, "scheduler") as agent:
            await agent.put_batch([feed.encode(r) for r in (*WORK, tick(T_MS + 500, "a", owner=first_owner), later)])
            assert sched.metrics.registry.get_sample_value("flotilla_scheduler_failures_total") == 1
            assert state.owner != first_owner, "folded again as a new owner: the failed cycle's outcome is not its own yet"
            assert state.index is not None and state.index.offset == 4
            assert set(state.index.jobs) == {"job-1", "job-2", "job-3"}
            await put(agent, tick(T_MS + 1_500, "a", owner=state.owner))

        commits = committed_on_feed(sched)
        assert [c.tick for c in commits][-2:] == [3, 5], "the failed tick's cycle committed by the new owner, then its own"
        assert leased(sched) == ["job-1", "job-2", "job-3"], "each job leased once"
        rebuilt = scheduler.rebuild(sched.scheduler_index)
        assert rebuilt.offset == 5 and {j: e.delta.state for j, e in rebuilt.jobs.items()} == dict.fromkeys(
            ("job-1", "job-2", "job-3"), "leased"
        )

    asyncio.run(scenario())


@dataclass
class FeedLog:
    """The feed partition as the broker keeps it, for a worker that owns it: what the test puts and
    what the agent sends to it, at their offsets, delivered back to the agent in order. The
    ``fail_send``-th send of the agent to the feed fails."""

    producer: Any
    topic: str
    fail_send: int
    records: list[bytes] = field(default_factory=list)
    sends: int = 0
    delivered: int = 0

    async def send_partition(self, topic: str, partition: int, records: Any, headers: Any = ()) -> asyncio.Future[int]:
        if topic == self.topic:
            self.sends += 1
            if self.sends == self.fail_send:
                raise KafkaTimeoutError(f"{topic}: no broker answered")
            await self.producer.send_partition(topic, partition, records, headers)  # kept in the record of what was sent
            first, self.records = len(self.records), self.records + [value for _, value in records]
            done: asyncio.Future[int] = asyncio.get_running_loop().create_future()
            done.set_result(first)
            return done
        return await self.producer.send_partition(topic, partition, records, headers)

    async def send_keyed(self, topic: str, records: Any, headers: Any = ()) -> asyncio.Future[dict[int, int]]:
        return await self.producer.send_keyed(topic, records, headers)

    async def deliver(self, agent: AgentUnderTest, *records: feed.FeedRecord, sent_meanwhile: bool = True) -> None:
        """Append ``records``, then deliver everything not delivered yet, and what the agent sends meanwhile
        unless not ``sent_meanwhile``."""
        self.records += [feed.encode(record) for record in records]
        end = len(self.records)
        while self.delivered < (len(self.records) if sent_meanwhile else end):
            await agent.put(self.records[self.delivered], offset=self.delivered)
            self.delivered += 1


async def until(condition: Callable[[], bool], what: str) -> None:
    """Until ``condition`` holds (what the agent does after its gap or on its cycle's thread), at most 5 s."""
    for _ in range(500):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"not within 5 s: {what}")


def test_a_tick_run_ahead_whose_commit_fails_runs_again_when_read_back_and_its_lease_is_not_lost(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The owner runs its early tick's cycle before reading the tick back (run ahead); the commit of that
    cycle fails. The index, which took the cycle's decisions, is dropped, so when the tick is read back its
    cycle runs again on the index rebuilt from the table, and the lease reaches the log once."""

    async def scenario() -> None:
        sched = agent_plane(tmp_path)
        feed_topic = sched.topics.scheduler_feed.get_topic_name()
        # Sends to the feed: 1 the first tick (with the configuration), 2 its commit, 3 the early tick run ahead, 4 its commit.
        log = FeedLog(sched.batch_producer, feed_topic, fail_send=4)
        sched.batch_producer = log
        state = scheduler.register(sched)
        sched.queues.apply(b"a", encode("queue", {**QUEUE, "name": "a"}), 0)
        monkeypatch.setattr(sched.app.assignor, "assigned_actives", lambda: {TP(feed_topic, 0)})  # this worker owns the feed
        async with running(sched, "scheduler") as agent:
            await log.deliver(agent, *WORK)  # an early tick leases job-1 and job-2 when read back
            assert [c.tick for c in committed_on_feed(sched)] == [4]
            first_owner = state.owner
            await log.deliver(agent, delta("job-3", "a", submitted=T_MS + 100), sent_meanwhile=False)
            failures = "flotilla_scheduler_failures_total"
            await until(
                lambda: sched.metrics.registry.get_sample_value(failures) == 1, "the early tick run ahead after its gap, its commit failed"
            )
            assert sched.metrics.registry.get_sample_value("flotilla_scheduling_ticks_run_ahead_total") == 1
            assert state.index is None and state.owner != first_owner
            await log.deliver(agent)  # read back: run again on the rebuilt index, as another owner's tick
            assert state.index is not None and state.index.jobs["job-3"].delta.state == "leased"
            await log.deliver(agent, tick(T_MS + 5_000, "a", owner=state.owner))  # this worker's next tick commits it

        assert [c.tick for c in committed_on_feed(sched)] == [4, 7]
        assert leased(sched) == ["job-1", "job-2", "job-3"], "each job leased once"

    asyncio.run(scenario())


def test_a_failed_batch_is_folded_again_only_once_this_worker_holds_the_feed_again(tmp_path: Path) -> None:
    """A worker that lost the feed while its batch failed writes nothing beside the new owner; given the
    feed back, it folds the batch then, on the index rebuilt from its table."""

    async def scenario() -> None:
        sched, state = failing_plane(tmp_path, "feed")
        feed_partition = TP(sched.topics.scheduler_feed.get_topic_name(), 0)
        held: set[TP] = set()
        sched.app.assignor.assigned_actives = lambda: held  # type: ignore[method-assign]
        async with running(sched, "scheduler") as agent:
            folding = asyncio.ensure_future(agent.put_batch([feed.encode(r) for r in (*WORK, tick(T_MS + 500, "a", owner=state.owner))]))
            await asyncio.sleep(1.0)  # several pauses
            assert not folding.done() and state.index is None, "not folded again while another worker may hold the feed"
            assert sched.metrics.registry.get_sample_value("flotilla_scheduler_failures_total") == 1
            held.add(feed_partition)
            await folding
            assert state.index is not None and state.index.offset == 3
            assert {j: e.delta.state for j, e in state.index.jobs.items()} == {"job-1": "leased", "job-2": "leased"}

    asyncio.run(scenario())
