"""The windowed scheduling agent: folds `scheduler-feed` into its index and runs a cycle per tick.

The feed has one partition, so exactly one worker runs this agent's stream at a time; a
standby takes over on a rebalance and rebuilds the index from the `scheduler-index` table
before its first record. Windows are tumbling and closed by tick records that a timer on the
owning worker produces into the feed itself: cycle boundaries, cycle clocks and queue
definitions are on the log, so replaying the feed repeats every cycle. The owner runs the cycle
of its own tick as soon as the broker has taken it, when the index has folded every feed record
before the tick's offset (the same inputs reading it back would give, a fetch wait later).

A cycle is committed once (Armada's scheduler, likewise, catches up on the log before it decides
as a new leader): its outcome is appended to the feed as one `Committed` record before any of it
is published; the index stores the feed offset it has folded up to with every write, and the last
cycle it published as soon as it has. A worker that takes over rebuilds the index, skips what it
already folded, runs the cycles of the ticks it reads again (the same inputs, so the same
decisions) without publishing them, and publishes a committed outcome again only where the owner
before it may have stopped half-way (its readers recognise the repeated events by their ids). A
cycle that was never committed is committed by the new owner when it reads its own first tick. So
no executor acts on a cycle that was not committed whole, and no cycle is recorded twice differently.
A worker whose broker fails it half-way through a batch or a cycle takes the feed over from itself:
it drops the index and folds the batch again on the index rebuilt from its table (`failed`).

The agent is thin: `streams.scheduler` decides, this module reads the feed, writes the table and
publishes the events, commands and cycle record a cycle produced. It takes the feed records
waiting (up to `BATCH_MAX_RECORDS`), folds them and runs the cycles among them in order, and
writes the index keys they changed in one `TableBatch` at the end.

A cycle runs on a thread, not on the event loop: over 100,000 queued jobs it takes about a second,
which on the loop would hold up every API call, UI page and fold batch of the worker for as long.
It is safe there because nothing else writes the index meanwhile: only this agent folds the feed
into it, and it awaits the cycle before its next record. The API only reads it (`ClusterView`),
and a cycle changes entries, never which jobs the index holds, so those reads never fail midway.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from faust.types import TP, TableT

from streams.agents.batches import batches
from streams.scheduler import feed
from streams.scheduler.commit import committed as committed_record
from streams.scheduler.config import CycleConfig
from streams.scheduler.cycle import CycleOutcome, run_cycle
from streams.scheduler.index import JOB_KEY_PREFIX, OFFSET_KEY, PUBLISHED_KEY, SchedulerIndex
from streams.tables.batched import BatchProducer, Outbox, TableBatch

if TYPE_CHECKING:
    from streams.metrics import Metrics
    from streams.plane import ControlPlane, Topics

log = logging.getLogger(__name__)

# Feed records taken at once: their index writes go to the table in one batch.
BATCH_MAX_RECORDS = 500
BATCH_WITHIN_S = 0.005
# A tick not seen back within this many periods is taken as lost and another is sent.
_TICK_PATIENCE_PERIODS = 10
# A feed batch that failed is folded again after this long, doubled at each failure up to the most.
RETRY_FIRST_S = 0.1
RETRY_MOST_S = 5.0
# Early ticks: at least this long after the last tick, and at least this many times the last
# cycle's own duration (its CPU time: not broker round trips, nor waits for a core that another
# agent or process held), so that cycles never take more than a fifth of the agent's time.
EARLY_TICK_MIN_GAP_S = 0.05
EARLY_TICK_CYCLE_MULTIPLE = 4.0


@dataclass
class EarlyTicks:
    """When to close a window before its period is over: an idle cluster should lease a new job at
    once, not up to a period later, while a loaded one keeps its steady period.

    New work is a queued job reaching the index (a submission or a requeue). It is waiting from the
    feed record that brings it until a tick after that record has run its cycle, so work that comes
    too soon after a tick, or while one is in flight, is not forgotten: it gets its own early tick
    once the gap has passed. The window is closed early when work is waiting, the last cycle left
    no queued job waiting (so there may be room), and the gap since the last tick is long enough.
    The early tick goes through the feed like any other, so a replay of the feed still repeats
    every cycle.
    """

    min_gap_s: float = EARLY_TICK_MIN_GAP_S
    cycle_multiple: float = EARLY_TICK_CYCLE_MULTIPLE
    last_tick_at: float = float("-inf")  # monotonic
    last_cycle_s: float = 0.0
    room: bool = True
    waiting: bool = False

    def ticked(self, at: float) -> None:
        self.last_tick_at = at

    def work(self) -> None:
        """A feed record brought new work: the next tick's cycle is the first to see it."""
        self.waiting = True

    def cycled(self, left_waiting: bool, seconds: float) -> None:
        """A tick's cycle ran over everything before it on the feed, the waiting work too."""
        self.room = not left_waiting
        self.last_cycle_s = seconds
        self.waiting = False

    def delay(self, at: float) -> float | None:
        """Seconds until an early tick is due (0: now), or None while none is (no work waiting, or no room)."""
        if not (self.waiting and self.room):
            return None
        gap = max(self.min_gap_s, self.cycle_multiple * self.last_cycle_s)
        return max(0.0, self.last_tick_at + gap - at)


