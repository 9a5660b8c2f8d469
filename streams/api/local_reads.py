"""What this worker answers from its own partitions: jobs by id, job sets, lists and counts, the scheduler's view.

Each read is an *op*: a name, a JSON body and a JSON answer, so that the worker routing a call
(`streams.api.reads`) runs the same code for its own partitions as another worker runs for its
partitions behind `/peer/v1/<op>`. Every answer names the partitions it covers (this worker's
active ones, as the assignment has them when it answers), so the router can prove a gathered
answer complete: each partition answered once. Nothing here reads a whole table: jobs are read
by key, and everything else from the job index's lists (`streams.domain.job_index`), among them
where a job's events are on `events`, which only the index of the job's partition keeps.

Ops check the caller as the public API would (watch on a queue, administrators for queue- and
executor-wide selections): a peer call carries the caller's own credentials.
"""

from __future__ import annotations

import asyncio
import base64
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from streams.api.control_requests import JobFilter, matching
from streams.api.errors import ApiError
from streams.auth import PermissionDenied, Permissions, Principal
from streams.auth.permissions import QUEUE_VERBS
from streams.domain.job_index import JobIndex, JobQuery, decode_cursor, encode_cursor
from streams.scheduler.view import ClusterView
from streams.tables.job_index import JobIndexStore
from streams.tables.jobs import JobStore
from streams.tables.queues import QueueReplica

# How often a wait (for submitted jobs, for a queue change) looks again.
_POLL_S = 0.02


class NotHere(Exception):
    """This worker cannot answer now (tables recovering, partitions moving): ask again, maybe elsewhere."""


def b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


def unb64(text: str) -> bytes:
    return base64.b64decode(text)


def query_json(query: JobQuery) -> dict[str, Any]:
    return {
        "queues": list(query.queues),
        "job_set": query.job_set,
        "states": list(query.states),
        "priority_classes": list(query.priority_classes),
        "labels": [list(pair) for pair in query.labels],
        "node": query.node,
        "submitted_from": query.submitted_from,
        "submitted_to": query.submitted_to,
        "sort": query.sort,
        "descending": query.descending,
        "limit": query.limit,
        "after": None if query.after is None else encode_cursor(query.after),
    }


