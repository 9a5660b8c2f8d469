"""A control plane for unit tests of the agents: Faust on the `memory://` store, and no broker.

`agent_plane` builds the real plane (`streams.plane.build_plane`) with a `RecordingProducer` in
place of the Kafka producer, so everything the agents publish -- `topic.send`s and the tables'
changelog writes alike -- goes through Faust's own serializers and partitioning and is kept,
bytes as they would reach the broker, in ``plane.app.producer.sent``; the batched path
(``plane.batch_producer``) records into the same list.

`running` starts one agent under Faust's ``agent.test_context()`` (which resumes the app's flow
control). Its ``put`` delivers a message as the broker would (raw key and value bytes, a log
offset, a timestamp) and returns only once the agent has finished with it: Faust's own
``put(wait=True)`` returns when the message enters the agent's stream, before the agent body has
run past its first ``await``, so the end is observed with a Faust sensor (``on_stream_event_out``
fires when the stream moves on from an event). A crash of the agent is raised in the test.

Everything here must run inside the test's event loop: build the plane in the coroutine that
`asyncio.run` runs.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from faust.sensors import Sensor
from faust.transport.producer import Producer
from faust.types import TP, AppT, EventT, FutureMessage, RecordMetadata, StreamT

from streams.config import Settings
from streams.plane import ControlPlane, build_plane
from streams.tables.batched import Headers, Records

# Nothing listens on port 1: should anything try to reach a broker after all, it fails at once
# instead of finding whatever runs on the default 127.0.0.1:9092 (the benchmarks' broker).
NO_BROKER = "kafka://127.0.0.1:1"
SETTLE_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class Sent:
    """One message as the producer was given it: serialized key and value."""

    topic: str
    key: bytes | None
    value: bytes | None
    partition: int | None

    @property
    def text_key(self) -> str | None:
        return None if self.key is None else self.key.decode()

    @property
    def body(self) -> bytes:
        """The value of a record that is no tombstone."""
        assert self.value is not None, f"a tombstone on {self.topic}"
        return self.value


class RecordingProducer(Producer):
    """Faust's producer interface, keeping each message instead of producing it.

    ``send`` serves `topic.send`; ``send_soon`` serves table writes (the changelog), and is
    completed at once, with its callback, as a produced message would be.
    """

    def __init__(self, app: AppT) -> None:
        super().__init__(app.producer_transport)
        self.sent: list[Sent] = []

    async def on_start(self) -> None:
        """No buffer service: `send_soon` records at once."""

    def _record(self, topic: str, key: bytes | None, value: bytes | None, partition: int | None, timestamp: float | None) -> RecordMetadata:
        self.sent.append(Sent(topic, key, value, partition))
        partition = partition or 0
        return RecordMetadata(topic, partition, TP(topic, partition), len(self.sent) - 1, timestamp)

    async def send(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        partition: int | None,
        timestamp: float | None,
        headers: Any,
        *,
        transactional_id: str | None = None,
    ) -> asyncio.Future[RecordMetadata]:
        done: asyncio.Future[RecordMetadata] = asyncio.get_running_loop().create_future()
        done.set_result(self._record(topic, key, value, partition, timestamp))
        return done

    async def send_and_wait(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        partition: int | None,
        timestamp: float | None,
        headers: Any,
        *,
        transactional_id: str | None = None,
    ) -> RecordMetadata:
        return self._record(topic, key, value, partition, timestamp)

    def send_soon(self, fut: FutureMessage) -> None:
        message = fut.message
        fut.set_result(self._record(message.channel.get_topic_name(), message.key, message.value, message.partition, message.timestamp))
        if message.callback is not None:
            message.callback(fut)

    def key_partition(self, topic: str, key: bytes) -> TP:
        return TP(topic, 0)

    async def flush(self) -> None:
        pass

    def to(self, topic: str) -> list[Sent]:
        """What was sent to ``topic`` (its full name), in order."""
        return [sent for sent in self.sent if sent.topic == topic]


@dataclass
class RecordingBatchProducer:
    """The batch path (`streams.tables.batched.BatchProducer`) into the same record as the producer's."""

    producer: RecordingProducer

    async def send_partition(self, topic: str, partition: int, records: Records, headers: Headers = ()) -> asyncio.Future[int]:
        first = len(self.producer.sent)
        self.producer.sent += [Sent(topic, key, value, partition) for key, value in records]
        done: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        done.set_result(first)
        return done

    async def send_keyed(self, topic: str, records: Records, headers: Headers = ()) -> asyncio.Future[dict[int, int]]:
        first = await self.send_partition(topic, 0, records, headers)  # test planes have one partition
        done: asyncio.Future[dict[int, int]] = asyncio.get_running_loop().create_future()
        done.set_result({0: first.result() + len(records) - 1})
        return done