@dataclass
class SchedulerState:
    """Per-worker state of the agent; the index is None until (re)built from the table.

    ``owner`` is the token this worker puts in its ticks since it last got (or lost) the feed.
    Until the agent reads one of them back it is catching up with what earlier owners appended:
    it runs their ticks' cycles to keep the index what the log implies, but publishes nothing
    of its own, for their outcomes may be committed further on (``uncommitted`` holds them until
    then). At its own first tick, whatever is still uncommitted was never published, and is
    committed and published before the tick's own cycle."""

    index: SchedulerIndex | None = None
    owner: str = field(default_factory=lambda: uuid.uuid4().hex)
    live: bool = False
    # The owner token under which the configuration was last put on the feed.
    configured: str = ""
    uncommitted: dict[int, feed.Committed] = field(default_factory=dict)
    tick_sent_at: float | None = None  # monotonic time of the tick in flight
    # Held while the index is folded or a cycle runs on it: by the agent for a batch, or by a tick run
    # ahead of the feed (`run_ahead`), so that only one of them changes the index at a time.
    folding: asyncio.Lock = field(default_factory=asyncio.Lock)
    early: EarlyTicks = field(default_factory=EarlyTicks)
    # Waits out the gap after the last tick, then sends the early tick due (`EarlyTicks.delay`).
    early_timer: asyncio.Future[None] | None = None

    def forget(self) -> None:
        self.index, self.live, self.uncommitted, self.tick_sent_at = None, False, {}, None
        self.owner = uuid.uuid4().hex
        self.early = EarlyTicks()
        if self.early_timer is not None:
            self.early_timer.cancel()
            self.early_timer = None


@dataclass
class Publisher:
    """Where a cycle's outcome goes: first the record committing it, onto the feed, then its
    messages, each step acknowledged before the next."""

    producer: BatchProducer
    topics: Topics

    async def commit(self, record: feed.Committed) -> None:
        outbox = Outbox(self.producer)
        await outbox.partition(self.topics.scheduler_feed.get_topic_name(), 0, [(None, feed.encode(record))])
        await outbox.delivered()

    async def publish(self, record: feed.Committed) -> None:
        outbox = Outbox(self.producer)
        await outbox.keyed(self.topics.events.get_topic_name(), record.events)
        await outbox.keyed(self.topics.executor_commands.get_topic_name(), record.commands)
        await outbox.delivered()


