"""The job-state agent: folds `events` into the `jobs` table, whose changelog is `job-states`, and
each new job's spec into the `job-specs` table, whose changelog is `job-specs`.

Writing the table is publishing: the compacted `job-states` topic is the table's changelog, so
every job state reaches external consumers with one message; a job's spec is published once, as
the bytes its JobSubmitted event carried (read keeping them: `schemas.codec.Encoded`), and copied
into its lease commands the same way, never encoded again. The agent also forwards what each
change means downstream: a job delta to `scheduler-feed` when the scheduler's view changed
(`streams.scheduler.feed`), a command to `executor-commands` when a run starts or must stop
(`streams.scheduler.commands`), and job-set actions (an event with no job id) to `scheduler-feed`.

It works in batches (DESIGN.md, "The hot path works in batches"): `streams.agents.batches` hands it the messages
waiting, up to `BATCH_MAX_MESSAGES` or what arrived within `BATCH_WITHIN_S`; the pure fold runs
over all of them, then the batch's changed jobs (each one's last between job-set actions, written
straight as feed rows) go to the feed as few `Changes` records, in order, and its commands (less the
leases of runs that ended within the part: `ended_lease`) in one produce batch per partition, with the
batch's job index rows and new specs, each table in one `TableBatch`; once the broker has them all, its
job states (each job's last) go to `jobs`; a batch of more than `PART_MAX_EVENTS` job events does so in
parts, with a turn of the event loop between them
(`REFOLD_PART_MAX_EVENTS` while a restored log is refolded; then into empty tables the fold runs in a child
process and the agent writes what it gives back: `streams.agents.refold_child`).
A per-message Faust write and send cost 90-230 us each; a batched one about 3 us.

All the logic is the pure fold in `streams.scheduler.fold` (over `streams.domain.jobs`). A message it cannot decode or an event
the state machine refuses is logged and skipped: one bad message must not stop the fold for every
other job.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from schemas.codec import SchemaError, encode
from streams.agents.batches import batches
from streams.domain.job_index import Position
from streams.domain.states import RUN_TERMINAL
from streams.scheduler import feed
from streams.scheduler.fold import MAX_CHANGES_PER_RECORD, Folded, apply_sequence, message_rng
from streams.tables.batched import Outbox
from streams.tables.jobs import PendingWrites, read_sequence

if TYPE_CHECKING:
    from collections.abc import Iterator

    from faust.types import Message

    from streams.plane import ControlPlane
    from streams.tables.jobs import JobStore

log = logging.getLogger(__name__)

BATCH_MAX_MESSAGES = 500
BATCH_WITHIN_S = 0.005
# Job events folded before what they give is sent and written (`FoldedPart`): a part holds the event
# loop ~0.34 s on a busy 2-core machine (py-spy on bench/ui.py's fill: ~0.34 ms a job event), and each
# costs a few milliseconds more than one batch would.
PART_MAX_EVENTS = 1_000
# While a restored log is refolded (streams/archive/refold.py) nothing waits on the event loop for
# long: reads are not current and scheduling is held. Parts of a wave's events or more fold each
# job's events together (bench/restore.py's waves are ~600 events): a job's state, index row and
# feed delta are written once, not once a part, and each part's round trips to the broker are
# shared by more events (bench/fold.py's refold: ~40 -> ~34 us per event from 1,000 to 20,000).
REFOLD_PART_MAX_EVENTS = 10_000
# Messages a batch takes while a restored log is refolded in the child process (`refold_child`): the child
# idles while the worker writes a batch's last parts and takes the next batch, once a batch (~100 events a
# message in bench/restore.py's log: 20 parts, not 5). Batches of 5,000 left it idle about as long in all (measured
# before it gave its parts as it folded them) and held ~45 MiB more in the worker and ~70 MiB more in the child.
REFOLD_BATCH_MAX_MESSAGES = 2_000
# Jobs the refold's child may hold: it keeps every job it made in memory (states, specs and index rows, ~1.4 KB a
# job at bench/restore.py's log, bench/README.md), so past this many the worker stops it and folds the rest of the
# log itself, from the tables the child's parts were written to (as after an agent restarted mid-refold).
REFOLD_CHILD_MOST_JOBS = 1_000_000


def register(plane: ControlPlane) -> None:
    from streams.agents.refold_child import RefoldChild, RefoldedPart  # it folds with this module's PartFold

    jobs, producer = plane.jobs, plane.batch_producer
    feed_topic = plane.topics.scheduler_feed.get_topic_name()
    commands_topic = plane.topics.executor_commands.get_topic_name()

    async def write(part: FoldedPart, writes: PendingWrites) -> None:
        """Send what the part forwards and write its jobs' index rows and new specs, then write their
        states (``writes``: the part's jobs, handed over by the store).

        What it forwards is acknowledged before its job states are written: were the table written
        first, a worker killed in between would find the jobs folded after its restart, forward
        nothing, and the scheduler would never hear that a job was leased or had ended. The rows and
        specs need only come before the states (a row or spec stored without its state is written
        again, the same, when the part is folded again), so they share the forwarded messages' round
        trip to the broker: two round trips a part, not four. Faust acknowledges the batch's messages
        after the agent's loop body and flushes the producer before it commits their offsets, so a
        batch written in parts is acknowledged whole."""
        records, commands = sent(part)
        outbox = Outbox(producer)
        await outbox.partition(feed_topic, 0, [(None, record) for record in records])
        await outbox.keyed(commands_topic, commands)
        # The rows before the jobs: see streams/tables/job_index.py.
        rows = plane.job_index.write_pending(writes.listed(), producer, part.events, part.requests, listed=plane.refold.caught_up)
        await asyncio.gather(outbox.delivered(), rows, jobs.write_specs(producer, writes))
        await jobs.write_states(producer, writes)
        for outcome, count in part.outcomes.items():
            plane.metrics.events.labels(outcome).inc(count)
        plane.refold.folded_batch(part.messages, part.changes)

    async def write_refolded(parts: Sequence[RefoldedPart], messages: Sequence[Message]) -> None:
        """`write` of consecutive parts the refold's child folded and encoded (`streams.agents.refold_child`), in the
        same order, written as one: each table's puts in one batch (a job in two of them written once, as it was
        left last), their forwarded messages in one round trip to the broker."""
        outbox = Outbox(producer)
        await outbox.partition(feed_topic, 0, [(None, record) for part in parts for record in part.records])
        await outbox.keyed(commands_topic, [command for part in parts for command in part.commands])
        rows = [row for part in parts for row in part.rows]
        specs = [spec for part in parts for spec in part.specs]
        await asyncio.gather(outbox.delivered(), plane.job_index.write_rows(producer, rows), jobs.write_encoded_specs(producer, specs))
        await jobs.write_encoded_states(producer, [state for part in parts for state in part.states])
        for part in parts:
            for outcome, count in part.outcomes.items():
                plane.metrics.events.labels(outcome).inc(count)
        plane.refold.folded_part(messages, [run for part in parts for run in part.active])

    async def refolded(child: RefoldChild, messages: list[Message]) -> int:
        """Fold a batch in the child and write its parts in order while the child folds the next ones: the parts
        that came while the last were written, together (`write_refolded`): one write for several when the worker
        falls behind its child (in bench/restore.py's runs it kept up: every write took one part, bench/README.md).
        Returns how many jobs the child holds now."""
        child.send(messages)
        at, held = 0, 0
        while parts := await child.parts():
            count = sum(part.messages for part in parts)
            taken, at, held = messages[at : at + count], at + count, parts[-1].held
            await write_refolded(parts, taken)
        return held

    async def written_then(writing: asyncio.Future[None] | None, part: FoldedPart) -> asyncio.Future[None]:
        """Start writing ``part`` once the part before it is written (parts are written in order, one at a time)."""
        if writing is not None:
            await writing
        return asyncio.ensure_future(write(part, jobs.hand_over()))

    @plane.app.agent(plane.topics.events, name="job-state", concurrency=1)
    async def fold(stream: Any) -> None:
        """Each part is written while the next one is folded: the fold lets the event loop turn after each
        message while a write is under way, so its round trips to the broker overlap the fold instead of
        holding it (a refold's worker waited on the broker ~11% of the time, bench/restore.py)."""
        jobs.forget_pending()  # a restarted agent folds again what its failed run had not written
        # A restored log is refolded in a child process while the tables hold nothing else (`refold_child`);
        # started before the first batch, so that its start-up overlaps the worker's.
        child = None if plane.refold.caught_up else RefoldChild(REFOLD_PART_MAX_EVENTS)
        first = True

        def batch_max() -> int:
            return BATCH_MAX_MESSAGES if child is None else REFOLD_BATCH_MAX_MESSAGES

        try:
            async for events in batches(stream, batch_max, BATCH_WITHIN_S, plane.metrics.batch_counter("job-state")):
                if first and child is not None and not jobs.empty():
                    child.stop()  # the tables hold jobs (an agent restarted mid-refold): they are the fold's state
                    child = None
                first = False
                if child is not None:
                    held = await refolded(child, [event.message for event in events])
                    if held > REFOLD_CHILD_MOST_JOBS:
                        log.info("the refold's child holds %d jobs, more than %d: the worker folds the rest", held, REFOLD_CHILD_MOST_JOBS)
                    if plane.refold.caught_up or held > REFOLD_CHILD_MOST_JOBS:
                        child.stop()
                        child = None
                    continue
                await folded(events)
        finally:
            if child is not None:
                child.stop()

    async def folded(events: list[Any]) -> None:
        """Fold a batch in this process, each part written while the next one is folded."""
        folding = PartFold(jobs, PART_MAX_EVENTS if plane.refold.caught_up else REFOLD_PART_MAX_EVENTS)
        writing: asyncio.Future[None] | None = None
        for event in events:
            part = folding.add(event.message)
            if part is not None:
                writing = await written_then(writing, part)
            if writing is not None and not writing.done():
                await asyncio.sleep(0)  # the write goes on; so does everything else waiting on the loop
        part = folding.rest()
        if part is not None:
            writing = await written_then(writing, part)
        if writing is not None:
            await writing


def fold_batch(jobs: JobStore, messages: Sequence[Message], part_max: int | None = None) -> Iterator[FoldedPart]:
    """Fold a batch of `events` messages into ``jobs``, where the job states wait as pending writes
    until the agent writes them, in parts of about ``part_max`` (`PART_MAX_EVENTS`) job events (`PartFold`):
    each part is given before the next one is folded."""
    folding = PartFold(jobs, part_max or PART_MAX_EVENTS)
    for message in messages:
        part = folding.add(message)
        if part is not None:
            yield part
    part = folding.rest()
    if part is not None:
        yield part


@dataclass
class PartFold:
    """A batch's messages folded one at a time into ``jobs``, given back in parts of about ``part_max`` job events."""

    jobs: JobStore
    part_max: int
    part: FoldedPart = field(default_factory=lambda: FoldedPart())
    # The part's jobs' scheduling views as their last change left them (`feed.changed`): dropped with each part,
    # so that it holds no job longer than the part does.
    views: feed.Views = field(default_factory=dict)

    def add(self, message: Message) -> FoldedPart | None:
        """Fold ``message``; the part, once it holds ``part_max`` job events or more."""
        part = self.part
        part.messages.append(message)
        try:
            sequence = read_sequence(message.value)
        except SchemaError as exc:
            part.outcomes["undecodable"] += 1
            log.error("skipping undecodable event message %s[%s]@%s: %s", message.topic, message.partition, message.offset, exc)
            return None
        rng = message_rng(message.topic, message.partition, message.offset)
        part.add(message, sequence, apply_sequence(self.jobs, sequence, rng, message.partition, views=self.views))
        return self.rest() if part.job_events >= self.part_max else None

    def rest(self) -> FoldedPart | None:
        """The part folded so far, if it holds any message."""
        part, self.part, self.views = self.part, FoldedPart(), {}
        return part.done(self.jobs) if part.messages else None


@dataclass
class FoldedPart:
    """What folding some of a batch's messages gave, to be sent and written together: how their
    events went, what they forward, in order (each changed job's last state between job-set actions
    once `done`, `feed.latest_changes`), the executor commands, and where each job's events and each
    job set's requests are on `events` (a job's page reads those records only).

    A batch is written in parts so that the event loop is never held for long: the fold, the
    encoding of what it forwards and the writing of the jobs and their rows run without a pause
    between two awaits, and a batch of 500 submissions of 100 jobs each held every API call and UI
    page of the worker for 2-3 s (bench/ui.py, reads while the fold is busy)."""

    messages: list[Message] = field(default_factory=list)
    outcomes: Counter[str] = field(default_factory=Counter)
    changes: list[feed.Change] = field(default_factory=list)
    commands: list[dict[str, Any]] = field(default_factory=list)
    events: dict[str, list[Position]] = field(default_factory=dict)
    requests: dict[tuple[str, str], list[Position]] = field(default_factory=dict)
    job_events: int = 0

    def add(self, message: Message, sequence: dict[str, Any], folded: Folded) -> None:
        position = (message.partition, message.offset)
        for job_id in folded.named:
            self.events.setdefault(job_id, []).append(position)
        if folded.requests:
            self.requests.setdefault((sequence["queue"], sequence["job_set_id"]), []).append(position)
        self.outcomes.update(folded.outcomes)
        self.changes += folded.changes
        self.commands += folded.commands
        self.job_events += len(sequence["events"])

    def done(self, jobs: JobStore) -> FoldedPart:
        """The part as it is sent: each changed job's last change, and no lease of a run that ended within it."""
        self.changes = feed.latest_changes(self.changes)
        self.commands = [command for command in self.commands if not ended_lease(jobs, command)]
        return self


def ended_lease(jobs: JobStore, command: dict[str, Any]) -> bool:
    """Whether ``command`` leases a run that the job, as the fold left it, holds as ended: its executor ran it
    (and reported its end), or it ended before the executor had it (cancelled, preempted, expired). Sent,
    it would do nothing at best, and at worst (an executor that never had it, or forgot it) start a run the
    log already ended. A part of a refolded log holds most of its jobs' lives: ~90% of its commands were
    such leases, each carrying its job's spec (bench/restore.py); a stop command is always sent."""
    if command["kind"] != "lease":
        return False
    job = jobs.latest(command["job_id"])
    run_id = command["run_id"]
    return job is not None and any(run["run_id"] == run_id and run["state"] in RUN_TERMINAL for run in job["runs"])


def sent(part: FoldedPart) -> tuple[list[bytes], list[tuple[bytes, bytes]]]:
    """What a part of a batch sends: its changes as `Changes` records of at most `MAX_CHANGES_PER_RECORD`
    (each job written straight as its row, `feed.encode_changes`), and its commands as (executor, command) messages."""
    changes = part.changes
    records = [feed.encode_changes(changes[at : at + MAX_CHANGES_PER_RECORD]) for at in range(0, len(changes), MAX_CHANGES_PER_RECORD)]
    return records, [(command["executor"].encode(), encoded_command(command)) for command in part.commands]


def encoded_command(command: dict[str, Any]) -> bytes:
    """The command's message. A lease carries the job's spec, read with its encoding (an Encoded,
    from the event or job-specs), which the writer copies in rather than encoding it again."""
    return encode("executor_command", command, validate_record=False)
