"""The ingest agent: submit requests in, `submitted` events and rejections out.

Idempotent under at-least-once delivery: job and event ids are drawn from a generator seeded
with the message's position on the log, so re-processing a submission after a crash yields the
same ids, the job-state fold ignores the repeat, and the client-id index maps to the same job.
"""

from __future__ import annotations

import asyncio
import logging
import random
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from schemas.codec import SchemaError, decode, encode
from streams.agents.batches import batches
from streams.archive.durable import ArchiveUnavailable, Durability, NotArchived
from streams.domain import events
from streams.domain.admission import Admission
from streams.domain.ids import new_id, routed_id
from streams.domain.partitioning import key_hash
from streams.domain.validation import ItemResult, SubmitPolicy, validate_request
from streams.replies import reply_to
from streams.tables.batched import BatchProducer, Outbox, TableBatch
from streams.tables.client_ids import client_id_key
from streams.tables.store import read_many

if TYPE_CHECKING:
    import faust
    from faust.types import Message, TableT

    from streams.metrics import Metrics
    from streams.plane import ControlPlane
    from streams.replies import Replies
    from streams.tables.queues import QueueReplica

log = logging.getLogger(__name__)

BATCH_MAX_MESSAGES = 500
BATCH_WITHIN_S = 0.005
# Jobs judged before what they give is sent and written: a batch of 500 requests of 100 jobs held the
# event loop for seconds, and its events, answers and client ids (~40 MiB) in memory at once.
PART_MAX_JOBS = 5_000
# The Avro type of a submit request's items.
ITEM_TYPE = "flotilla.JobItem"
# A request's id, its answer per item, and the address its record asked the answer to go to.
Answer = tuple[str, list[dict[str, Any]], str | None]
# What the rejection of a message over the size limit keeps of it: enough to tell whose it was.
OVERSIZED_KEPT_BYTES = 1024


def register(plane: ControlPlane) -> None:
    ingest = Ingest(
        queues=plane.queues,
        policy=plane.policy,
        client_ids=plane.client_ids,
        events_topic=plane.topics.events.get_topic_name(),
        rejected=plane.topics.rejected,
        producer=plane.batch_producer,
        replies=plane.replies,
        metrics=plane.metrics,
        admission=Admission(plane.submission_limits),
        durable=plane.durable,
    )

    @plane.app.agent(plane.topics.submissions, name="ingest", concurrency=1)
    async def run(stream: Any) -> None:
        async for batch in batches(stream, BATCH_MAX_MESSAGES, BATCH_WITHIN_S, plane.metrics.batch_counter("ingest")):
            for event in batch:
                try:
                    await ingest.handle(event.message)
                except Exception:
                    log.exception("ingest failed on %s[%s]@%s", event.message.topic, event.message.partition, event.message.offset)
                    plane.metrics.submissions.labels("error").inc()
                if ingest.judged >= PART_MAX_JOBS:
                    await ingest.write()  # the batch's messages are acknowledged after the loop body, as one
            await ingest.write()


@dataclass(frozen=True)
class IngestBatch:
    """What a batch of submit requests gives: (key, event_sequence bytes) for `events`, client id key ->
    (partition, job id), and each request's `Answer`."""

    events: list[tuple[bytes | None, bytes | None]]
    client_ids: dict[str, tuple[int, str]]
    answers: list[Answer]