def query_of(body: dict[str, Any]) -> JobQuery:
    try:
        return JobQuery(
            queues=tuple(body["queues"]),
            job_set=body["job_set"],
            states=tuple(body["states"]),
            priority_classes=tuple(body["priority_classes"]),
            labels=tuple((str(key), str(value)) for key, value in body["labels"]),
            node=body["node"],
            submitted_from=body["submitted_from"],
            submitted_to=body["submitted_to"],
            sort=body["sort"],
            descending=bool(body["descending"]),
            limit=int(body["limit"]),
            after=None if body["after"] is None else decode_cursor(body["after"]),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise ApiError(400, f"malformed job query: {exc!r}") from exc


def filter_json(job_filter: JobFilter) -> dict[str, Any]:
    return {
        "states": sorted(job_filter.states),
        "queues": sorted(job_filter.queues),
        "priority_classes": sorted(job_filter.priority_classes),
        "pools": sorted(job_filter.pools),
        "executor": job_filter.executor,
    }


def filter_of(body: dict[str, Any]) -> JobFilter:
    try:
        return JobFilter(
            states=frozenset(body["states"]),
            queues=frozenset(body["queues"]),
            priority_classes=frozenset(body["priority_classes"]),
            pools=frozenset(body["pools"]),
            executor=body["executor"],
        )
    except (KeyError, TypeError) as exc:
        raise ApiError(400, f"malformed job filter: {exc!r}") from exc


def texts(body: dict[str, Any], name: str) -> list[str]:
    """The body's list of strings ``name`` (empty when absent); 400 for anything else."""
    value = body.get(name) or []
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise ApiError(400, f"{name} must be a list of strings")
    return value


def check_job(permissions: Permissions, queues: QueueReplica, principal: Principal, verb: str, job_id: str, queue: str) -> None:
    """The caller may ``verb`` the job: as its queue's owner or an administrator; only an administrator once the queue is deleted."""
    known = queues.get(queue)
    if known is not None:
        permissions.check_queue(principal, verb, known)
    else:  # a job outlives its deleted queue, whose owners are no longer known
        permissions.check_admin(principal, f"{verb} job {job_id} of deleted queue {queue!r}")


Op = Callable[[Principal, dict[str, Any]], Awaitable[dict[str, Any]]]


@dataclass
class LocalReads:
    jobs: JobStore
    index: JobIndexStore
    queues: QueueReplica
    permissions: Permissions
    cluster: ClusterView
    # Reads are current: tables recovered, no rebalance in progress.
    ready: Callable[[], bool]
    # This worker's active partitions now.
    partitions: Callable[[], list[int]]
    me: str = ""  # this worker's address, named in the scheduler's answers

    def ops(self) -> dict[str, Op]:
        return {
            "jobs": self.read_jobs,
            "event-positions": self.event_positions,
            "job-set-rows": self.job_set_rows,
            "job-set-annotated": self.job_set_annotated,
            "page": self.page,
            "counts": self.counts,
            "active-queues": self.active_queues,
            "matching": self.matching,
            "await-jobs": self.await_jobs,
            "queues-at": self.queues_at,
            "cluster": self.cluster_view,
            "scheduling": self.scheduling,
        }

    async def answer(self, op: str, principal: Principal, body: dict[str, Any]) -> dict[str, Any]:
        found = self.ops().get(op)
        if found is None:
            raise ApiError(404, f"no peer operation {op!r}")
        try:
            return await found(principal, body)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:  # a body no worker sends
            raise ApiError(400, f"malformed {op} request: {exc!r}") from exc

    # ------------------------------------------------------------------ who may see what

    def visible(self, principal: Principal) -> Callable[[str], bool]:
        """Whether the caller may see a queue's jobs (watch); a deleted queue's jobs only an administrator."""
        if self.permissions.is_admin(principal):
            return lambda queue: True
        allowed: dict[str, bool] = {}

        def visible(queue: str) -> bool:
            if queue not in allowed:
                known = self.queues.get(queue)
                allowed[queue] = known is not None and self.permissions.may(principal, "watch", known)
            return allowed[queue]

        return visible

    def watchable(self, principal: Principal, queue: str) -> None:
        known = self.queues.get(queue)
        if known is None:
            raise ApiError(404, f"queue {queue!r} does not exist")
        self.permissions.check_queue(principal, "watch", known)

    def _current(self) -> tuple[list[int], JobIndex]:
        """This worker's partitions and the index of their jobs; NotHere while they are being recovered or moved."""
        if not self.ready():
            raise NotHere("this worker is recovering its tables")
        return self.partitions(), self.index.current()

    # ------------------------------------------------------------------ ops

    async def read_jobs(self, principal: Principal, body: dict[str, Any]) -> dict[str, Any]:
        """{"job_ids", "verb"} -> each job held here (its `job_state` Avro and its spec's `job_submitted`
        Avro, base64), or why the caller may not ``verb`` it (watch when not named)."""
        partitions, index = self._current()
        found: dict[str, str] = {}
        specs: dict[str, str] = {}
        denied: dict[str, str] = {}
        verb = body.get("verb", "watch")
        if verb not in QUEUE_VERBS:
            raise ApiError(400, f"unknown verb {verb!r}")
        for job_id in dict.fromkeys(texts(body, "job_ids")):
            # The fold writes a job's row before the job (streams/tables/job_index.py): a job held has its row.
            row, raw = index.rows.get(job_id), self.jobs.raw(job_id)
            if row is None or raw is None:
                continue
            try:
                check_job(self.permissions, self.queues, principal, verb, job_id, row.queue)
            except PermissionDenied as exc:
                denied[job_id] = str(exc)
                continue
            found[job_id], specs[job_id] = b64(raw), b64(self.jobs.spec_raw(job_id) or b"")
        return {"partitions": partitions, "jobs": found, "specs": specs, "denied": denied}

    async def event_positions(self, principal: Principal, body: dict[str, Any]) -> dict[str, Any]:
        """{"job_id"} -> where the job's events and its job set's requests are on `events` ([partition, offset],
        in order), kept in the job's index row here; null when the job is not here or its row was written
        before positions were kept."""
        job_id = body["job_id"]
        if not isinstance(job_id, str):
            raise ApiError(400, "job_id must be a string")
        partitions, index = self._current()
        row = index.rows.get(job_id)
        if row is not None:
            check_job(self.permissions, self.queues, principal, "watch", job_id, row.queue)
        positions = index.events_of(job_id)
        return {"partitions": partitions, "positions": None if positions is None else [list(p) for p in positions]}

    async def job_set_rows(self, principal: Principal, body: dict[str, Any]) -> dict[str, Any]:
        """{"queue", "job_set", "states"} -> the job set's [job id, state] here, in submission order, in ``states`` (all when empty)."""
        queue, job_set = str(body["queue"]), str(body["job_set"])
        self.watchable(principal, queue)
        partitions, index = self._current()
        states = set(texts(body, "states"))
        rows = [[row.job_id, row.state] for row in index.job_set(queue, job_set) if not states or row.state in states]
        return {"partitions": partitions, "rows": rows}

    async def job_set_annotated(self, principal: Principal, body: dict[str, Any]) -> dict[str, Any]:
        """{"queue", "job_set", "key", "value"} -> the job set's jobs here whose annotation ``key`` is ``value``."""
        queue, job_set = str(body["queue"]), str(body["job_set"])
        self.watchable(principal, queue)
        partitions, index = self._current()
        found, specs = {}, {}
        for row in index.job_set(queue, job_set):
            job = self.jobs.get(row.job_id)
            if job is not None and job["spec"]["annotations"].get(body["key"]) == body["value"]:
                found[row.job_id] = b64(self.jobs.raw(row.job_id) or b"")
                specs[row.job_id] = b64(self.jobs.spec_raw(row.job_id) or b"")
        return {"partitions": partitions, "jobs": found, "specs": specs}

    async def page(self, principal: Principal, body: dict[str, Any]) -> dict[str, Any]:
        """{"query"} -> this worker's first page of the query: rows (job id, encoded row) and whether more match."""
        query = query_of(body["query"])
        partitions, index = self._current()
        page = index.query(query, self.visible(principal))
        rows = [[row.job_id, row.encode().decode()] for row in page.rows]
        return {"partitions": partitions, "rows": rows, "more": page.next_after is not None}

    async def counts(self, principal: Principal, body: dict[str, Any]) -> dict[str, Any]:
        """{"group_by", "queues"} -> jobs per state of each group here."""
        partitions, index = self._current()
        try:
            groups = index.group_counts(str(body["group_by"]), tuple(texts(body, "queues")), self.visible(principal))
        except ValueError as exc:
            raise ApiError(400, str(exc)) from exc
        return {"partitions": partitions, "groups": groups}

    async def active_queues(self, principal: Principal, body: dict[str, Any]) -> dict[str, Any]:
        partitions, index = self._current()
        return {"partitions": partitions, "queues": sorted(index.active_queues())}

    async def matching(self, principal: Principal, body: dict[str, Any]) -> dict[str, Any]:
        """{"filter"} -> [queue, job set, job id] of every job here the filter matches; administrators only."""
        job_filter = filter_of(body["filter"])
        self.permissions.check_admin(principal, "select jobs across queues or executors")
        partitions, index = self._current()
        rows = index.in_states(job_filter.states, job_filter.queues)
        candidates = (row.job_id for row in rows if job_filter.executor is None or row.executor == job_filter.executor)
        chosen = matching((job for job_id in candidates if (job := self.jobs.get(job_id)) is not None), job_filter)
        return {"partitions": partitions, "jobs": [[job["queue"], job["job_set_id"], job["job_id"]] for job in chosen]}

    async def await_jobs(self, principal: Principal, body: dict[str, Any]) -> dict[str, Any]:
        """{"job_ids", "timeout_s"} -> once every job is in this worker's table, or the time is up: those still missing."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + min(float(body.get("timeout_s") or 0), 30.0)
        unseen = list(dict.fromkeys(texts(body, "job_ids")))
        while True:
            partitions, _ = self._current()
            unseen = self._unread(unseen)
            if not unseen:
                return {"partitions": partitions, "missing": []}
            if loop.time() > deadline:
                return {"partitions": partitions, "missing": sorted(self.jobs.missing(unseen))}
            await asyncio.wait((self.jobs.next_write(),), timeout=_POLL_S)

    def _unread(self, job_ids: list[str]) -> list[str]:
        """``job_ids`` less those this worker's table holds, as far as one look tells. A request's jobs are folded
        and written in the order submitted, so while the first is missing the rest mostly are too: a look reads
        the first alone, and once it is there the rest in one multi-get (`JobStore.missing`), not one Faust
        lookup per job (~100 of them per call; py-spy of bench/api.py), nor every job at every look."""
        if not job_ids or self.jobs.missing(job_ids[:1]):
            return job_ids
        return self.jobs.missing(job_ids[1:])

    async def queues_at(self, principal: Principal, body: dict[str, Any]) -> dict[str, Any]:
        """{"offset", "timeout_s"} -> once this worker's queue replica has read the `queues` record at ``offset``: its position."""
        offset = int(body["offset"])
        deadline = asyncio.get_running_loop().time() + min(float(body.get("timeout_s") or 0), 30.0)
        while self.queues.position <= offset and asyncio.get_running_loop().time() <= deadline:
            await asyncio.sleep(_POLL_S)
        return {"position": self.queues.position}

    async def cluster_view(self, principal: Principal, body: dict[str, Any]) -> dict[str, Any]:
        """The last cycle per pool and the executors as this worker sees them (all of it on the worker that
        schedules), and this worker's address."""
        cluster = self.cluster
        pools = [
            {
                "pool": pool,
                "cycle_time": int(cycle.inputs.now * 1000),
                "capacity": cycle.capacity(),
                "queues": cycle.queues(),
                "unschedulable": cycle.unschedulable(),
            }
            for pool, cycle in sorted(cluster.pools.items())
        ]
        executors = cluster.executors(int(time.time() * 1000))
        return {"scheduler_here": cluster.scheduling, "worker": self.me, "pools": pools, "executors": executors}

    async def scheduling(self, principal: Principal, body: dict[str, Any]) -> dict[str, Any]:
        """{"job_id"} -> why the last cycle here left the job queued or preempted it."""
        return {"scheduler_here": self.cluster.scheduling, "last_cycle_reason": self.cluster.why(str(body["job_id"]))}
