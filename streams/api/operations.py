"""What the API does, whatever the transport: queues, submission, job control and job lookup.

REST views and gRPC servicers parse their requests, authenticate the caller into a `Principal`
and call these operations, so both transports share one set of rules: a caller is checked against
the queue's owners or the administrator groups before anything is written to the log, and every
write is answered once its effect is visible to this worker (job control: once its event is on
the log). Refusals are `ApiError`s whose HTTP status doubles as the kind of refusal; the gRPC
layer maps each to its status code.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from schemas.codec import SchemaError, encode
from streams.api.control_requests import VERBS, JobFilter, matching
from streams.api.errors import ApiError
from streams.api.job_queries import JobQueries
from streams.archive.durable import ArchiveUnavailable, Durability, NotArchived
from streams.auth import Permissions, Principal
from streams.domain import events
from streams.domain.admission import SubmissionLimits
from streams.domain.events import Payload
from streams.domain.ids import IdFactory, new_id
from streams.domain.queues import validate_queue
from streams.domain.states import JOB_TERMINAL

if TYPE_CHECKING:
    from streams.plane import Topics
    from streams.replies import Replies
    from streams.tables.jobs import JobStore
    from streams.tables.queues import QueueReplica

VISIBILITY_TIMEOUT_S = 10.0


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


async def until_visible(condition: Callable[[], bool], what: str) -> None:
    """Wait until a write made through the log is visible to this worker."""
    deadline = asyncio.get_running_loop().time() + VISIBILITY_TIMEOUT_S
    while not condition():
        if asyncio.get_running_loop().time() > deadline:
            raise ApiError(504, f"{what} was written to the log but is not visible yet; retry the read")
        await asyncio.sleep(0.02)


@dataclass
class Operations:
    queues: QueueReplica
    jobs: JobStore
    permissions: Permissions
    topics: Topics
    replies: Replies
    ids: IdFactory
    # The job index (job sets, active queues), as the job query API reads it.
    queries: JobQueries
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
        return await self._write_queue(queue)

    async def update_queue(self, principal: Principal, raw: dict[str, Any]) -> dict[str, Any]:
        """Replaces the whole definition, as Armada's UpdateQueue does."""
        self.permissions.check_admin(principal, f"update queue {raw.get('name')!r}")
        queue = self._valid_queue(raw)
        self.queue(principal, queue["name"])
        return await self._write_queue(queue)

    async def delete_queue(self, principal: Principal, name: str) -> None:
        self.permissions.check_admin(principal, f"delete queue {name!r}")
        self.queue(principal, name)
        await self._durably(self.topics.queues, key=name, value=None)
        await until_visible(lambda: self.queues.get(name) is None, f"deletion of queue {name!r}")

    @staticmethod
    def _valid_queue(raw: dict[str, Any]) -> dict[str, Any]:
        queue, reason = validate_queue(raw)
        if queue is None:
            raise ApiError(400, f"invalid queue: {reason}")
        return queue

    async def _write_queue(self, queue: dict[str, Any]) -> dict[str, Any]:
        await self._durably(self.topics.queues, key=queue["name"], value=encode("queue", queue))
        await until_visible(lambda: self.queues.get(queue["name"]) == queue, f"queue {queue['name']!r}")
        return queue

    # ------------------------------------------------------------------ submission

    async def submit(self, principal: Principal, queue: str, job_set_id: str, items: list[dict[str, Any]]) -> Submitted:
        """Items in the complete Avro `JobItem` shape; answered once the ingest agent has judged them and the
        accepted jobs are in this worker's jobs table, so a read right after sees them."""
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
            message = encode("submit_request", request)
        except SchemaError as exc:
            raise ApiError(400, f"invalid submit request: {exc}") from exc
        too_large = self.submission_limits.oversized(len(message))
        if too_large is not None:
            raise ApiError(413, too_large)
        unavailable(self.durable)
        answer = self.replies.expect(request_id)
        try:
            await self.topics.submissions.send(key=queue, value=message)
            outcome = await asyncio.wait_for(answer, self.submit_timeout_s)
        except TimeoutError as exc:
            raise ApiError(504, f"request {request_id} is on the log but was not processed in time; check its jobs later") from exc
        except ArchiveUnavailable as exc:
            raise ApiError(503, f"request {request_id} was processed but its jobs are not archived: {exc.reason}") from exc
        finally:
            self.replies.forget(request_id)
        unseen = {item["job_id"] for item in outcome if "job_id" in item}

        def folded() -> bool:
            unseen.difference_update([job_id for job_id in unseen if job_id in self.jobs])
            return not unseen

        await until_visible(folded, "the submitted jobs")
        return Submitted(request_id, outcome)

    # ------------------------------------------------------------------ jobs

    def job(self, principal: Principal, job_id: str) -> dict[str, Any]:
        """The job's state; its queue's owners and administrators may read it (Armada's watch permission)."""
        job = self.jobs.get(job_id)
        if job is None:
            raise ApiError(404, f"job {job_id!r} not found")
        self._check_job(principal, "watch", job)
        return job

    def jobs_of_job_set(self, principal: Principal, queue: str, job_set_id: str) -> list[dict[str, Any]]:
        """The job set's jobs as this worker's jobs table holds them now, for a caller who may watch the queue."""
        self.watchable(principal, queue)
        return [job for row in self.queries.current().job_set(queue, job_set_id) if (job := self.jobs.get(row.job_id)) is not None]

    def runs(self, principal: Principal, run_ids: Collection[str]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
        """(job, run) for each of ``run_ids`` this worker knows; the caller must be allowed to watch each job.

        A run id names its job (`streams.domain.ids.run_id_for`), so each is one read."""
        found = []
        for run_id in dict.fromkeys(run_ids):
            job = self.jobs.get(run_id.rpartition("-")[0])
            run = next((run for run in job["runs"] if run["run_id"] == run_id), None) if job is not None else None
            if job is not None and run is not None:
                self._check_job(principal, "watch", job)
                found.append((job, run))
        return found

    def active_queues(self, principal: Principal) -> list[str]:
        """Queues with a queued, leased, pending or running job; any caller may ask, as in Armada."""
        return sorted(self.queries.current().active_queues())

    async def control_job(self, principal: Principal, job_id: str, payload: Payload, *, job_set: tuple[str, str] | None = None) -> str:
        """Cancel, preempt or reprioritise one job; returns the event id once the event is on the log.

        ``job_set`` (queue, job set id), when the caller named one, must be the job's.
        """
        verb = VERBS[payload[0]]
        job = self.jobs.get(job_id)
        if job is None or (job_set is not None and (job["queue"], job["job_set_id"]) != job_set):
            where = "" if job_set is None else f" in job set {job_set[1]!r} of queue {job_set[0]!r}"
            raise ApiError(404, f"job {job_id!r} not found{where}")
        self._check_job(principal, verb, job)
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

        Jobs the table does not hold yet (submitted a moment ago) and jobs that finish meanwhile are left alone.
        Returns the ids of the jobs a cancel was written for.
        """
        self.permissions.check_queue(principal, VERBS[payload[0]], self.queue(principal, queue))
        cancelled = []
        for row in self.queries.current().job_set(queue, job_set_id):
            if row.state in states:
                await self._write_control(principal, queue, job_set_id, row.job_id, payload)
                cancelled.append(row.job_id)
        return cancelled

    async def control_matching(self, principal: Principal, job_filter: JobFilter, payload: Payload, what: str) -> list[str]:
        """Cancel or preempt every job this worker holds that ``job_filter`` matches (Armada's
        CancelOnQueue, PreemptOnQueue, CancelOnExecutor, PreemptOnExecutor): an administrator's
        call, as Armada's cancel-any-jobs and preempt-any-jobs permissions. One event per job, the
        events of a job set in one sequence; returns the ids of the jobs, each acted on at the
        scheduler's next cycle. Jobs submitted a moment ago and not in the table yet are left alone."""
        self.permissions.check_admin(principal, what)
        for queue in job_filter.queues:
            self.queue(principal, queue)
        rows = self.queries.current().in_states(job_filter.states, job_filter.queues)
        candidates = (row.job_id for row in rows if job_filter.executor is None or row.executor == job_filter.executor)
        chosen = matching((job for job_id in candidates if (job := self.jobs.get(job_id)) is not None), job_filter)
        by_job_set: dict[tuple[str, str], list[str]] = {}
        for job in chosen:
            by_job_set.setdefault((job["queue"], job["job_set_id"]), []).append(job["job_id"])
        for (queue, job_set_id), job_ids in sorted(by_job_set.items()):
            created = self.ids.clock_ms()
            written = [events.event(new_id(created, self.ids.rng), created, job_id, payload) for job_id in job_ids]
            for sequence in events.sequences(queue, job_set_id, principal.user, principal.groups, written):
                sent = await self.topics.events.send(key=events.sequence_key(queue, job_set_id), value=encode("event_sequence", sequence))
                await sent
        return [job["job_id"] for job in chosen]

    def watchable(self, principal: Principal, queue: str) -> dict[str, Any]:
        """The queue whose job-set events the caller may stream."""
        known = self.queue(principal, queue)
        self.permissions.check_queue(principal, "watch", known)
        return known

    def check_watch(self, principal: Principal, job: dict[str, Any]) -> None:
        """The caller may read ``job`` (a job found some other way than in the table: a past state)."""
        self._check_job(principal, "watch", job)

    def _check_job(self, principal: Principal, verb: str, job: dict[str, Any]) -> None:
        queue = self.queues.get(job["queue"])
        if queue is not None:
            self.permissions.check_queue(principal, verb, queue)
        else:  # a job outlives its deleted queue, whose owners are no longer known
            self.permissions.check_admin(principal, f"{verb} job {job['job_id']} of deleted queue {job['queue']!r}")

    async def _write_control(self, principal: Principal, queue: str, job_set_id: str, job_id: str | None, payload: Payload) -> str:
        created = self.ids.clock_ms()
        event_id = new_id(created, self.ids.rng)
        (sequence,) = events.sequences(
            queue, job_set_id, principal.user, principal.groups, [events.event(event_id, created, job_id, payload)]
        )
        await self._durably(self.topics.events, key=events.sequence_key(queue, job_set_id), value=encode("event_sequence", sequence))
        return event_id

    async def _durably(self, topic: Any, key: str, value: bytes | None) -> None:
        """Send one record and return once it is durable; 503 with the reason when the archive cannot take it."""
        unavailable(self.durable)
        sent = await (await topic.send(key=key, value=value))
        try:
            await self.durable.wait(sent.topic, {sent.partition: sent.offset})
        except ArchiveUnavailable as exc:
            raise ApiError(503, f"written to the log but not archived: {exc.reason}") from exc


def unavailable(durable: Durability) -> None:
    """Refuse a write before it is made when the archive cannot take it (a full disk, an unwritable directory)."""
    try:
        durable.check()
    except ArchiveUnavailable as exc:
        raise ApiError(503, f"not accepting changes: {exc.reason}") from exc