@dataclass
class Ingest:
    """What judging a submit request reads (queues, the policy, known client ids) and where its outcome goes.

    A batch's accepted submissions, client ids and answers wait in the object until `write` sends
    the events in one produce batch per partition and the client ids in one `TableBatch`, then
    answers the callers waiting; the agent writes a batch in parts of about `PART_MAX_JOBS` items.
    Rejections are rare and go out one by one as they are found."""

    queues: QueueReplica
    policy: SubmitPolicy
    client_ids: TableT
    events_topic: str
    rejected: faust.TopicT
    producer: BatchProducer
    replies: Replies
    metrics: Metrics
    admission: Admission = field(default_factory=Admission)
    # The batch so far: (key, event_sequence bytes), client id key -> (partition, job id), and
    # (request id, answers, where the record asked its answer to go).
    _events: list[tuple[bytes | None, bytes | None]] = field(default_factory=list)
    _client_ids: dict[str, tuple[int, str]] = field(default_factory=dict)
    _answers: list[Answer] = field(default_factory=list)
    judged: int = 0  # items judged in the batch so far
    durable: Durability = field(default_factory=NotArchived)
    _answering: set[asyncio.Future[None]] = field(default_factory=set)
    _last_offsets: dict[int, int] = field(default_factory=dict)  # events partition -> offset of the last event sent

    async def write(self) -> None:
        """Send the batch's events, then (once the broker has them) its client ids, then answer its callers
        once the events are durable (archived, with the embedded broker), without holding up the next batch.

        Client ids written before their events could outlive them in a kill: the submission
        folded again after the restart would be taken for a duplicate and its jobs never exist."""
        batch = self.take_batch()
        outbox = Outbox(self.producer)
        sent = await outbox.keyed(self.events_topic, batch.events)
        await outbox.delivered()
        written = TableBatch(self.client_ids, self.producer)
        for key, (partition, job_id) in batch.client_ids.items():
            written.put(partition, key, job_id)
        await written.write()
        self._last_offsets.update(sent.result() if sent else {})
        if batch.answers:
            # Up to the last events this agent sent, not only this batch's: a duplicate's job came earlier.
            answering = asyncio.ensure_future(self._answer(dict(self._last_offsets), batch.answers))
            self._answering.add(answering)
            answering.add_done_callback(self._answering.discard)

    def take_batch(self) -> IngestBatch:
        """The batch judged so far, which the agent then holds no more."""
        batch = IngestBatch(self._events, self._client_ids, self._answers)
        self._events, self._client_ids, self._answers, self.judged = [], {}, [], 0
        return batch

    async def _answer(self, offsets: dict[int, int], answers: list[Answer]) -> None:
        try:
            await self.durable.wait(self.events_topic, offsets)
        except ArchiveUnavailable as exc:
            for request_id, _, to in answers:
                self.replies.fail(request_id, exc, to)
            return
        for request_id, items, to in answers:
            self.replies.resolve(request_id, items, to)

    def _known_job(self, key: str, stored: dict[str, str | None]) -> str | None:
        """The job of client id ``key``: one of this batch's, else the table's (``stored``, read for the request)."""
        pending = self._client_ids.get(key)
        return pending[1] if pending is not None else stored[key]

    async def handle(self, message: Message) -> None:
        value = message.value or b""
        too_large = self.admission.limits.oversized(len(value))
        if too_large is not None:  # refused unread: decoding it could hold the agent up for seconds
            self.metrics.submissions.labels("oversized").inc()
            kept = f"{too_large} (this rejection keeps its first {OVERSIZED_KEPT_BYTES} bytes)"
            await self.reject(message, None, kept, payload=bytes(value[:OVERSIZED_KEPT_BYTES]))
            return
        try:
            request = decode("submit_request", message.value, keep=ITEM_TYPE)  # items with their size (validation)
        except SchemaError as exc:
            self.metrics.submissions.labels("malformed").inc()
            await self.reject(message, None, f"malformed submission: {exc}")
            return
        try:
            await self.ingest_request(message, request)
        except Exception as exc:  # a bug must not lose the request silently: answer it as rejected
            log.exception("ingest failed on request %s", request["request_id"])
            self.metrics.submissions.labels("error").inc()
            await self.reject(message, request, f"internal error while ingesting: {exc}")

    async def ingest_request(self, message: Message, request: dict[str, Any]) -> None:
        if not request["items"]:
            self.metrics.submissions.labels("empty").inc()
            await self.reject(message, request, "submit request has no items")
            return
        now_ms = int(message.timestamp * 1000)
        refused = self.admission.admit(request["queue"], request["user"], len(request["items"]), now_ms)
        if refused is not None:
            self.metrics.submissions.labels("limited").inc()
            await self.reject(message, request, refused)
            return
        rng = random.Random(f"{message.topic}/{message.partition}/{message.offset}")
        queue = request["queue"]
        results = validate_request(request, self.queues.get(queue), self.policy)
        self.judged += len(results)
        job_set_key = events.sequence_key(queue, request["job_set_id"]).encode()
        route = key_hash(job_set_key)  # each job id leads to its job set's partition

        wanted = [client_id_key(queue, result.client_id) for result in results if result.accepted and result.client_id]
        stored = dict(zip(wanted, read_many(self.client_ids, wanted), strict=True))
        submitted: list[dict[str, Any]] = []
        answers: list[dict[str, Any]] = []
        drawn: set[str] = set()
        duplicates = 0
        for result in results:
            job_id = routed_id(now_ms, rng, route)
            while job_id in drawn:  # 48 random bits per job set and millisecond: never two equal ids in one request
                job_id = routed_id(now_ms, rng, route)
            drawn.add(job_id)
            event_id = new_id(now_ms, rng)
            if not result.accepted:
                await self.reject(message, request, result.reason or "", result)
                answers.append({"error": result.reason})
                continue
            if result.client_id:
                key = client_id_key(queue, result.client_id)
                existing = self._known_job(key, stored)
                if existing is not None and existing != job_id:
                    answers.append({"job_id": existing, "duplicate": True})
                    duplicates += 1
                    continue
                self._client_ids[key] = (message.partition, job_id)
            assert result.job is not None  # an accepted item has its job
            submitted.append(events.event(event_id, now_ms, job_id, events.payload("JobSubmitted", result.job)))
            answers.append({"job_id": job_id})

        for sequence in events.sequences(queue, request["job_set_id"], request["user"], request["groups"], submitted):
            self._events.append((job_set_key, encode("event_sequence", sequence, validate_record=False)))  # built from validated items
        self.metrics.submissions.labels("processed").inc()
        self.metrics.jobs_submitted.labels(queue).inc(len(submitted))
        self.metrics.jobs_deduplicated.labels(queue).inc(duplicates)
        self.metrics.jobs_rejected.labels(queue).inc(len(results) - len(submitted) - duplicates)
        self._answers.append((request["request_id"], answers, reply_to(message.headers)))

    async def reject(
        self, message: Message, request: dict[str, Any] | None, reason: str, item: ItemResult | None = None, payload: bytes | None = None
    ) -> None:
        """``payload``: what the rejection keeps of the message, when not all of it."""
        request = request or {}
        key = message.key if isinstance(message.key, str) else (message.key or b"unknown").decode(errors="replace")
        await self.rejected.send(
            key=key or "unknown",
            value={
                "request_key": key or "unknown",
                "request_id": request.get("request_id"),
                "queue": request.get("queue"),
                "job_set_id": request.get("job_set_id"),
                "item_index": item.index if item else None,
                "client_id": item.client_id if item else None,
                "reason": reason,
                "payload": bytes(message.value or b"") if payload is None else payload,
                "rejected_at": int(message.timestamp * 1000),
            },
        )
        if item is None and request.get("request_id"):
            answer = [{"error": reason}] * max(1, len(request.get("items") or []))
            self.replies.resolve(request["request_id"], answer, reply_to(message.headers))
