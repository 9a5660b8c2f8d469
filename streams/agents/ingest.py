"""The ingest agent: submit requests in, `submitted` events and rejections out.

Idempotent under at-least-once delivery: job and event ids are drawn from a generator seeded
with the message's position on the log, so re-processing a submission after a crash yields the
same ids, the job-state fold ignores the repeat, and the client-id index maps to the same job.
"""

from __future__ import annotations

import logging
import random
from typing import TYPE_CHECKING, Any

from schemas.codec import SchemaError, decode, encode
from streams.domain.ids import new_id
from streams.domain.validation import ItemResult, validate_request
from streams.tables.client_ids import client_id_key

if TYPE_CHECKING:
    from faust.types import Message

    from streams.app import ControlPlane

log = logging.getLogger(__name__)

SUBMITTED = "flotilla.JobSubmitted"


def register(plane: ControlPlane) -> None:
    @plane.app.agent(plane.topics.submissions, name="ingest", concurrency=1)
    async def ingest(stream: Any) -> None:
        async for event in stream.events():
            try:
                await handle(plane, event.message)
            except Exception:  # a crashed Faust agent stays down: log, count, and go on with the next
                log.exception("ingest failed on %s[%s]@%s", event.message.topic, event.message.partition, event.message.offset)
                plane.metrics.submissions.labels("error").inc()


async def handle(plane: ControlPlane, message: Message) -> None:
    try:
        request = decode("submit_request", message.value)
    except SchemaError as exc:
        plane.metrics.submissions.labels("malformed").inc()
        await reject(plane, message, None, f"malformed submission: {exc}")
        return
    try:
        await ingest_request(plane, message, request)
    except Exception as exc:  # a bug must not lose the request silently: answer it as rejected
        log.exception("ingest failed on request %s", request["request_id"])
        plane.metrics.submissions.labels("error").inc()
        await reject(plane, message, request, f"internal error while ingesting: {exc}")


async def ingest_request(plane: ControlPlane, message: Message, request: dict[str, Any]) -> None:
    if not request["items"]:
        plane.metrics.submissions.labels("empty").inc()
        await reject(plane, message, request, "submit request has no items")
        return
    now_ms = int(message.timestamp * 1000)
    rng = random.Random(f"{message.topic}/{message.partition}/{message.offset}")
    results = validate_request(request, plane.queues.get(request["queue"]), plane.policy)

    events: list[dict[str, Any]] = []
    answers: list[dict[str, Any]] = []
    duplicates = 0
    for result in results:
        job_id, event_id = new_id(now_ms, rng), new_id(now_ms, rng)
        if not result.accepted:
            await reject(plane, message, request, result.reason or "", result)
            answers.append({"error": result.reason})
            continue
        if result.client_id:
            key = client_id_key(request["queue"], result.client_id)
            existing = plane.client_ids.get(key)
            if existing is not None and existing != job_id:
                answers.append({"job_id": existing, "duplicate": True})
                duplicates += 1
                continue
            plane.client_ids[key] = job_id
        events.append({"event_id": event_id, "created": now_ms, "job_id": job_id, "payload": (SUBMITTED, result.job)})
        answers.append({"job_id": job_id})

    if events:
        sequence = {
            "queue": request["queue"],
            "job_set_id": request["job_set_id"],
            "user": request["user"],
            "groups": request["groups"],
            "events": events,
        }
        await plane.topics.events.send(
            key=f"{request['queue']}/{request['job_set_id']}",
            value=encode("event_sequence", sequence, validate_record=False),  # built from validated items
        )
    queue = request["queue"]
    plane.metrics.submissions.labels("processed").inc()
    plane.metrics.jobs_submitted.labels(queue).inc(len(events))
    plane.metrics.jobs_deduplicated.labels(queue).inc(duplicates)
    plane.metrics.jobs_rejected.labels(queue).inc(len(results) - len(events) - duplicates)
    plane.replies.resolve(request["request_id"], answers)


async def reject(
    plane: ControlPlane,
    message: Message,
    request: dict[str, Any] | None,
    reason: str,
    item: ItemResult | None = None,
) -> None:
    request = request or {}
    key = message.key if isinstance(message.key, str) else (message.key or b"unknown").decode(errors="replace")
    await plane.topics.rejected.send(
        key=key or "unknown",
        value={
            "request_key": key or "unknown",
            "request_id": request.get("request_id"),
            "queue": request.get("queue"),
            "job_set_id": request.get("job_set_id"),
            "item_index": item.index if item else None,
            "client_id": item.client_id if item else None,
            "reason": reason,
            "payload": bytes(message.value or b""),
            "rejected_at": int(message.timestamp * 1000),
        },
    )
    if item is None and request.get("request_id"):
        plane.replies.resolve(request["request_id"], [{"error": reason}] * max(1, len(request.get("items") or [])))
