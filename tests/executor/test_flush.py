"""The executor's flush of run changes to the log, with a producer whose acknowledgements the test holds back."""

from __future__ import annotations

import asyncio
from typing import Any

from executor.backend import RunStatus
from executor.backends.fake import FakeBackend
from executor.cluster import uniform_nodes
from executor.events import Change
from executor.runtime import Executor
from schemas.codec import decode
from streams.config import Settings


class HeldProducer:
    """Takes every record at once and acknowledges none until ``release``."""

    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []
        self.acks: list[asyncio.Future[None]] = []

    async def send(self, topic: str, key: bytes, value: bytes) -> asyncio.Future[None]:
        self.sent.append(decode("event_sequence", value))
        self.acks.append(asyncio.get_running_loop().create_future())
        return self.acks[-1]

    def release(self) -> None:
        for ack in self.acks:
            if not ack.done():
                ack.set_result(None)


class NotingBackend(FakeBackend):
    def __init__(self) -> None:
        super().__init__(uniform_nodes(1, "node", "32", "256Gi"))
        self.noted: list[RunStatus] = []

    def reported(self, statuses: list[RunStatus]) -> None:
        self.noted.extend(statuses)


def test_a_flush_cancelled_while_waiting_for_its_acks_is_not_produced_again() -> None:
    """As when the executor stops: its periodic flush is cancelled, then a last flush runs. The records
    already out must not go out again (under new event ids) from the last flush."""
    backend = NotingBackend()
    executor = Executor(Settings(), "ex1", backend)
    producer = HeldProducer()
    executor._producer = producer
    ended = RunStatus("r1", "j1", "q", "s", "node-0", "succeeded", exit_code=0)

    async def scenario() -> bool:
        executor._changes.append(Change(ended, 1_000))
        periodic = asyncio.create_task(executor._flush())
        while not producer.acks:
            await asyncio.sleep(0)
        periodic.cancel()
        last = asyncio.create_task(executor._flush())
        await asyncio.sleep(0.01)
        producer.release()
        return await last

    assert asyncio.run(scenario())
    kinds = [event["payload"][0] for sequence in producer.sent for event in sequence["events"]]
    assert kinds == ["flotilla.JobRunSucceeded", "flotilla.JobSucceeded"]
    assert backend.noted == [ended]
