"""The windowed scheduling agent: folds `scheduler-feed` into its index and runs a cycle per tick.

The feed has one partition, so exactly one worker runs this agent's stream at a time; a
standby takes over on a rebalance and rebuilds the index from the `scheduler-index` table
before its first record. Windows are tumbling and closed by tick records that a timer on the
owning worker produces into the feed itself: cycle boundaries, cycle clocks and queue
definitions are on the log, so replaying the feed repeats every cycle.

The agent is thin: `streams.scheduler` decides, this module reads the feed, writes the table and
publishes the events, commands and cycle record a cycle produced. It takes the feed records
waiting (up to `BATCH_MAX_RECORDS`), folds them and runs the cycles among them in order, and
writes the index keys they changed in one `TableBatch` at the end.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from faust.types import TP, TableT

from schemas.codec import encode
from streams.domain import events
from streams.scheduler import feed
from streams.scheduler.config import CycleConfig
from streams.scheduler.cycle import CycleOutcome, run_cycle
from streams.scheduler.index import SchedulerIndex
from streams.tables.batched import TableBatch

if TYPE_CHECKING:
    import faust

    from streams.metrics import Metrics
    from streams.plane import ControlPlane, Topics

log = logging.getLogger(__name__)

# Feed records taken at once: their index writes go to the table in one batch.
BATCH_MAX_RECORDS = 500
BATCH_WITHIN_S = 0.005
# A tick not seen back within this many periods is taken as lost and another is sent.
_TICK_PATIENCE_PERIODS = 10
# Early ticks: at least this long after the last tick, and at least this many times the last
# cycle's own duration, so that cycles never take more than a fifth of the agent's time.
EARLY_TICK_MIN_GAP_S = 0.05
EARLY_TICK_CYCLE_MULTIPLE = 4.0


@dataclass
class EarlyTicks:
    """When to close a window before its period is over: an idle cluster should lease a new job at
    once, not up to a period later, while a loaded one keeps its steady period.

    New work is a queued job reaching the index (a submission or a requeue). The window is closed
    early when new work arrived and the last cycle left no queued job waiting (so there may be
    room), and the gap since the last tick is long enough. The early tick goes through the feed
    like any other, so a replay of the feed still repeats every cycle.
    """

    min_gap_s: float = EARLY_TICK_MIN_GAP_S
    cycle_multiple: float = EARLY_TICK_CYCLE_MULTIPLE
    last_tick_at: float = float("-inf")  # monotonic
    last_cycle_s: float = 0.0
    room: bool = True

    def ticked(self, at: float) -> None:
        self.last_tick_at = at

    def cycled(self, left_waiting: bool, seconds: float) -> None:
        self.room = not left_waiting
        self.last_cycle_s = seconds

    def due(self, new_work: bool, at: float) -> bool:
        gap = max(self.min_gap_s, self.cycle_multiple * self.last_cycle_s)
        return new_work and self.room and at - self.last_tick_at >= gap


@dataclass
class SchedulerState:
    """Per-worker state of the agent; the index is None until (re)built from the table."""

    index: SchedulerIndex | None = None
    tick_sent_at: float | None = None  # monotonic time of the tick in flight
    early: EarlyTicks = field(default_factory=EarlyTicks)


def register(plane: ControlPlane) -> SchedulerState:
    state = SchedulerState()
    app = plane.app
    feed_partition = TP(plane.topics.scheduler_feed.get_topic_name(), 0)

    async def forget_index(*args: Any, **kwargs: Any) -> None:
        state.index = None
        state.tick_sent_at = None

    app.on_partitions_revoked.connect(forget_index)
    app.on_partitions_assigned.connect(forget_index)

    def owner() -> bool:
        return not app.rebalancing and feed_partition in app.assignor.assigned_actives()

    async def send_tick() -> None:
        queues = tuple(feed.queue_info(q) for q in sorted(plane.queues.values(), key=lambda q: q["name"]))
        state.tick_sent_at = time.monotonic()
        state.early.ticked(state.tick_sent_at)
        await plane.topics.scheduler_feed.send(value=feed.encode(feed.Tick(time=int(time.time() * 1000), queues=queues)))

    @app.agent(plane.topics.scheduler_feed, name="scheduler", concurrency=1)
    async def run(stream: Any) -> None:
        async for batch in stream.take_events(BATCH_MAX_RECORDS, within=BATCH_WITHIN_S):
            if state.index is None:
                state.index = rebuild(plane.scheduler_index)
                log.info("scheduler index rebuilt: %d jobs, %d executors", len(state.index.jobs), len(state.index.executors))
            writes = TableBatch(plane.scheduler_index, plane.batch_producer)
            new_work = False
            for event in batch:
                message = event.message
                try:
                    record = feed.decode(message.value)
                except ValueError as exc:
                    log.error("skipping scheduler-feed record at offset %s: %s", message.offset, exc)
                    continue
                if isinstance(record, feed.Tick):
                    state.tick_sent_at = None
                    started = time.perf_counter()
                    outcome = await cycle(state.index, record, message.offset, plane.cycle_config, plane.topics, plane.metrics)
                    state.early.cycled(outcome.left_waiting, time.perf_counter() - started)
                    persist(writes, message.partition, state.index, outcome.changed)
                else:
                    new_work = new_work or brings_work(record)
                    persist(writes, message.partition, state.index, state.index.apply(record))
            await writes.write()
            early = plane.settings.early_ticks and state.tick_sent_at is None and state.early.due(new_work, time.monotonic())
            if early and owner():
                await send_tick()

    @app.timer(plane.settings.schedule_period_s)
    async def tick() -> None:
        """Close the window, from the worker that owns the feed, one tick in flight at a time."""
        if not owner():
            return
        period = plane.settings.schedule_period_s
        if state.tick_sent_at is not None and time.monotonic() - state.tick_sent_at < _TICK_PATIENCE_PERIODS * period:
            return
        await send_tick()

    return state


def brings_work(record: feed.FeedRecord) -> bool:
    """Whether the record puts a job in the queue (a submission or a requeue)."""
    if isinstance(record, feed.Changes):
        return any(isinstance(change, feed.JobDelta) and change.state == "queued" for change in record.records)
    return isinstance(record, feed.JobDelta) and record.state == "queued"


async def cycle(index: SchedulerIndex, tick: feed.Tick, offset: int, config: CycleConfig, topics: Topics, metrics: Metrics) -> CycleOutcome:
    """Run the cycle and publish what it decided; the index keys it changed are the caller's to persist."""
    started = time.perf_counter()
    outcome = run_cycle(index, tick, offset, config)
    decided = time.perf_counter() - started
    for sequence in outcome.sequences:
        await send_sequence(topics.events, sequence)
    for command in outcome.commands:
        await topics.executor_commands.send(key=command["executor"], value=encode("executor_command", command, validate_record=False))
    for record in outcome.records:
        await send_sequence(topics.events, record)
    metrics.cycles.inc()
    metrics.cycle_seconds.observe(decided)
    metrics.index_jobs.set(len(index.jobs))
    for kind in ("leased", "preempted", "requeued", "ended"):
        metrics.decisions.labels(kind).inc(getattr(outcome, kind))
    if outcome.records:
        log.info(
            "cycle %s at offset %s: %.3f s, %d leased, %d preempted, %d requeued, %d ended, %d jobs in index",
            outcome.cycle_id,
            offset,
            decided,
            outcome.leased,
            outcome.preempted,
            outcome.requeued,
            outcome.ended,
            len(index.jobs),
        )
    return outcome


async def send_sequence(topic: faust.TopicT, sequence: dict[str, Any]) -> None:
    key = events.sequence_key(sequence["queue"], sequence["job_set_id"])
    await topic.send(key=key, value=encode("event_sequence", sequence, validate_record=False))


def rebuild(table: TableT) -> SchedulerIndex:
    index = SchedulerIndex()
    index.load((key, value) for key, value in table.items())
    return index


def persist(writes: TableBatch, partition: int, index: SchedulerIndex, keys: list[str]) -> None:
    """The index's current value of each key into the batch's writes (a key the index no longer holds is deleted)."""
    for key in dict.fromkeys(keys):
        value = index.dump(key)
        if value is not None:
            writes.put(partition, key, value)
        else:
            writes.delete(partition, key)
