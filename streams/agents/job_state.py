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

All the logic is the pure fold in `streams.scheduler.fold` (over `streams.domain.jobs`). A message it cannot decode or an event
the state machine refuses is logged and skipped: one bad message must not stop the fold for every
other job.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from schemas.codec import SchemaError, decode, encode
from streams.scheduler import feed
from streams.scheduler.fold import MAX_CHANGES_PER_RECORD, Folded, apply_sequence, message_rng
from streams.tables.batched import Outbox
from streams.tables.jobs import SPEC_TYPE

if TYPE_CHECKING:
    from faust.types import Message

    from streams.plane import ControlPlane
    from streams.tables.jobs import JobStore

log = logging.getLogger(__name__)

BATCH_MAX_MESSAGES = 500
BATCH_WITHIN_S = 0.005


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
        folded = apply_sequence(jobs, sequence, message_rng(message.topic, message.partition, message.offset), message.partition)
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
