"""The job-state agent: folds `events` into the `jobs` table, whose changelog is `job-states`.

Writing the table is publishing: the compacted `job-states` topic is the table's changelog, so
every job state reaches external consumers with one message. The agent also forwards what each
change means downstream: a job delta to `scheduler-feed` when the scheduler's view changed
(`streams.scheduler.feed`), a command to `executor-commands` when a run starts or must stop
(`streams.scheduler.commands`), and job-set actions (an event with no job id) to `scheduler-feed`.

It works in batches (DESIGN.md, "The hot path works in batches"): Faust hands it the messages
waiting, up to `BATCH_MAX_MESSAGES` or what arrived within `BATCH_WITHIN_S`; the pure fold runs
over all of them, then the batch's deltas (each job's last between job-set actions) go to the
feed as few `Changes` records, in order, and its commands in one produce batch per partition, and
once the broker has them all, the batch's job states (each job's last) go to the table in one
`TableBatch`; a batch of more than `PART_MAX_EVENTS` job events does so in parts, with a turn of
the event loop between them.
A per-message Faust write and send cost 90-230 us each; a batched one about 3 us.

All the logic is the pure fold in `streams.scheduler.fold` (over `streams.domain.jobs`). A message it cannot decode or an event
the state machine refuses is logged and skipped: one bad message must not stop the fold for every
other job.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from schemas.codec import SchemaError, decode, encode, splice
from streams.domain.job_index import Position
from streams.scheduler import feed
from streams.scheduler.fold import Folded, apply_sequence, feed_records, message_rng
from streams.tables.batched import Outbox

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
# The Avro type of a job's spec, in job states and lease commands alike.
SPEC_TYPE = "flotilla.JobSubmitted"


def register(plane: ControlPlane) -> None:
    jobs, producer = plane.jobs, plane.batch_producer
    feed_topic = plane.topics.scheduler_feed.get_topic_name()
    commands_topic = plane.topics.executor_commands.get_topic_name()

    async def write(part: FoldedPart) -> None:
        """Send what the part forwards, then write its jobs' rows and states.

        What it forwards is acknowledged before its job states are written: were the table written
        first, a worker killed in between would find the jobs folded after its restart, forward
        nothing, and the scheduler would never hear that a job was leased or had ended. Faust
        acknowledges the batch's messages after the agent's loop body and flushes the producer
        before it commits their offsets, so a batch written in parts is acknowledged whole."""
        outbox = Outbox(producer)
        await outbox.partition(feed_topic, 0, [(None, feed.encode(record)) for record in feed_records(part.feed)])
        commands = [(c["executor"].encode(), encoded_command(jobs, c)) for c in part.commands]
        await outbox.keyed(commands_topic, commands)
        await outbox.delivered()
        # The rows before the jobs: see streams/tables/job_index.py.
        await plane.job_index.write_pending(jobs, producer, part.events, part.requests)
        await jobs.write_pending(producer)
        for outcome, count in part.outcomes.items():
            plane.metrics.events.labels(outcome).inc(count)
        plane.refold.folded_batch(part.messages, part.feed)

    @plane.app.agent(plane.topics.events, name="job-state", concurrency=1)
    async def fold(stream: Any) -> None:
        async for events in stream.take_events(BATCH_MAX_MESSAGES, within=BATCH_WITHIN_S):
            for part in fold_batch(jobs, [event.message for event in events]):
                await write(part)
                await asyncio.sleep(0)  # a turn of the event loop for everything else


def fold_batch(jobs: JobStore, messages: list[Message]) -> Iterator[FoldedPart]:
    """Fold a batch of `events` messages into ``jobs``, where the job states wait as pending writes
    until the agent writes them, in parts of about `PART_MAX_EVENTS` job events: each part is given
    before the next one is folded, so the agent writes it, and lets the event loop turn, in between."""
    part = FoldedPart()
    for message in messages:
        part.messages.append(message)
        try:
            sequence = decode("event_sequence", message.value)
        except SchemaError as exc:
            part.outcomes["undecodable"] += 1
            log.error("skipping undecodable event message %s[%s]@%s: %s", message.topic, message.partition, message.offset, exc)
            continue
        rng = message_rng(message.topic, message.partition, message.offset)
        part.add(message, sequence, apply_sequence(jobs, sequence, rng, message.partition))
        if part.job_events >= PART_MAX_EVENTS:
            yield part.done()
            part = FoldedPart()
    if part.messages:
        yield part.done()


@dataclass
class FoldedPart:
    """What folding some of a batch's messages gave, to be sent and written together: how their
    events went, what they forward, in order (each job's last delta between job-set actions once
    `done`, `feed.latest_deltas`), and where each job's events and each job set's requests are on
    `events` (a job's page reads those records only).

    A batch is written in parts so that the event loop is never held for long: the fold, the
    encoding of what it forwards and the writing of the jobs and their rows run without a pause
    between two awaits, and a batch of 500 submissions of 100 jobs each held every API call and UI
    page of the worker for 2-3 s (bench/ui.py, reads while the fold is busy)."""

    messages: list[Message] = field(default_factory=list)
    outcomes: Counter[str] = field(default_factory=Counter)
    feed: list[feed.JobDelta | feed.JobSetAction] = field(default_factory=list)
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
        self.feed += folded.feed
        self.commands += folded.commands
        self.job_events += len(sequence["events"])

    def done(self) -> FoldedPart:
        self.feed = feed.latest_deltas(self.feed)
        return self


def encoded_command(jobs: JobStore, command: dict[str, Any]) -> bytes:
    """The command's message. A lease carries the job's spec, whose encoding the jobs table already
    has (or will store with the job's state): it is copied in, not encoded again (most of a lease's
    cost in the fold)."""
    if command["spec"] is None:
        return encode("executor_command", command, validate_record=False)
    writer = splice("executor_command", "spec")
    return writer.encode(command, writer.branch_bytes(SPEC_TYPE, jobs.spec_bytes(command["job_id"], command["spec"])))