class ProcessedEvents(Sensor):
    """Counts the events streams have finished with (Faust calls this after the agent body)."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def on_stream_event_out(self, tp: TP, offset: int, stream: StreamT, event: EventT, state: dict[Any, Any] | None = None) -> None:
        self.count += 1


def agent_plane(data_dir: Path, **settings: Any) -> ControlPlane:
    """The plane of one worker on the memory store, publishing into a `RecordingProducer` (``plane.app.producer``)."""
    plane = build_plane(replace(Settings(broker=NO_BROKER, store="memory://", data_dir=data_dir), **settings))
    producer = RecordingProducer(plane.app)
    plane.app.producer = producer
    plane.batch_producer = RecordingBatchProducer(producer)
    return plane


def recorder(plane: ControlPlane) -> RecordingProducer:
    producer = plane.app.producer
    assert isinstance(producer, RecordingProducer), "build the plane with agent_plane()"
    return producer


def sent(plane: ControlPlane, topic: Any = None) -> list[Sent]:
    """What the plane's agents sent to ``topic`` (a topic of ``plane.topics``, or a topic name), or to any topic."""
    producer = recorder(plane)
    if topic is None:
        return list(producer.sent)
    return producer.to(topic if isinstance(topic, str) else topic.get_topic_name())


@dataclass
class AgentUnderTest:
    """One agent under ``test_context()``; ``put`` delivers a message and waits for the agent to finish it."""

    wrapper: Any  # faust's AgentTestWrapper
    processed: ProcessedEvents

    async def put(
        self,
        value: bytes | None,
        key: bytes | None = None,
        timestamp: float | None = None,
        offset: int | None = None,
        headers: dict[str, bytes] | None = None,
    ) -> None:
        """A message as the broker delivers it to the agent: undecoded key and value (and ``headers``),
        on partition 0 at ``offset`` (by default the one after the last put's, from 0), at
        ``timestamp`` (epoch seconds; now when None). Putting an offset again is a redelivery, as after a crash."""
        if offset is not None:
            self.wrapper.sent_offset = offset
        target = self.processed.count + 1
        await self.wrapper.put(value, key=key, timestamp=timestamp, headers=headers)
        await self.settle(target)

    async def put_batch(self, values: list[bytes], key: bytes | None = None) -> None:
        """Messages delivered at once, on partition 0 at the offsets after the last put's, so that
        the agent takes them in one batch; returns once it has finished with them all."""
        target = self.processed.count + len(values)
        for value in values:
            await self.wrapper.put(value, key=key, wait=False)
        await self.settle(target)

    async def settle(self, count: int) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + SETTLE_TIMEOUT_S
        while self.processed.count < count:
            self.raise_crash()
            if loop.time() > deadline:
                raise TimeoutError(f"the agent finished {self.processed.count} of {count} messages within {SETTLE_TIMEOUT_S}s")
            await asyncio.sleep(0)
        self.raise_crash()

    def raise_crash(self) -> None:
        reason = self.wrapper._crash_reason
        if reason is not None:
            raise AssertionError(f"agent {self.wrapper.name} crashed: {reason!r}") from reason


@asynccontextmanager
async def running(plane: ControlPlane, name: str) -> AsyncIterator[AgentUnderTest]:
    """The agent registered as ``name`` on ``plane.app``, running under ``agent.test_context()``."""
    processed = ProcessedEvents()
    plane.app.sensors.add(processed)
    try:
        async with plane.app.agents[name].test_context() as wrapper:
            under_test = AgentUnderTest(wrapper, processed)
            yield under_test
            under_test.raise_crash()
    finally:
        plane.app.sensors.remove(processed)
        close_idle_consumer(plane.app)


def close_idle_consumer(app: AppT) -> None:
    """Tables ask the app's consumer for partition counts, which creates it (never started) with a
    thread whose event loop nothing else closes."""
    consumer = getattr(app, "_consumer", None)
    thread_loop = getattr(getattr(consumer, "_thread", None), "thread_loop", None)
    if thread_loop is not None and not thread_loop.is_running():
        thread_loop.close()
