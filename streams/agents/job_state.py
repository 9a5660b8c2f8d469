"""The job-state agent: folds `events` into the `jobs` table, whose changelog is `job-states`, and
each new job's spec into the `job-specs` table, whose changelog is `job-specs`.

Writing the table is publishing: the compacted `job-states` topic is the table's changelog, so
every job state reaches external consumers with one message; a job's spec is published once, as
the bytes its JobSubmitted event carried (read keeping them: `schemas.codec.Encoded`), and copied
into its lease commands the same way, never encoded again. The agent also forwards what each
change means downstream: a job delta to `scheduler-feed` when the scheduler's view changed
(`streams.scheduler.feed`), a command to `executor-commands` when a run starts or must stop
(`streams.scheduler.commands`), and job-set actions (an event with no job id) to `scheduler-feed`.

It works in batches (DESIGN.md, "The hot path works in batches"): Faust hands it the messages
waiting, up to `BATCH_MAX_MESSAGES` or what arrived within `BATCH_WITHIN_S`; the pure fold runs
over all of them, then the batch's changed jobs (each one's last between job-set actions, written
straight as feed rows) go to the feed as few `Changes` records, in order, and its commands in one
produce batch per partition, and once the broker has them all, the batch's new specs and job
states (each job's last) go to their tables in one `TableBatch` each.
A per-message Faust write and send cost 90-230 us each; a batched one about 3 us.

All the logic is the pure fold in `streams.domain.jobs`. A message it cannot decode or an event
the state machine refuses is logged and skipped: one bad message must not stop the fold for every
other job.
"""

from __future__ import annotations

import logging
import random
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from schemas.codec import SchemaError, decode, encode
from streams.domain.ids import RANDOM_BITS, ulid
from streams.domain.jobs import apply_event, event_kind
from streams.domain.states import TransitionRefused
from streams.scheduler import feed
from streams.scheduler.commands import executor_command
from streams.scheduler.feed import Changes
from streams.tables.batched import Outbox
from streams.tables.jobs import SPEC_TYPE

if TYPE_CHECKING:
    from faust.types import Message

    from streams.plane import ControlPlane
    from streams.tables.jobs import JobStore

log = logging.getLogger(__name__)

BATCH_MAX_MESSAGES = 500
BATCH_WITHIN_S = 0.005
# Deltas per feed record: about 300 bytes each, so a record stays far below the message size limit.
MAX_CHANGES_PER_RECORD = 2_000


def register(plane: ControlPlane) -> None:
    jobs, producer = plane.jobs, plane.batch_producer
    feed_topic = plane.topics.scheduler_feed.get_topic_name()
    commands_topic = plane.topics.executor_commands.get_topic_name()

    @plane.app.agent(plane.topics.events, name="job-state", concurrency=1)
    async def fold(stream: Any) -> None:
        async for events in stream.take_events(BATCH_MAX_MESSAGES, within=BATCH_WITHIN_S):
            messages = [event.message for event in events]
            folded = fold_batch(jobs, messages)
            # What the batch forwards is acknowledged before its job states are written: were the
            # table written first, a worker killed in between would find the jobs folded after its
            # restart, forward nothing, and the scheduler would never hear that a job was leased or
            # had ended. Faust acknowledges the batch's messages after this and flushes the producer
            # before it commits their offsets.
            records, commands = sent(folded)
            outbox = Outbox(producer)
            await outbox.partition(feed_topic, 0, [(None, record) for record in records])
            await outbox.keyed(commands_topic, commands)
            await outbox.delivered()
            await plane.job_index.write_pending(jobs, producer)  # first: see streams/tables/job_index.py
            await jobs.write_pending(producer)
            for outcome, count in folded.outcomes.items():
                plane.metrics.events.labels(outcome).inc(count)
            plane.refold.folded_batch(messages, folded.changes)


def fold_batch(jobs: JobStore, messages: Sequence[Message]) -> Folded:
    """Fold a batch of `events` messages into ``jobs``, where the job states wait as pending writes
    until the agent writes them: what the batch forwards, in order (each changed job's last state
    between job-set actions, `feed.latest_changes`), and how its events went."""
    batch = Folded()
    for message in messages:
        try:
            sequence = decode("event_sequence", message.value, keep=SPEC_TYPE)
        except SchemaError as exc:
            batch.outcomes["undecodable"] += 1
            log.error("skipping undecodable event message %s[%s]@%s: %s", message.topic, message.partition, message.offset, exc)
            continue
        rng = random.Random(f"{message.topic}/{message.partition}/{message.offset}")
        folded = apply_sequence(jobs, sequence, rng, message.partition)
        batch.outcomes.update(folded.outcomes)
        batch.changes += folded.changes
        batch.commands += folded.commands
    batch.changes = feed.latest_changes(batch.changes)
    return batch


