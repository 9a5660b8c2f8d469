"""A restored log refolded in the child process (`streams.agents.refold_child`) ends where the worker's own fold
in parts ends: the same job states and specs byte for byte, the same feed records and commands in the same
order, and each job's index row as the job and its events give it; and the child process ends when told to,
and when its worker's end of the pipe closes."""

from __future__ import annotations

import asyncio
import time
from collections import Counter

from faust.types import Message
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from schemas.codec import encode
from streams.agents.job_state import fold_batch, sent
from streams.agents.refold_child import ChildFold, Raw, RefoldChild, RefoldedPart
from streams.archive.refold import active_runs
from streams.domain.job_index import JobRow, row_of
from streams.domain.states import ACTIVE
from streams.scheduler import feed
from streams.scheduler.fold import apply_sequence, message_rng
from streams.tables.jobs import JobStore, read_sequence
from tests.agents.test_fold_in_parts import logs
from tests.agents.test_job_state import message, sequence
from tests.kit.jobs import Events
from tests.kit.stores import dict_jobs, settle


def raw(messages: list[Message]) -> list[Raw]:
    return [Raw(m.topic, m.partition, m.offset, m.value) for m in messages]


def batched(log: list[Message], cuts: list[int]) -> list[list[Message]]:
    """The log in batches cut at ``cuts`` (as the agent's batches take a fetch's messages)."""
    bounds = sorted({0, len(log), *(cut % (len(log) + 1) for cut in cuts)})
    return [log[start:end] for start, end in zip(bounds, bounds[1:], strict=False) if end > start]


def in_process(batches: list[list[Message]], part_max: int) -> tuple[JobStore, list[bytes], list[tuple[bytes, bytes]], Counter[str]]:
    """The worker's own fold of the batches (`fold_batch`, each part written before the next is folded)."""
    jobs, records, commands, outcomes = dict_jobs(), [], [], Counter()  # type: ignore[var-annotated]
    for batch in batches:
        for part in fold_batch(jobs, batch, part_max):
            part_records, part_commands = sent(part)
            records += part_records
            commands += part_commands
            outcomes += part.outcomes
            settle(jobs)
    return jobs, records, commands, outcomes


