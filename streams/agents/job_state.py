"""The job-state agent: folds `events` into the `jobs` table, whose changelog is `job-states`.

Writing the table is publishing: the compacted `job-states` topic is the table's changelog, so
every job state reaches external consumers with one message. The agent also forwards what the
change means downstream (`streams.scheduler.commands`): a job delta to `scheduler-feed` when the
scheduler's view changed, a command to `executor-commands` when a run starts or must stop, and
job-set actions (an event with no job id) to `scheduler-feed`. The deltas and actions of one
sequence go to the feed as one record, in order.

All the logic is the pure fold in `streams.domain.jobs`; this agent only reads the table, applies
the event and writes back. A message it cannot decode or an event the state machine refuses is
logged and skipped: one bad message must not stop the fold for every other job.
"""

from __future__ import annotations

import logging
import random
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from schemas.codec import SchemaError, decode, encode
from streams.domain.ids import new_id
from streams.domain.jobs import apply_event, event_kind
from streams.domain.states import TransitionRefused
from streams.scheduler import feed
from streams.scheduler.commands import executor_command
from streams.scheduler.feed import Changes, feed_change

if TYPE_CHECKING:
    from streams.plane import ControlPlane
    from streams.tables.jobs import JobStore

log = logging.getLogger(__name__)


def register(plane: ControlPlane) -> None:
    @plane.app.agent(plane.topics.events, name="job-state", concurrency=1)
    async def fold(stream: Any) -> None:
        async for event in stream.events():
            message = event.message
            try:
                sequence = decode("event_sequence", message.value)
            except SchemaError as exc:
                plane.metrics.events.labels("undecodable").inc()
                log.error("skipping undecodable event message %s[%s]@%s: %s", message.topic, message.partition, message.offset, exc)
                continue
            rng = random.Random(f"{message.topic}/{message.partition}/{message.offset}")
            folded = apply_sequence(plane.jobs, sequence, rng)
            for outcome, count in folded.outcomes.items():
                plane.metrics.events.labels(outcome).inc(count)
            changes = folded.feed_record()
            if changes is not None:
                await plane.topics.scheduler_feed.send(value=feed.encode(changes))
            for command in folded.commands:
                await plane.topics.executor_commands.send(
                    key=command["executor"], value=encode("executor_command", command, validate_record=False)
                )


@dataclass
class Folded:
    """One sequence's fold: how many events were applied, unchanged, refused...; and what to forward."""

    outcomes: Counter[str] = field(default_factory=Counter)
    feed: list[feed.JobDelta | feed.JobSetAction] = field(default_factory=list)
    commands: list[dict[str, Any]] = field(default_factory=list)

    def feed_record(self) -> Changes | None:
        """The deltas and actions as the one feed record the sequence gives, if any."""
        return Changes(tuple(self.feed)) if self.feed else None


def apply_sequence(jobs: JobStore, sequence: dict[str, Any], rng: random.Random) -> Folded:
    """Fold every job event of the sequence. ``rng`` (seeded from the message's position)
    makes command ids the same when a message is folded again after a crash."""
    folded = Folded()
    outcomes = folded.outcomes
    envelope = {key: sequence[key] for key in ("queue", "job_set_id", "user", "groups")}
    for event in sequence["events"]:
        job_id = event["job_id"]
        if job_id is None:  # a job-set action, or a cycle record (which describes decisions only)
            action = job_set_action(envelope, event)
            if action is not None:
                folded.feed.append(action)
                outcomes["job_set_action"] += 1
            continue
        kind = event["payload"][0]
        before = jobs.get(job_id)
        try:
            after = apply_event(before, kind, event, envelope)
        except TransitionRefused as exc:
            outcomes["refused"] += 1
            log.warning("event %s (%s) refused for job %s: %s", event["event_id"], kind, job_id, exc)
            continue
        if after is None:
            outcomes["unknown_job"] += 1
            log.warning("event %s (%s) for unknown job %s ignored", event["event_id"], kind, job_id)
            continue
        if after is before:
            outcomes["unchanged"] += 1
            continue
        jobs.put(after)
        outcomes["applied"] += 1
        delta = feed_change(before, after)
        if delta is not None:
            folded.feed.append(delta)
        command = executor_command(before, after, new_id(event["created"], rng), event["created"])
        if command is not None:
            folded.commands.append(command)
    return folded


def job_set_action(envelope: dict[str, Any], event: dict[str, Any]) -> feed.JobSetAction | None:
    """An event without a job id asks something of every unfinished job of the job set."""
    kind, payload = event["payload"]
    common = {"queue": envelope["queue"], "job_set_id": envelope["job_set_id"], "event_id": event["event_id"], "time": event["created"]}
    if event_kind(kind) == "JobCancelRequested":
        return feed.JobSetAction(action="cancel", reason=payload.get("reason") or "", **common)
    if event_kind(kind) == "JobReprioritised":
        return feed.JobSetAction(action="reprioritise", new_priority=payload["new_priority"], **common)
    return None