def register(plane: ControlPlane) -> SchedulerState:
    state = SchedulerState()
    app = plane.app
    feed_partition = TP(plane.topics.scheduler_feed.get_topic_name(), 0)
    publisher = Publisher(plane.batch_producer, plane.topics)

    async def forget_index(*args: Any, **kwargs: Any) -> None:
        state.forget()

    app.on_partitions_revoked.connect(forget_index)
    app.on_partitions_assigned.connect(forget_index)

    def holds_feed() -> bool:
        return not app.rebalancing and feed_partition in app.assignor.assigned_actives()

    def owner() -> bool:
        """This worker closes the windows: it owns the feed (and, after a restore, the log is refolded: streams/archive/refold.py)."""
        return holds_feed() and plane.refold.may_schedule()

    async def send_tick() -> None:
        # In flight from now on, so that the timer and the agent never both send one.
        state.tick_sent_at = time.monotonic()
        state.early.ticked(state.tick_sent_at)
        records: list[tuple[bytes | None, bytes | None]] = []
        if state.configured != state.owner:
            # Before the first tick of this ownership: the cycles that follow are decided with it.
            configuration = feed.Configuration(plane.configuration.hash, plane.configuration.resolved)
            records.append((None, feed.encode(configuration)))
            state.configured = state.owner
        queues = tuple(feed.queue_info(q) for q in sorted(plane.queues.values(), key=lambda q: q["name"]))
        tick = feed.Tick(time=int(time.time() * 1000), queues=queues, owner=state.owner)
        records.append((None, feed.encode(tick)))
        try:
            first = await (await plane.batch_producer.send_partition(feed_partition.topic, 0, records))
        except Exception:
            state.tick_sent_at = None  # not in flight: the next period sends another
            raise
        await run_ahead(tick, first + len(records) - 1)

    async def run_ahead(tick: feed.Tick, offset: int) -> None:
        """Run the cycle of this worker's own tick at ``offset`` now, if the index has folded every
        feed record before it: its inputs are then exactly what reading the tick back would give, a
        fetch wait later (the broker holds a fetch for its whole wait). Reading it back skips it then,
        as a tick folded already; otherwise (records before it not folded yet) it runs when read."""
        async with state.folding:
            index = state.index
            if index is None or not (state.live and owner()) or tick.owner != state.owner or offset != index.offset + 1:
                return
            plane.metrics.ticks_run_ahead.inc()
            writes = TableBatch(plane.scheduler_index, plane.batch_producer)
            try:
                await cycle_of(writes, index, tick, offset, feed_partition.partition)
                index.offset = offset
                await close(writes, index)
            except Exception:
                # The tick is on the feed: read back, it runs again on the index rebuilt from the table.
                failed()
                raise

    async def cycle_of(writes: TableBatch, index: SchedulerIndex, record: feed.Tick, offset: int, partition: int) -> None:
        """The tick's cycle run (`tick`), its CPU time noted for the early ticks, and the index keys it changed into ``writes``."""
        outcome, spent = await tick(record, offset)
        state.early.cycled(outcome.left_waiting, spent)
        persist(writes, partition, index, outcome.changed)

    async def close(writes: TableBatch, index: SchedulerIndex) -> None:
        """Write a batch's index changes, with the feed offset folded up to."""
        persist(writes, 0, index, [*index.close_batch(), OFFSET_KEY])
        count_writes(plane.metrics, writes)
        await writes.write()

    def failed() -> None:
        """A cycle or fold failed half-way: what the index holds is no longer what its table and the
        feed imply (a cycle's decisions taken, its commit or index write not made). The index is
        dropped and rebuilt from the table at the next fold, which folds the feed again from the
        offset stored there, under a new owner token: as a worker that took the feed over, it runs
        those ticks again without publishing and commits what was not committed at its own first tick."""
        plane.metrics.scheduler_failures.inc()
        state.forget()

    @app.agent(plane.topics.scheduler_feed, name="scheduler", concurrency=1)
    async def run(stream: Any) -> None:
        async for batch in batches(stream, BATCH_MAX_RECORDS, BATCH_WITHIN_S, plane.metrics.batch_counter("scheduler")):
            await fold_until_done(batch)
            await early_tick()

    async def fold_until_done(batch: list[Any]) -> None:
        """Fold the batch, again and again after a pause if it fails (the broker may be away for a
        while). Raising would lose it: the batch is acknowledged when the loop body ends, and Faust
        restarts a crashed agent on the records after it, so the index would miss its records.
        It is folded again only while this worker holds the feed, so that a worker that lost it
        meanwhile writes nothing beside the new owner; should the feed come back, the batch is
        folded then (its records are the next ones after the table's stored offset)."""
        pause = RETRY_FIRST_S
        while True:
            async with state.folding:
                try:
                    await fold(batch)
                    return
                except Exception:
                    failed()
                    log.exception(
                        "scheduler-feed batch at offsets %d-%d not folded; again in %.1f s or once the feed is back",
                        batch[0].message.offset,
                        batch[-1].message.offset,
                        pause,
                    )
            await asyncio.sleep(pause)
            pause = min(2 * pause, RETRY_MOST_S)
            while not holds_feed():
                await asyncio.sleep(pause)

    async def fold(batch: list[Any]) -> None:
        """Fold the batch's feed records into the index and run the cycles of its ticks, in order."""
        if state.index is None:
            state.index = rebuild(plane.scheduler_index)
            log.info(
                "scheduler index rebuilt: %d jobs, %d executors, feed folded up to offset %d",
                len(state.index.jobs),
                len(state.index.executors),
                state.index.offset,
            )
        index = state.index
        writes = TableBatch(plane.scheduler_index, plane.batch_producer)
        for event in batch:
            message = event.message
            if message.offset <= index.offset:
                continue  # folded before the index was last stored, or a tick run ahead (`run_ahead`)
            try:
                record = feed.decode(message.value or b"")  # a tombstone is not a record either
            except ValueError as exc:
                log.error("skipping scheduler-feed record at offset %s: %s", message.offset, exc)
                record = None
            if isinstance(record, feed.Tick):
                await cycle_of(writes, index, record, message.offset, message.partition)
            elif isinstance(record, feed.Committed):
                await committed(record)
            elif isinstance(record, feed.Configuration):
                pass  # for replays: this worker decides with its own
            elif record is not None:
                if brings_work(record):
                    state.early.work()
                persist(writes, message.partition, index, index.apply(record))
            index.offset = message.offset
        await close(writes, index)

    async def early_tick() -> None:
        """Close the window now if work is waiting and the gap has passed, or arm a timer for when it will have."""
        if not plane.settings.early_ticks or state.tick_sent_at is not None or state.early_timer is not None or not owner():
            return
        delay = state.early.delay(time.monotonic())
        if delay is None:
            return
        if delay == 0:
            await tick_now()
            return

        async def after_gap() -> None:
            await asyncio.sleep(delay)
            state.early_timer = None
            await early_tick()

        state.early_timer = asyncio.ensure_future(after_gap())

    async def tick_now() -> None:
        """Send a tick and run it ahead. A broker error is logged, not raised: from the timer it would
        stop the worker (a Faust timer's error crashes the app), from the agent the agent, and the
        next period's tick tries again anyway."""
        try:
            await send_tick()
        except Exception:
            log.exception("tick not sent or its cycle not committed; the next period's tick tries again")

    async def tick(record: feed.Tick, offset: int) -> tuple[CycleOutcome, float]:
        """Run the tick's cycle; commit and publish its outcome unless still catching up. Returns the
        outcome and the cycle's CPU seconds (`cycle`)."""
        assert state.index is not None
        if record.owner == state.owner:
            state.tick_sent_at = None
            if not state.live:
                state.live = True
                for earlier in sorted(state.uncommitted):
                    log.info("committing the cycle of the tick at offset %d, which no earlier owner committed", earlier)
                    await commit_and_publish(state.uncommitted[earlier])
                state.uncommitted.clear()
        outcome, spent = await asyncio.to_thread(cycle, state.index, record, offset, plane.cycle_config, plane.metrics)
        commit = committed_record(offset, outcome)
        if commit is None:
            return outcome, spent
        if state.live:
            await commit_and_publish(commit)
        else:
            state.uncommitted[offset] = commit
        return outcome, spent

    async def commit_and_publish(record: feed.Committed) -> None:
        await publisher.commit(record)
        await published(record)

    async def published(record: feed.Committed) -> None:
        """Publish ``record``'s messages, then store at once that they were."""
        assert state.index is not None
        await publisher.publish(record)
        state.index.published = record.tick
        marker = TableBatch(plane.scheduler_index, plane.batch_producer)
        persist(marker, 0, state.index, [PUBLISHED_KEY])
        count_writes(plane.metrics, marker)
        await marker.write()

    async def committed(record: feed.Committed) -> None:
        """A cycle committed on the feed: publish it again if its owner may not have finished."""
        assert state.index is not None
        ran = state.uncommitted.pop(record.tick, None)
        if ran is not None and ran != record:
            plane.metrics.cycles_diverged.inc()
            log.error("the cycle of the tick at offset %d ran again differently from its committed record %s", record.tick, record.cycle_id)
        if record.tick > state.index.published:
            await published(record)

    @app.timer(plane.settings.schedule_period_s)
    async def timer() -> None:
        """Close the window, from the worker that owns the feed, one tick in flight at a time."""
        if not owner():
            return
        period = plane.settings.schedule_period_s
        if state.tick_sent_at is not None and time.monotonic() - state.tick_sent_at < _TICK_PATIENCE_PERIODS * period:
            return
        await tick_now()

    return state