@settings(max_examples=100, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(log=logs(), part_max=st.integers(1, 60), cuts=st.lists(st.integers(0, 200), max_size=4))
def test_the_childs_parts_write_what_the_workers_own_fold_writes(log: list[Message], part_max: int, cuts: list[int]) -> None:
    batches = batched(log, cuts)
    jobs, records, commands, outcomes = in_process(batches, part_max)

    child = ChildFold(part_max)
    parts = [part for batch in batches for part in child.batch(raw(batch))]
    states: dict[str, bytes] = {}
    specs: dict[str, bytes] = {}
    rows: dict[str, bytes] = {}
    for part in parts:
        specs.update((job_id, value) for _, job_id, value in part.specs)
        states.update((job_id, value) for _, job_id, value in part.states)
        rows.update((key, value) for _, key, value in part.rows)

    assert sum(part.messages for part in parts) == len(log)
    assert states == jobs.table  # job states, byte for byte
    assert specs == jobs.specs
    assert [record for part in parts for record in part.records] == records
    assert [command for part in parts for command in part.commands] == commands
    assert sum((part.outcomes for part in parts), Counter()) == outcomes
    for job_id in jobs.table:
        job = jobs.get(job_id)
        assert job is not None
        row = JobRow.decode(job_id, rows[job_id])
        assert row == row_of(job, row.events)
        assert set(row.events or ()) == {(m.partition, m.offset) for m in log if job_id.encode() in (m.value or b"")}


def test_a_run_active_when_the_part_ends_is_given_for_the_refold_gate() -> None:
    ev = Events("job-1")
    life = [ev.submitted(), ev.leased("run-1", node="node-1"), ev("JobRunPending", run_id="run-1", node="node-1")]
    log = [message(0, n, encode("event_sequence", sequence(event))) for n, event in enumerate(life)]

    [part] = ChildFold(100).batch(raw(log))

    [(job_id, executor)] = part.active[-1:]
    assert job_id == "job-1" and executor is not None
    jobs = dict_jobs()
    [folded] = fold_batch(jobs, log, 100)
    assert part.active == active_runs(folded.changes)
    assert jobs.latest("job-1")["runs"][-1]["state"] in ACTIVE  # type: ignore[index]


def test_the_child_gives_each_part_as_soon_as_it_is_folded() -> None:
    log = [message(0, n, encode("event_sequence", sequence(Events(f"job-{n}").submitted()))) for n in range(30)]
    fold = ChildFold(10)

    parts = fold.batch(raw(log))
    first = next(parts)

    assert first.messages == 10 and len(fold.jobs.table) == 10  # the rest of the batch is not folded yet
    assert [part.messages for part in parts] == [10, 10]


def exit_status(child: RefoldChild) -> int | None:
    """The child process's exit status once it has ended (the reaper waits for it), None if still running after 5 s."""
    for _ in range(50):
        status = child._process.poll()
        if status is not None:
            return status
        time.sleep(0.1)
    return None


def test_the_child_process_folds_a_batch_as_the_fold_in_process_does_and_ends_when_stopped() -> None:
    ev = Events("job-1")
    life = [ev.submitted(), ev.leased("run-1", node="node-1"), ev("JobRunPending", run_id="run-1", node="node-1")]
    log = [message(0, n, encode("event_sequence", sequence(event))) for n, event in enumerate(life)]

    async def scenario() -> tuple[list[RefoldedPart], RefoldChild]:
        child = RefoldChild(2)
        try:
            child.send(log)
            parts = []
            while (part := await child.next()) is not None:
                parts.append(part)
            return parts, child
        finally:
            child.stop()

    parts, child = asyncio.run(scenario())

    assert parts == list(ChildFold(2).batch(raw(log)))
    assert len(parts) == 2
    assert exit_status(child) == 0  # it ended on its own, not killed


def test_a_child_stopped_mid_batch_ends_at_once() -> None:
    log = [message(0, n, encode("event_sequence", sequence(Events(f"job-{n}").submitted()))) for n in range(3_000)]

    async def scenario() -> RefoldChild:
        child = RefoldChild(10)
        child.send(log)
        await child.next()  # the first of its 300 parts: it is folding the rest
        child.stop()
        return child

    child = asyncio.run(scenario())

    assert exit_status(child) == 0


def test_a_child_that_died_fails_the_refold_instead_of_hanging() -> None:
    async def scenario() -> str:
        child = RefoldChild(2)
        try:
            child._process.kill()
            child._process.wait()
            try:
                await asyncio.wait_for(child.next(), 10)
            except RuntimeError as exc:
                return str(exc)
            return "no error"
        finally:
            child.stop()

    assert "ended" in asyncio.run(scenario())


@settings(max_examples=100, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(log=logs(), cuts=st.lists(st.integers(0, 200), max_size=4))
def test_the_views_kept_across_a_part_forward_what_the_fold_without_them_forwards(log: list[Message], cuts: list[int]) -> None:
    """`feed.changed` with views kept (`PartFold.views`; here across the whole log, the tables written at each cut, so that
    a job read back from them meets the view of the very job its last change left) gives each change as without them."""
    plain, kept = dict_jobs(), dict_jobs()
    views: feed.Views = {}
    for batch in batched(log, cuts):
        for m in batch:
            sequence = read_sequence(m.value)
            without = apply_sequence(plain, sequence, message_rng(m.topic, m.partition, m.offset), m.partition)
            with_views = apply_sequence(kept, sequence, message_rng(m.topic, m.partition, m.offset), m.partition, views=views)
            assert with_views.changes == without.changes
            assert with_views.commands == without.commands
            assert with_views.outcomes == without.outcomes
        settle(plain)
        settle(kept)
    assert kept.table == plain.table


def test_the_parts_a_child_gave_while_the_worker_wrote_come_together_and_each_batch_ends() -> None:
    log = [message(0, n, encode("event_sequence", sequence(Events(f"job-{n}").submitted()))) for n in range(40)]

    async def scenario() -> list[list[RefoldedPart]]:
        child = RefoldChild(4)
        try:
            taken = []
            for batch in (log[:20], log[20:]):
                child.send(batch)
                for _ in range(300):  # as if a write took that long: the child gives its 5 parts and the end meanwhile
                    if child._parts.qsize() == 6:
                        break
                    await asyncio.sleep(0.1)
                taken.append(await child.parts())
                taken.append(await child.parts())  # the batch has ended
            return taken
        finally:
            child.stop()

    taken = asyncio.run(scenario())

    fold = ChildFold(4)
    assert taken == [list(fold.batch(raw(log[:20]))), [], list(fold.batch(raw(log[20:]))), []]
    assert len(taken[0]) == 5  # given together: the worker writes them as one
