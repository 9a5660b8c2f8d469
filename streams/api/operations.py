"""What the API does, whatever the transport: queues, submission, job control and job lookup.

REST views and gRPC servicers parse their requests, authenticate the caller into a `Principal`
and call these operations, so both transports share one set of rules: a caller is checked against
the queue's owners or the administrator groups before anything is written to the log, and every
write is answered once its effect is visible from every worker of the group (job control: once
its event is on the log). Reads of jobs go through `Reads`, which asks the workers holding them.
Refusals are `ApiError`s whose HTTP status doubles as the kind of refusal; the gRPC
layer maps each to its status code.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Collection
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from aiokafka.errors import KafkaError

from schemas.codec import SchemaError, encode
from streams.api.control_requests import VERBS, JobFilter
from streams.api.errors import ApiError
from streams.api.local_reads import check_job
from streams.archive.durable import ArchiveUnavailable, Durability, NotArchived
from streams.auth import Permissions, Principal
from streams.domain import events
from streams.domain.admission import SubmissionLimits
from streams.domain.events import Payload
from streams.domain.executor_settings import SETTINGS_JOB_SET, SETTINGS_QUEUE, settings_payload
from streams.domain.ids import IdFactory, job_of_run, new_id
from streams.domain.queues import validate_queue
from streams.domain.states import JOB_TERMINAL

if TYPE_CHECKING:
    from streams.api.reads import Reads
    from streams.plane import Topics
    from streams.replies import Replies
    from streams.tables.batched import BatchProducer
    from streams.tables.queues import QueueReplica

VISIBILITY_TIMEOUT_S = 10.0
T = TypeVar("T")


class QueueExists(ApiError):
    def __init__(self, name: str) -> None:
        super().__init__(409, f"queue {name!r} already exists")


class JobFinished(ApiError):
    """Nothing to act on: gRPC's Armada semantics skip such a job where REST refuses it."""

    def __init__(self, job: dict[str, Any], verb: str) -> None:
        super().__init__(409, f"job {job['job_id']} already finished ({job['state']}); there is nothing to {verb}")


@dataclass(frozen=True)
class Submitted:
    request_id: str
    # One answer per item, in order: {"job_id"} (with "duplicate": True for a known client id) or {"error"}.
    items: list[dict[str, Any]]

    @property
    def accepted(self) -> int:
        return sum(1 for item in self.items if "job_id" in item)