def brings_work(record: feed.FeedRecord) -> bool:
    """Whether the record puts a job in the queue (a submission or a requeue)."""
    if isinstance(record, feed.Changes):
        return any(isinstance(change, feed.JobDelta) and change.state == "queued" for change in record.records)
    return isinstance(record, feed.JobDelta) and record.state == "queued"


def cycle(index: SchedulerIndex, tick: feed.Tick, offset: int, config: CycleConfig, metrics: Metrics) -> tuple[CycleOutcome, float]:
    """Run the cycle and count what it decided; publishing it and persisting the index keys it changed are the caller's.
    Also returns the CPU seconds the cycle took (its thread's, run in one): its own cost, without the time it
    waited for the interpreter or a core while other agents or processes ran (`EarlyTicks.cycled`)."""
    started, cpu = time.perf_counter(), time.thread_time()
    outcome = run_cycle(index, tick, offset, config)
    decided, spent = time.perf_counter() - started, time.thread_time() - cpu
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
    return outcome, spent


def rebuild(table: TableT) -> SchedulerIndex:
    index = SchedulerIndex()
    index.load((key, value) for key, value in table.items())
    return index


def count_writes(metrics: Metrics, writes: TableBatch) -> None:
    keys = writes.keys()
    metrics.index_writes.inc(len(keys))
    metrics.index_job_writes.inc(sum(1 for key in keys if key.startswith(JOB_KEY_PREFIX)))


def persist(writes: TableBatch, partition: int, index: SchedulerIndex, keys: list[str]) -> None:
    """The index's current value of each key into the batch's writes (a key the index no longer holds is deleted)."""
    for key, value in index.writes(keys):
        if value is not None:
            writes.put(partition, key, value)
        else:
            writes.delete(partition, key)
