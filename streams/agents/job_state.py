"""The job-state agent: folds `events` into the `jobs` table, whose changelog is `job-states`.

Writing the table is publishing: the compacted `job-states` topic is the table's changelog, so
every job state reaches external consumers with one message.

All the logic is the pure fold in `streams.domain.jobs`; this agent only reads the table, applies
the event and writes back. A message it cannot decode or an event the state machine refuses is
logged and skipped: one bad message must not stop the fold for every other job.
"""

from __future__ import annotations

import logging
from collections import Counter
from typing import TYPE_CHECKING, Any

from schemas.codec import SchemaError, decode
from streams.domain.jobs import apply_event
from streams.domain.states import TransitionRefused

if TYPE_CHECKING:
    from streams.app import ControlPlane

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
            for outcome, count in apply_sequence(plane, sequence).items():
                plane.metrics.events.labels(outcome).inc(count)


def apply_sequence(plane: ControlPlane, sequence: dict[str, Any]) -> Counter[str]:
    """Fold every job event of the sequence; returns how many were applied, unchanged, refused..."""
    outcomes: Counter[str] = Counter()
    envelope = {key: sequence[key] for key in ("queue", "job_set_id", "user", "groups")}
    for event in sequence["events"]:
        job_id = event["job_id"]
        if job_id is None:  # cycle records describe decisions, not a job
            continue
        kind = event["payload"][0]
        before = plane.jobs.get(job_id)
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
        plane.jobs.put(after)
        outcomes["applied"] += 1
    return outcomes
