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

All the logic is the pure fold in `streams.domain.jobs`. A message it cannot decode or an event
the state machine refuses is logged and skipped: one bad message must not stop the fold for every
other job.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from schemas.codec import SchemaError, decode, encode, splice
from streams.domain.ids import new_id
from streams.domain.job_index import Position
from streams.domain.jobs import apply_event, event_kind
from streams.domain.states import TransitionRefused
from streams.scheduler import feed
from streams.scheduler.commands import executor_command
from streams.scheduler.feed import Changes, feed_change
from streams.tables.batched import Outbox

if TYPE_CHECKING:
    from collections.abc import Iterator

    from faust.types import Message

    from streams.plane import ControlPlane
    from streams.tables.jobs import JobStore

log = logging.getLogger(__name__)

BATCH_MAX_MESSAGES = 500
BATCH_WITHIN_S = 0.005
# Job events folded before what they give is sent and written (`FoldedPart`). Folding and writing cost
# ~0.34 ms a job event on a busy 2-core machine (py-spy on bench/ui.py's fill: 54% of the event loop's
# samples), so a part holds the loop ~85 ms; each costs a few milliseconds more than one batch would.
PART_MAX_EVENTS = 250
# The Avro type of a job's spec, in job states and lease commands alike.
SPEC_TYPE = "flotilla.JobSubmitted"
# Deltas per feed record: about 300 bytes each, so a record stays far below the message size limit.
MAX_CHANGES_PER_RECORD = 2_000


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
        rng = random.Random(f"{message.topic}/{message.partition}/{message.offset}")
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


def feed_records(forwarded: list[feed.JobDelta | feed.JobSetAction]) -> list[Changes]:
    """The deltas and actions in order, as `Changes` records of at most `MAX_CHANGES_PER_RECORD`."""
    return [Changes(tuple(forwarded[start : start + MAX_CHANGES_PER_RECORD])) for start in range(0, len(forwarded), MAX_CHANGES_PER_RECORD)]


@dataclass
class Folded:
    """One sequence's fold: how many events were applied, unchanged, refused...; what to forward; and
    which known jobs it has events of (applied or not) and whether it has job-set requests."""

    outcomes: Counter[str] = field(default_factory=Counter)
    named: dict[str, None] = field(default_factory=dict)
    requests: bool = False
    feed: list[feed.JobDelta | feed.JobSetAction] = field(default_factory=list)
    commands: list[dict[str, Any]] = field(default_factory=list)


def apply_sequence(jobs: JobStore, sequence: dict[str, Any], rng: random.Random, partition: int = 0) -> Folded:
    """Fold every job event of the sequence, read from ``partition``. ``rng`` (seeded from the
    message's position) makes command ids the same when a message is folded again after a crash."""
    folded = Folded()
    outcomes = folded.outcomes
    envelope = {key: sequence[key] for key in ("queue", "job_set_id", "user", "groups")}
    for event in sequence["events"]:
        job_id = event["job_id"]
        if job_id is None:  # a job-set action, or a cycle record (which describes decisions only)
            action = job_set_action(envelope, event)
            if action is not None:
                folded.requests = True
                folded.feed.append(action)
                outcomes["job_set_action"] += 1
            continue
        kind = event["payload"][0]
        before = jobs.latest(job_id)
        try:
            after = apply_event(before, kind, event, envelope)
        except TransitionRefused as exc:
            folded.named[job_id] = None
            outcomes["refused"] += 1
            log.warning("event %s (%s) refused for job %s: %s", event["event_id"], kind, job_id, exc, extra=_about(envelope, job_id))
            continue
        if after is None:
            outcomes["unknown_job"] += 1
            log.warning("event %s (%s) for unknown job %s ignored", event["event_id"], kind, job_id, extra=_about(envelope, job_id))
            continue
        folded.named[job_id] = None
        if after is before:
            outcomes["unchanged"] += 1
            continue
        jobs.put(after, partition)
        outcomes["applied"] += 1
        delta = feed_change(before, after)
        if delta is not None:
            folded.feed.append(delta)
        command = executor_command(before, after, new_id(event["created"], rng), event["created"])
        if command is not None:
            folded.commands.append(command)
    return folded


def _about(envelope: dict[str, Any], job_id: str) -> dict[str, str]:
    """The fields of a JSON log line (`streams.logs`) about a job."""
    return {"job_id": job_id, "queue": envelope["queue"], "job_set": envelope["job_set_id"]}


def job_set_action(envelope: dict[str, Any], event: dict[str, Any]) -> feed.JobSetAction | None:
    """An event without a job id asks something of every unfinished job of the job set."""
    kind, payload = event["payload"]
    common = {"queue": envelope["queue"], "job_set_id": envelope["job_set_id"], "event_id": event["event_id"], "time": event["created"]}
    if event_kind(kind) == "JobCancelRequested":
        return feed.JobSetAction(action="cancel", reason=payload.get("reason") or "", **common)
    if event_kind(kind) == "JobReprioritised":
        return feed.JobSetAction(action="reprioritise", new_priority=payload["new_priority"], **common)
    return None
