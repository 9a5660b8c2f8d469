"""Acknowledged means durable: waiters are answered once their offsets are archived, refused with the
reason when the archive fails, and the API turns that into a 503 (gRPC UNAVAILABLE) without
acknowledging anything. After a restore, scheduling waits for the refold and the executors."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import grpc
import pytest

from schemas.codec import decode
from streams.api.errors import ApiError
from streams.api.grpc.errors import status_of
from streams.api.operations import Operations
from streams.archive.durable import ArchivedOffsets, ArchiveUnavailable
from streams.archive.refold import RefoldGate
from streams.auth import Permissions
from streams.auth.principal import ANONYMOUS
from streams.domain.events import payload
from streams.domain.ids import IdFactory
from streams.domain.jobspec import job_item
from streams.replies import Replies
from tests.kit.jobs import QUEUE, item

EVENTS = "flotilla.events"
CANCEL = payload("JobCancelRequested", {"reason": "no longer needed"})


def test_a_waiter_is_answered_once_its_offset_and_all_before_are_archived() -> None:
    async def scenario() -> None:
        durable = ArchivedOffsets({(EVENTS, 0): 5})
        await asyncio.wait_for(durable.wait(EVENTS, {0: 4}), 1)  # archived already
        waiting = asyncio.ensure_future(durable.wait(EVENTS, {0: 9, 1: 0}))
        await asyncio.sleep(0)
        durable.archived({(EVENTS, 0): 10})
        await asyncio.sleep(0)
        assert not waiting.done(), "partition 1 is not archived yet"
        durable.archived({(EVENTS, 1): 1})
        await asyncio.wait_for(waiting, 1)

    asyncio.run(scenario())


def test_a_failing_archive_refuses_waiters_and_new_writes_with_its_reason_until_it_writes_again() -> None:
    async def scenario() -> None:
        durable = ArchivedOffsets()
        waiting = asyncio.ensure_future(durable.wait(EVENTS, {0: 0}))
        await asyncio.sleep(0)
        durable.failed("cannot write the log archive under /x: No space left on device")
        with pytest.raises(ArchiveUnavailable, match="No space left on device"):
            await waiting
        with pytest.raises(ArchiveUnavailable, match="No space left on device"):
            durable.check()
        durable.archived({(EVENTS, 0): 1})
        durable.check()
        await asyncio.wait_for(durable.wait(EVENTS, {0: 0}), 1)

    asyncio.run(scenario())


@pytest.fixture
def sent() -> list[tuple[str, Any]]:
    return []


def operations(durable: ArchivedOffsets, sent: list[tuple[str, Any]], replies: Replies | None = None) -> Operations:
    """The API's operations over topics (and the batch path, for submissions) that record what is sent and
    answer at offset 0, and no jobs."""

    def acknowledged(name: str, value: Any) -> asyncio.Future[Any]:
        sent.append((name, value))
        done: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        done.set_result(SimpleNamespace(topic=name, partition=0, offset=len(sent) - 1))
        return done

    class Topic:
        def __init__(self, name: str) -> None:
            self.name = name

        def get_topic_name(self) -> str:
            return self.name

        async def send(self, key: str, value: Any, headers: Any = None) -> asyncio.Future[Any]:
            return acknowledged(self.name, value)

    class Producer:
        async def send_keyed(self, topic: str, records: Any, headers: Any = ()) -> asyncio.Future[Any]:
            for _, value in records:
                done = acknowledged(topic, value)
                if topic == "submissions" and replies is not None:  # the ingest agent found the archive failing
                    replies.fail(decode("submit_request", value)["request_id"], ArchiveUnavailable("No space left on device"))
            return done

    topics: Any = SimpleNamespace(**{name: Topic(name) for name in ("queues", "events", "submissions")})
    queues: Any = {"team-a": QUEUE}
    return Operations(
        queues=queues,
        permissions=Permissions(),
        topics=topics,
        replies=replies or Replies(),
        ids=IdFactory.system(),
        reads=None,  # type: ignore[arg-type]  # on purpose: no job is read here
        producer=Producer(),  # type: ignore[arg-type]  # records the submissions
        durable=durable,
    )


def test_the_api_refuses_changes_with_503_and_the_reason_while_the_archive_cannot_write(sent: list[tuple[str, Any]]) -> None:
    durable = ArchivedOffsets()
    durable.failed("cannot write the log archive under /state/log: No space left on device")
    ops = operations(durable, sent)
    with pytest.raises(ApiError) as refused:
        asyncio.run(ops.create_queue(ANONYMOUS, {"name": "new"}))
    assert refused.value.status == 503 and "No space left on device" in refused.value.reason
    assert status_of(refused.value)[0] == grpc.StatusCode.UNAVAILABLE
    with pytest.raises(ApiError) as refused:
        asyncio.run(ops.submit(ANONYMOUS, "team-a", "set-1", [job_item(item())]))
    assert refused.value.status == 503
    with pytest.raises(ApiError) as refused:
        asyncio.run(ops.control_job_set(ANONYMOUS, "team-a", "set-1", CANCEL))
    assert refused.value.status == 503
    assert sent == [], "nothing may be written that cannot be archived"


def test_a_write_the_archive_fails_to_take_is_answered_503_not_acknowledged(sent: list[tuple[str, Any]]) -> None:
    async def scenario() -> None:
        durable = ArchivedOffsets()
        ops = operations(durable, sent)
        answer = asyncio.ensure_future(ops.control_job_set(ANONYMOUS, "team-a", "set-1", CANCEL))
        while not sent:
            await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert not answer.done(), "answered before the archive had the event"
        durable.failed("cannot write the log archive under /state/log: Read-only file system")
        with pytest.raises(ApiError) as refused:
            await answer
        assert refused.value.status == 503 and "not archived: cannot write the log archive" in refused.value.reason

    asyncio.run(scenario())


def test_a_write_is_answered_once_archived(sent: list[tuple[str, Any]]) -> None:
    async def scenario() -> None:
        durable = ArchivedOffsets()
        ops = operations(durable, sent)
        answer = asyncio.ensure_future(ops.control_job_set(ANONYMOUS, "team-a", "set-1", CANCEL))
        while not sent:
            await asyncio.sleep(0)
        await asyncio.sleep(0.01)
        assert not answer.done()
        durable.archived({("events", 0): 1})
        assert isinstance(await asyncio.wait_for(answer, 1), str)

    asyncio.run(scenario())


def test_a_submission_whose_events_the_archive_could_not_take_is_answered_503(sent: list[tuple[str, Any]]) -> None:
    replies = Replies()
    ops = operations(ArchivedOffsets(), sent, replies)
    with pytest.raises(ApiError) as refused:
        asyncio.run(ops.submit(ANONYMOUS, "team-a", "set-1", [job_item(item())]))
    assert refused.value.status == 503 and "not archived: No space left on device" in refused.value.reason


# ---------------------------------------------------------------------------------------------- refold gate


def delta(job_id: str, run_state: str | None, executor: str | None = "local", state: str = "running") -> dict[str, Any]:
    """A changed job as the fold forwards it: its state, with its latest run."""
    runs = [] if run_state is None else [{"run_id": f"{job_id}-1", "executor": executor, "node": "n", "state": run_state}]
    return {"job_id": job_id, "state": state, "runs": runs}


def message(partition: int, offset: int) -> Any:
    return SimpleNamespace(partition=partition, offset=offset)


def test_scheduling_waits_for_the_refold_then_for_executors_holding_runs() -> None:
    now = [0.0]
    gate = RefoldGate(clock=lambda: now[0])
    gate.arm({0: 3, 1: 2})
    assert not gate.caught_up and not gate.may_schedule()
    gate.folded_batch([message(0, 0), message(0, 1), message(1, 0)], [delta("j1", "running"), delta("j2", "running", "other")])
    assert gate.progress() == {"folded": 3, "total": 5} and not gate.may_schedule()
    gate.folded_batch([message(0, 2), message(1, 1)], [delta("j2", "succeeded", state="succeeded")])
    assert gate.caught_up and gate.waiting_for() == ["local"]
    gate.heard_from(["other"])
    assert not gate.may_schedule(), "local holds a run and has not reported"
    gate.heard_from(["local"])
    assert gate.may_schedule() and gate.may_schedule(), "open, and stays open"


def test_an_executor_that_does_not_come_back_holds_scheduling_for_its_grace_only() -> None:
    now = [0.0]
    gate = RefoldGate(clock=lambda: now[0])
    gate.arm({0: 1})
    gate.folded_batch([message(0, 0)], [delta("j1", "leased", "gone", state="leased")])
    now[0] = 9.9
    assert not gate.may_schedule()
    now[0] = 10.1
    assert gate.may_schedule()


def test_a_gate_not_armed_or_with_nothing_to_refold_lets_scheduling_go() -> None:
    assert RefoldGate().may_schedule()
    gate = RefoldGate()
    gate.arm({0: 0})
    assert gate.caught_up and gate.may_schedule()
