"""The executor process: commands in, run events and heartbeats out, one backend doing the work.

Delivery is at least once. A batch of commands is acted on, the events it caused are produced,
and only then are the offsets committed, so a crash replays commands rather than losing them;
backends launch and kill idempotently by run id. On start the backend's runs found from an
earlier life whose state may not be on the log are reported (again, at worst: events are
idempotent downstream) before anything is consumed.
Every backend sits behind ``executor.refusals``: a lease that cannot be right (its run id held
for another job, or its job already reported finished) is answered at once with the run returned.

Commands are read by manual assignment of every partition of the commands topic, with the
executor's group id used only to commit offsets: there is one executor per id, so a group
would add nothing but a join (about the rebalance timeout on Tansu) at every start and restart.
Only commands keyed by this executor's id are acted on.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import signal
import time
from collections.abc import Awaitable, Callable

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.structs import ConsumerRecord

from executor.backend import Backend, Lease, RunStatus
from executor.commands import CommandError, Kill, parse_command
from executor.events import Change, event_sequences
from executor.observed import ExecutorMetrics
from executor.refusals import RefusingBackend
from executor.reports import report_record
from schemas.codec import SchemaError, decode, encode
from streams.config import MAX_MESSAGE_BYTES, Settings
from streams.domain.ids import new_id
from streams.kafka import kafka_clients
from streams.topics import ensure_topics, use_configured_framing

log = logging.getLogger(__name__)

FLUSH_INTERVAL_S = 0.05
_POLL_MS = 200
_MAX_RECORDS = 1000
_RETRY_S = 1.0


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


def ready_line(executor_id: str) -> str:
    """What the executor prints once it consumes commands and has reported; ops/executor.py waits for it."""
    return f"executor {executor_id} ready"


class Executor:
    def __init__(
        self,
        settings: Settings,
        executor_id: str,
        backend: Backend,
        clock_ms: Callable[[], int] = wall_clock_ms,
        flush_interval_s: float = FLUSH_INTERVAL_S,
    ) -> None:
        self.settings = settings
        self.executor_id = executor_id
        self.backend: Backend = RefusingBackend(backend)
        self.metrics = ExecutorMetrics(executor_id)
        self.metrics.watch_runs(self.backend.runs)
        self.clock_ms = clock_ms
        self.flush_interval_s = flush_interval_s
        self._key = executor_id.encode()
        self._changes: list[Change] = []
        self._flush_lock = asyncio.Lock()
        self._stopping = asyncio.Event()
        self.ready = asyncio.Event()  # set once commands are consumed and the first report is out
        self._rng = random.Random(os.urandom(16))
        self._producer: AIOKafkaProducer | None = None
        self._consumer: AIOKafkaConsumer | None = None

    def stop(self) -> None:
        """Ask ``run`` to finish: stop consuming, produce what is pending, leave the runs going."""
        self._stopping.set()

    async def run(self, handle_signals: bool = True) -> None:
        loop = asyncio.get_running_loop()
        if handle_signals:
            for signum in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(signum, self.stop)
        try:
            await ensure_topics(self.settings)
            await asyncio.to_thread(use_configured_framing, self.settings)
            self._producer = kafka_clients(self.settings).producer(max_request_size=MAX_MESSAGE_BYTES, linger_ms=5)
            await self._producer.start()
            try:
                await self._serve()
            finally:
                await self._producer.stop()
        finally:
            if handle_signals:
                for signum in (signal.SIGTERM, signal.SIGINT):
                    loop.remove_signal_handler(signum)

    async def _serve(self) -> None:
        found = await self.backend.start(self._on_change)
        now = self.clock_ms()
        self._changes[:0] = [Change(status, now) for status in found]
        if found:
            log.info("executor %s: %d run(s) found from before, reporting them again", self.executor_id, len(found))
        self._consumer = kafka_clients(self.settings).consumer(
            group_id=f"{self.settings.app_id}-executor-{self.executor_id}",
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            max_partition_fetch_bytes=MAX_MESSAGE_BYTES,
            fetch_max_bytes=MAX_MESSAGE_BYTES,
        )
        tasks: list[asyncio.Task[None]] = []
        try:
            await self._consumer.start()
            await self._assign_all_partitions()
            await self._flush()
            await self._report()
            self.ready.set()
            log.info("executor %s consuming its commands and reporting to pool %s", self.executor_id, self.backend.pool)
            tasks = [
                asyncio.create_task(self._consume(), name="executor-commands"),
                asyncio.create_task(self._every(self.flush_interval_s, self._flush), name="executor-events"),
                asyncio.create_task(self._every(self.settings.executor_report_interval_s, self._report), name="executor-reports"),
            ]
            await self._stopping.wait()
            log.info("executor %s stopping; runs keep going", self.executor_id)
            await tasks[0]  # finishes the batch in hand, commits, and returns
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await self.backend.stop()
            await self._flush()
            await self._consumer.stop()

    def _on_change(self, status: RunStatus) -> None:
        self._changes.append(Change(status, self.clock_ms()))

    async def _assign_all_partitions(self) -> None:
        assert self._consumer is not None
        topic = self.settings.topic("executor-commands")
        while True:
            await self._consumer.topics()  # refreshes metadata: the topic may have just been created
            partitions = self._consumer.partitions_for_topic(topic)
            if partitions:
                break
            await asyncio.sleep(0.2)
        assigned = [TopicPartition(topic, p) for p in sorted(partitions)]
        self._consumer.assign(assigned)
        for tp in assigned:  # waits for the committed offsets (or the earliest) to be known
            await self._consumer.position(tp)

    async def _consume(self) -> None:
        assert self._consumer is not None
        while not self._stopping.is_set():
            try:
                batch = await self._consumer.getmany(timeout_ms=_POLL_MS, max_records=_MAX_RECORDS)
                if not batch:
                    continue
                for messages in batch.values():
                    for message in messages:
                        await self._handle(message)
                if await self._flush():
                    await self._consumer.commit()
            except asyncio.CancelledError:
                raise
            except Exception:  # the broker's trouble is transient; the next batch retries
                log.exception("executor %s: consuming commands failed; retrying", self.executor_id)
                await asyncio.sleep(_RETRY_S)

    async def _handle(self, message: ConsumerRecord) -> None:
        if message.key != self._key:
            return
        try:
            action = parse_command(decode("executor_command", message.value))
        except (SchemaError, CommandError, KeyError, TypeError, ValueError) as exc:
            log.error("skipping bad command %s[%s]@%s: %s", message.topic, message.partition, message.offset, exc)
            return
        self.metrics.commands.labels(self.executor_id, type(action).__name__.lower()).inc()
        try:
            if isinstance(action, Lease):
                await self.backend.launch(action)
            elif isinstance(action, Kill):
                await self.backend.kill(action.run_id, action.grace_period_s, action.outcome)
        except Exception:  # one run's trouble must not stop the others' commands
            log.exception(
                "executor %s: acting on %s for run %s failed",
                self.executor_id,
                type(action).__name__,
                action.run_id,
                extra={"run_id": action.run_id},
            )

    async def _flush(self) -> bool:
        """Produce every pending change; returns whether all of them are on the log.

        A flush once begun is seen through even if its caller is cancelled (the executor stopping
        cancels its periodic flush): cut off after its records went out, its changes would be
        produced again by the last flush, each a second event on the log under a new id."""
        return await asyncio.shield(self._flush_pending())

    async def _flush_pending(self) -> bool:
        assert self._producer is not None
        async with self._flush_lock:
            if not self._changes:
                return True
            changes, self._changes = self._changes, []
            topic = self.settings.topic("events")
            try:
                sent = [
                    await self._producer.send(topic, key=key.encode(), value=encode("event_sequence", sequence, validate_record=False))
                    for key, sequence in event_sequences(changes, self.executor_id, self._new_event_id)
                ]
                await asyncio.gather(*sent)
            except asyncio.CancelledError:
                self._changes[:0] = changes
                raise
            except Exception:  # kept for the next flush; a repeat of what did get out is harmless
                log.exception("executor %s: producing %d run change(s) failed; will retry", self.executor_id, len(changes))
                self._changes[:0] = changes
                return False
            self.backend.reported([change.status for change in changes])
            self.metrics.run_events.labels(self.executor_id).inc(len(changes))
            return True

    async def _report(self) -> None:
        assert self._producer is not None
        nodes = await self.backend.nodes()
        record = report_record(self.executor_id, self.backend.pool, self.clock_ms(), nodes, self.backend.runs())
        value = encode("executor_report", record, validate_record=False)
        await (await self._producer.send(self.settings.topic("executor-reports"), key=self._key, value=value))
        self.metrics.reports.labels(self.executor_id).inc()
        self.metrics.last_report.labels(self.executor_id).set(self.clock_ms() / 1000.0)
        self.metrics.reported_nodes.labels(self.executor_id).set(len(nodes))

    async def _every(self, interval_s: float, action: Callable[[], Awaitable[object]]) -> None:
        while True:
            await asyncio.sleep(interval_s)
            try:
                await action()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("executor %s: %s failed", self.executor_id, getattr(action, "__name__", action))

    def _new_event_id(self, now_ms: int) -> str:
        return new_id(now_ms, self._rng)