def sent(folded: Folded) -> tuple[list[bytes], list[tuple[bytes, bytes]]]:
    """What a batch's fold sends: its changes as `Changes` records of at most `MAX_CHANGES_PER_RECORD`
    (each job written straight as its row, `feed.encode_changes`), and its commands as (executor, command) messages."""
    changes = folded.changes
    records = [feed.encode_changes(changes[at : at + MAX_CHANGES_PER_RECORD]) for at in range(0, len(changes), MAX_CHANGES_PER_RECORD)]
    return records, [(command["executor"].encode(), encoded_command(command)) for command in folded.commands]


def encoded_command(command: dict[str, Any]) -> bytes:
    """The command's message. A lease carries the job's spec, read with its encoding (an Encoded,
    from the event or job-specs), which the writer copies in rather than encoding it again."""
    return encode("executor_command", command, validate_record=False)


def feed_records(forwarded: list[feed.JobDelta | feed.JobSetAction]) -> list[Changes]:
    """The deltas and actions in order, as `Changes` records of at most `MAX_CHANGES_PER_RECORD`."""
    return [Changes(tuple(forwarded[start : start + MAX_CHANGES_PER_RECORD])) for start in range(0, len(forwarded), MAX_CHANGES_PER_RECORD)]


def deltas(changes: list[feed.Change]) -> list[feed.JobDelta | feed.JobSetAction]:
    """The changes as the feed carries them: each changed job as its delta."""
    return [feed.job_delta(change) if isinstance(change, dict) else change for change in changes]


@dataclass
class Folded:
    """A fold of one sequence or a batch: how many events were applied, unchanged, refused...; what to
    forward (``changes``: each job whose scheduling view changed, as the change left it, and each
    job-set action; `feed` gives them as deltas) and the executor commands."""

    outcomes: Counter[str] = field(default_factory=Counter)
    changes: list[feed.Change] = field(default_factory=list)
    commands: list[dict[str, Any]] = field(default_factory=list)

    @property
    def feed(self) -> list[feed.JobDelta | feed.JobSetAction]:
        return deltas(self.changes)


def apply_sequence(jobs: JobStore, sequence: dict[str, Any], rng: random.Random, partition: int = 0) -> Folded:
    """Fold every job event of the sequence, read from ``partition``. ``rng`` (seeded from the
    message's position) makes command ids the same when a message is folded again after a crash:
    each applied event draws one id's random bits from it, whether it makes a command or not."""
    folded = Folded()
    outcomes = folded.outcomes
    envelope = {key: sequence[key] for key in ("queue", "job_set_id", "user", "groups")}
    for event in sequence["events"]:
        job_id = event["job_id"]
        if job_id is None:  # a job-set action, or a cycle record (which describes decisions only)
            action = job_set_action(envelope, event)
            if action is not None:
                folded.changes.append(action)
                outcomes["job_set_action"] += 1
            continue
        kind = event["payload"][0]
        before = jobs.latest(job_id)
        try:
            after = apply_event(before, kind, event, envelope)
        except TransitionRefused as exc:
            outcomes["refused"] += 1
            log.warning("event %s (%s) refused for job %s: %s", event["event_id"], kind, job_id, exc, extra=_about(envelope, job_id))
            continue
        if after is None:
            outcomes["unknown_job"] += 1
            log.warning("event %s (%s) for unknown job %s ignored", event["event_id"], kind, job_id, extra=_about(envelope, job_id))
            continue
        if after is before:
            outcomes["unchanged"] += 1
            continue
        jobs.put(after, partition)
        outcomes["applied"] += 1
        if feed.changed(before, after):
            folded.changes.append(after)
        bits = rng.getrandbits(RANDOM_BITS)
        command = executor_command(before, after, "", event["created"])
        if command is not None:
            folded.commands.append({**command, "command_id": ulid(event["created"], bits)})
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
