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
`TableBatch`.
A per-message Faust write and send cost 90-230 us each; a batched one about 3 us.

All the logic is the pure fold in `streams.scheduler.fold` (over `streams.domain.jobs`). A message it cannot decode or an event
the state machine refuses is logged and skipped: one bad message must not stop the fold for every
other job.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from schemas.codec import SchemaError, decode, encode, splice
from streams.scheduler import feed
from streams.scheduler.fold import Folded, apply_sequence, feed_records, message_rng
from streams.tables.batched import Outbox

if TYPE_CHECKING:
    from faust.types import Message

    from streams.plane import ControlPlane
    from streams.tables.jobs import JobStore

log = logging.getLogger(__name__)

BATCH_MAX_MESSAGES = 500
BATCH_WITHIN_S = 0.005
# The Avro type of a job's spec, in job states and lease commands alike.
SPEC_TYPE = "flotilla.JobSubmitted"


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
            outbox = Outbox(producer)
            await outbox.partition(feed_topic, 0, [(None, feed.encode(record)) for record in feed_records(folded.feed)])
            commands = [(c["executor"].encode(), encoded_command(jobs, c)) for c in folded.commands]
            await outbox.keyed(commands_topic, commands)
            await outbox.delivered()
            await plane.job_index.write_pending(jobs, producer)  # first: see streams/tables/job_index.py
            await jobs.write_pending(producer)
            for outcome, count in folded.outcomes.items():
                plane.metrics.events.labels(outcome).inc(count)
            plane.refold.folded_batch(messages, folded.feed)


def fold_batch(jobs: JobStore, messages: list[Message]) -> Folded:
    """Fold a batch of `events` messages into ``jobs``, where the job states wait as pending writes
    until the agent writes them: what the batch forwards, in order (each job's last delta between
    job-set actions, `feed.latest_deltas`), and how its events went."""
    batch = Folded()
    for message in messages:
        try:
            sequence = decode("event_sequence", message.value)
        except SchemaError as exc:
            batch.outcomes["undecodable"] += 1
            log.error("skipping undecodable event message %s[%s]@%s: %s", message.topic, message.partition, message.offset, exc)
            continue
        folded = apply_sequence(jobs, sequence, message_rng(message.topic, message.partition, message.offset), message.partition)
        batch.outcomes.update(folded.outcomes)
        batch.feed += folded.feed
        batch.commands += folded.commands
    batch.feed = feed.latest_deltas(batch.feed)
    return batch


def encoded_command(jobs: JobStore, command: dict[str, Any]) -> bytes:
    """The command's message. A lease carries the job's spec, whose encoding the jobs table already
    has (or will store with the job's state): it is copied in, not encoded again (most of a lease's
    cost in the fold)."""
    if command["spec"] is None:
        return encode("executor_command", command, validate_record=False)
    writer = splice("executor_command", "spec")
    return writer.encode(command, writer.branch_bytes(SPEC_TYPE, jobs.spec_bytes(command["job_id"], command["spec"])))