@dataclass
class Operations:
    queues: QueueReplica
    permissions: Permissions
    topics: Topics
    replies: Replies
    ids: IdFactory
    # Jobs, job sets, lists and the scheduler's view, wherever in the group they are held.
    reads: Reads
    # Submissions go out through the batch path: a closed batch is sent at once, where Faust's `topic.send`
    # let each call's one record linger `producer_linger_ms` (5 ms) for records no one would add.
    producer: BatchProducer
    submit_timeout_s: float = 30.0
    # The ingest agent's limits; the size limit is checked here too, so a caller hears of it at once.
    submission_limits: SubmissionLimits = field(default_factory=SubmissionLimits)
    # A write is answered once durable: archived, with the embedded broker (streams/archive).
    durable: Durability = field(default_factory=NotArchived)

    # ------------------------------------------------------------------ queues (any caller reads them)

    def list_queues(self, principal: Principal) -> list[dict[str, Any]]:
        return sorted((dict(queue) for queue in self.queues.values()), key=lambda queue: queue["name"])

    def queue(self, principal: Principal, name: str) -> dict[str, Any]:
        queue = self.queues.get(name)
        if queue is None:
            raise ApiError(404, f"queue {name!r} does not exist")
        return queue

    async def create_queue(self, principal: Principal, raw: dict[str, Any]) -> dict[str, Any]:
        self.permissions.check_admin(principal, f"create queue {raw.get('name')!r}")
        if not principal.anonymous and not raw.get("user_owners") and not raw.get("group_owners"):
            # As Armada: a queue created without owners belongs to its creator.
            raw = {**raw, "user_owners": [principal.user]}
        queue = self._valid_queue(raw)
        if self.queues.get(queue["name"]) is not None:
            raise QueueExists(queue["name"])
        return await self._write_queue(principal, queue)

    async def update_queue(self, principal: Principal, raw: dict[str, Any]) -> dict[str, Any]:
        """Replaces the whole definition, as Armada's UpdateQueue does."""
        self.permissions.check_admin(principal, f"update queue {raw.get('name')!r}")
        queue = self._valid_queue(raw)
        self.queue(principal, queue["name"])
        return await self._write_queue(principal, queue)

    async def delete_queue(self, principal: Principal, name: str) -> None:
        self.permissions.check_admin(principal, f"delete queue {name!r}")
        self.queue(principal, name)
        offset = await self._durably(self.topics.queues, key=name, value=None)
        await self.reads.queues_at(principal, offset, VISIBILITY_TIMEOUT_S)

    @staticmethod
    def _valid_queue(raw: dict[str, Any]) -> dict[str, Any]:
        queue, reason = validate_queue(raw)
        if queue is None:
            raise ApiError(400, f"invalid queue: {reason}")
        return queue

    async def _write_queue(self, principal: Principal, queue: dict[str, Any]) -> dict[str, Any]:
        """Write the definition and answer once every worker's replica has it: a read on any worker right after sees it."""
        offset = await self._durably(self.topics.queues, key=queue["name"], value=encode("queue", queue))
        await self.reads.queues_at(principal, offset, VISIBILITY_TIMEOUT_S)
        return queue

    # ------------------------------------------------------------------ submission

    async def submit(
        self, principal: Principal, queue: str, job_set_id: str, items: list[dict[str, Any]], *, typed: bool = False
    ) -> Submitted:
        """Items in the complete Avro `JobItem` shape; answered once the ingest agent (on whichever worker holds
        the queue's partition) has judged them and the accepted jobs are in their partition's jobs table, so a
        read right after, on any worker, sees them.

        ``typed``: the items are of the schema's types by construction (gRPC's, `convert.job_item`), so
        the request is encoded without validating it (a 100-item request: ~27 us a job of the worker's
        CPU). Items from JSON are validated: the writer alone would take a number for a boolean."""
        request_id = self.ids.new()
        known = self.queues.get(queue)
        if known is None:
            # Answered like the ingest agent would, without giving any caller a way to write to the log.
            reason = "queue is empty" if not queue else f"queue {queue!r} does not exist"
            return Submitted(request_id, [{"error": reason} for _ in items])
        self.permissions.check_queue(principal, "submit", known)
        request = {
            "request_id": request_id,
            "queue": queue,
            "job_set_id": job_set_id,
            "user": principal.user,
            "groups": list(principal.groups),
            "items": items,
        }
        try:
            message = encode("submit_request", request, validate_record=not typed)
        except SchemaError as exc:
            raise ApiError(400, f"invalid submit request: {exc}") from exc
        too_large = self.submission_limits.oversized(len(message))
        if too_large is not None:
            raise ApiError(413, too_large)
        unavailable(self.durable)
        answer = self.replies.expect(request_id)
        try:
            topic, headers = self.topics.submissions.get_topic_name(), list(self.replies.headers().items())
            await on_the_log(self.producer.send_keyed(topic, [(queue.encode(), message)], headers), f"request {request_id}")
            outcome = await asyncio.wait_for(answer, self.submit_timeout_s)
        except TimeoutError as exc:
            raise ApiError(504, f"request {request_id} is on the log but was not processed in time; check its jobs later") from exc
        except ArchiveUnavailable as exc:
            raise ApiError(503, f"request {request_id} was processed but its jobs are not archived: {exc.reason}") from exc
        finally:
            self.replies.forget(request_id)
        accepted = [item["job_id"] for item in outcome if "job_id" in item]
        if accepted and await self.reads.await_jobs(principal, accepted, VISIBILITY_TIMEOUT_S):
            raise ApiError(504, "the submitted jobs were written to the log but are not visible yet; retry the read")
        return Submitted(request_id, outcome)

    # ------------------------------------------------------------------ jobs

    async def job(self, principal: Principal, job_id: str) -> dict[str, Any]:
        """The job's state; its queue's owners and administrators may read it (Armada's watch permission)."""
        job = (await self.reads.jobs(principal, [job_id])).get(job_id)
        if job is None:
            raise ApiError(404, f"job {job_id!r} not found")
        return job

    async def jobs(self, principal: Principal, job_ids: Collection[str]) -> dict[str, dict[str, Any]]:
        """Each known job of ``job_ids`` (unknown ones left out); the caller must be allowed to watch every one."""
        return await self.reads.jobs(principal, job_ids)

    async def annotated_jobs(self, principal: Principal, queue: str, job_set_id: str, key: str, value: str) -> list[dict[str, Any]]:
        """The job set's jobs whose annotation ``key`` is ``value``, for a caller who may watch the queue."""
        self.watchable(principal, queue)
        return await self.reads.job_set_annotated(principal, queue, job_set_id, key, value)

    async def runs(self, principal: Principal, run_ids: Collection[str]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
        """(job, run) for each of ``run_ids`` that exists; the caller must be allowed to watch each job.

        A run id names its job (`streams.domain.ids.run_id_for`), so each is one read of its job."""
        wanted = list(dict.fromkeys(run_ids))
        jobs = await self.reads.jobs(principal, [job_of_run(run_id) for run_id in wanted])
        found = []
        for run_id in wanted:
            job = jobs.get(job_of_run(run_id))
            run = next((run for run in job["runs"] if run["run_id"] == run_id), None) if job is not None else None
            if job is not None and run is not None:
                found.append((job, run))
        return found

    async def active_queues(self, principal: Principal) -> list[str]:
        """Queues with a queued, leased, pending or running job; any caller may ask, as in Armada."""
        return await self.reads.active_queues(principal)

    async def control_job(self, principal: Principal, job_id: str, payload: Payload, *, job_set: tuple[str, str] | None = None) -> str:
        """Cancel, preempt or reprioritise one job; returns the event id once the event is on the log.

        ``job_set`` (queue, job set id), when the caller named one, must be the job's.
        """
        verb = VERBS[payload[0]]
        job = (await self.reads.jobs(principal, [job_id], verb)).get(job_id)
        if job is None or (job_set is not None and (job["queue"], job["job_set_id"]) != job_set):
            where = "" if job_set is None else f" in job set {job_set[1]!r} of queue {job_set[0]!r}"
            raise ApiError(404, f"job {job_id!r} not found{where}")
        if job["state"] in JOB_TERMINAL:
            raise JobFinished(job, verb)
        return await self._write_control(principal, job["queue"], job["job_set_id"], job_id, payload)

    async def control_job_set(self, principal: Principal, queue: str, job_set_id: str, payload: Payload) -> str:
        """Cancel or reprioritise every unfinished job of the job set: one event the scheduler applies at its next cycle."""
        known = self.queue(principal, queue)
        self.permissions.check_queue(principal, VERBS[payload[0]], known)
        return await self._write_control(principal, queue, job_set_id, None, payload)

    async def cancel_in_states(
        self, principal: Principal, queue: str, job_set_id: str, payload: Payload, states: Collection[str]
    ) -> list[str]:
        """Cancel the job set's jobs that are in ``states`` now, one event per job (the job-set event has no filter).

        Jobs not in their table yet (submitted a moment ago) and jobs that finish meanwhile are left alone.
        Returns the ids of the jobs a cancel was written for.
        """
        self.permissions.check_queue(principal, VERBS[payload[0]], self.queue(principal, queue))
        cancelled = []
        for job_id, _ in await self.reads.job_set_rows(principal, queue, job_set_id, states):
            await self._write_control(principal, queue, job_set_id, job_id, payload)
            cancelled.append(job_id)
        return cancelled

    async def control_matching(self, principal: Principal, job_filter: JobFilter, payload: Payload, what: str) -> list[str]:
        """Cancel or preempt every job that ``job_filter`` matches, on every partition (Armada's
        CancelOnQueue, PreemptOnQueue, CancelOnExecutor, PreemptOnExecutor): an administrator's
        call, as Armada's cancel-any-jobs and preempt-any-jobs permissions. One event per job, the
        events of a job set in one sequence; returns the ids of the jobs, each acted on at the
        scheduler's next cycle. Jobs submitted a moment ago and not in their table yet are left alone."""
        self.permissions.check_admin(principal, what)
        for queue in job_filter.queues:
            self.queue(principal, queue)
        chosen = await self.reads.matching(principal, job_filter)
        by_job_set: dict[tuple[str, str], list[str]] = {}
        for queue, job_set_id, job_id in chosen:
            by_job_set.setdefault((queue, job_set_id), []).append(job_id)
        for (queue, job_set_id), job_ids in sorted(by_job_set.items()):
            created = self.ids.clock_ms()
            written = [events.event(new_id(created, self.ids.rng), created, job_id, payload) for job_id in job_ids]
            for sequence in events.sequences(queue, job_set_id, principal.user, principal.groups, written):
                sent = await self.topics.events.send(key=events.sequence_key(queue, job_set_id), value=encode("event_sequence", sequence))
                await sent
        return [job_id for _, _, job_id in chosen]

    async def set_executor_cordon(self, principal: Principal, executor: str, cordoned: bool, reason: str) -> str:
        """Cordon or uncordon an executor (Armada's UpsertExecutorSettings): an administrator's call, as
        the executor-wide cancel and preempt are. Returns the event's id once it is on the log; the
        scheduler places no new job on a cordoned executor's nodes from its next cycle on."""
        self.permissions.check_admin(principal, f"{'cordon' if cordoned else 'uncordon'} executor {executor!r}")
        try:
            payload = settings_payload(executor, cordoned, reason)
        except ValueError as exc:
            raise ApiError(400, str(exc)) from exc
        return await self._write_control(principal, SETTINGS_QUEUE, SETTINGS_JOB_SET, None, payload)

    def watchable(self, principal: Principal, queue: str) -> dict[str, Any]:
        """The queue whose job-set events the caller may stream."""
        known = self.queue(principal, queue)
        self.permissions.check_queue(principal, "watch", known)
        return known

    def check_watch(self, principal: Principal, job: dict[str, Any]) -> None:
        """The caller may read ``job`` (a job found some other way than in the table: a past state)."""
        check_job(self.permissions, self.queues, principal, "watch", job["job_id"], job["queue"])

    async def _write_control(self, principal: Principal, queue: str, job_set_id: str, job_id: str | None, payload: Payload) -> str:
        created = self.ids.clock_ms()
        event_id = new_id(created, self.ids.rng)
        (sequence,) = events.sequences(
            queue, job_set_id, principal.user, principal.groups, [events.event(event_id, created, job_id, payload)]
        )
        await self._durably(self.topics.events, key=events.sequence_key(queue, job_set_id), value=encode("event_sequence", sequence))
        return event_id

    async def _durably(self, topic: Any, key: str, value: bytes | None) -> int:
        """Send one record and return its offset once it is durable; 503 with the reason when the archive cannot take it."""
        unavailable(self.durable)
        sent = await on_the_log(topic.send(key=key, value=value))
        try:
            await self.durable.wait(sent.topic, {sent.partition: sent.offset})
        except ArchiveUnavailable as exc:
            raise ApiError(503, f"written to the log but not archived: {exc.reason}") from exc
        return int(sent.offset)


async def on_the_log(sending: Awaitable[Awaitable[T]], request: str = "the change") -> T:
    """What the broker answered once it has the record(s) being sent; 503 when it did not take them,
    at once, rather than a wait for an answer that cannot come and a 504 claiming they are on the log."""
    try:
        return await (await sending)
    except KafkaError as exc:
        raise ApiError(503, f"the log did not acknowledge {request} ({exc!r}); retry it") from exc


def unavailable(durable: Durability) -> None:
    """Refuse a write before it is made when the archive cannot take it (a full disk, an unwritable directory)."""
    try:
        durable.check()
    except ArchiveUnavailable as exc:
        raise ApiError(503, f"not accepting changes: {exc.reason}") from exc
