"""Every read answered as with one worker, whichever worker is asked: routed to the owners and gathered.

A job's state lives in one partition of the jobs table, held by one worker. A job id leads to its
partition (`streams.domain.ids.job_partition`), a job set's key to its own (`key_hash`), and the
group's assignment to the worker holding it (`Owners`); that worker answers (`LocalReads`, in
process when it is this one, else through `/peer/v1/<op>` with the caller's credentials).
Lists, counts and the other reads over every job go to each owner for its partitions and are
merged: a page is merged by the query's sort key, which is total and the same on every worker, so
the cursor of a merged page (the key of its last row) continues it exactly on any worker.

An answer counts only when each partition was answered once, by the worker that held it when it
answered (every answer names its partitions); otherwise (a worker gone, recovering, or holding
other partitions than the assignment this worker last saw) the read is asked again, owners found
afresh, until `timeout_s`, then refused with 503. A killed worker is noticed by the group after
the session timeout; its partitions are then recovered by the workers that take them, and a read
waiting meanwhile is answered by them.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Awaitable, Callable, Collection, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

from schemas.codec import decode
from streams.api.control_requests import JobFilter
from streams.api.errors import ApiError
from streams.api.local_reads import LocalReads, NotHere, filter_json, query_json, unb64
from streams.api.owners import NoOwner, Owners
from streams.auth import PermissionDenied, Principal, Unauthenticated
from streams.domain.events import sequence_key
from streams.domain.ids import job_partition
from streams.domain.job_index import JobQuery, JobRow, Page
from streams.domain.partitioning import key_hash, partition_for
from streams.domain.states import JOB_STATE_ORDER
from streams.peers import PeerRefused, Peers, PeerUnavailable

T = TypeVar("T")

# Pause between attempts while the group settles.
RETRY_S = 0.25
# A peer's answer to a plain read takes far less; one that waits (for jobs, for queues) says how long.
CALL_TIMEOUT_S = 10.0


def refusal(exc: PeerRefused) -> Exception:
    """A peer's refusal as the same refusal here."""
    if exc.status == 401:
        return Unauthenticated(exc.reason)
    if exc.status == 403:
        return PermissionDenied(exc.reason)
    return ApiError(exc.status, exc.reason)


@dataclass
class Reads:
    local: LocalReads
    owners: Owners
    peers: Peers
    partitions: int
    timeout_s: float = 30.0

    # ------------------------------------------------------------------ asking

    async def _ask(self, url: str, op: str, principal: Principal, body: dict[str, Any], wait_s: float = 0.0) -> dict[str, Any]:
        if url == self.owners.me:
            return await self.local.answer(op, principal, body)
        try:
            return await self.peers.post(url, op, body, principal.credentials, CALL_TIMEOUT_S + wait_s)
        except PeerUnavailable as exc:
            raise NotHere(str(exc)) from exc
        except PeerRefused as exc:
            raise refusal(exc) from exc

    async def _retrying(self, what: str, attempt: Callable[[], Awaitable[T]]) -> T:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout_s
        while True:
            try:
                return await attempt()
            except (NotHere, NoOwner) as exc:
                if loop.time() + RETRY_S >= deadline:
                    raise ApiError(503, f"{what} could not be answered within {self.timeout_s:g} s: {exc}; retry shortly") from exc
            await asyncio.sleep(RETRY_S)

    async def _by_partition(
        self, what: str, op: str, principal: Principal, wanted: dict[int, dict[str, Any]], wait_s: float = 0.0
    ) -> dict[int, dict[str, Any]]:
        """Ask the owner of each partition of ``wanted`` (partition -> its part of the body) and give each partition's answer.

        One call per owner, with the parts of its partitions merged (list values concatenated)."""
        answered: dict[int, dict[str, Any]] = {}

        async def attempt() -> dict[int, dict[str, Any]]:
            pending = {p: part for p, part in wanted.items() if p not in answered}
            if not pending:
                return answered
            asked = self.owners.by_owner(pending)
            bodies = [_merged(pending[p] for p in partitions) for partitions in asked.values()]
            answers = await asyncio.gather(*(self._ask(url, op, principal, body, wait_s) for url, body in zip(asked, bodies, strict=True)))
            for partitions, answer in zip(asked.values(), answers, strict=True):
                held = set(answer["partitions"])
                answered.update({p: answer for p in partitions if p in held})
            missing = sorted(set(wanted) - set(answered))
            if missing:
                raise NotHere(f"partitions {missing} moved: the group is rebalancing")
            return answered

        return await self._retrying(what, attempt)

    async def _everywhere(self, what: str, op: str, principal: Principal, body: dict[str, Any]) -> list[dict[str, Any]]:
        """Each owner's answer for its partitions, once every partition is answered exactly once."""

        async def attempt() -> list[dict[str, Any]]:
            asked = self.owners.by_owner(range(self.partitions))
            answers = await asyncio.gather(*(self._ask(url, op, principal, body) for url in asked))
            for (url, partitions), answer in zip(asked.items(), answers, strict=True):
                if sorted(answer["partitions"]) != partitions:
                    raise NotHere(f"worker {url} holds partitions {answer['partitions']}, not {partitions}: the group is rebalancing")
            return list(answers)

        return await self._retrying(what, attempt)

    # ------------------------------------------------------------------ jobs by id

    async def jobs(self, principal: Principal, job_ids: Iterable[str]) -> dict[str, dict[str, Any]]:
        """Each job of ``job_ids`` that exists (unknown ids are left out); PermissionDenied if the caller may not watch one."""
        wanted: dict[int, dict[str, Any]] = {}
        for job_id in dict.fromkeys(job_ids):
            partition = job_partition(job_id, self.partitions)
            if partition is not None:  # not an id ingest made: no such job
                wanted.setdefault(partition, {"job_ids": []})["job_ids"].append(job_id)
        if not wanted:
            return {}
        answers = await self._by_partition("reading jobs", "jobs", principal, wanted)
        found: dict[str, dict[str, Any]] = {}
        for partition, part in wanted.items():
            answer = answers[partition]
            for job_id in part["job_ids"]:
                if job_id in answer["denied"]:
                    raise PermissionDenied(answer["denied"][job_id])
                if job_id in answer["jobs"]:
                    found[job_id] = job_of(answer, job_id)
        return found

    async def await_jobs(self, principal: Principal, job_ids: Collection[str], timeout_s: float) -> list[str]:
        """Wait until every job of ``job_ids`` can be read (from any worker); those still missing after ``timeout_s``."""
        wanted: dict[int, dict[str, Any]] = {}
        for job_id in job_ids:
            partition = job_partition(job_id, self.partitions)
            assert partition is not None, f"job id {job_id} was not made by ingest"
            wanted.setdefault(partition, {"job_ids": [], "timeout_s": timeout_s})["job_ids"].append(job_id)
        answers = await self._by_partition("waiting for the submitted jobs", "await-jobs", principal, wanted, timeout_s)
        missing = {job_id for answer in answers.values() for job_id in answer["missing"]}
        return sorted(job_id for part in wanted.values() for job_id in part["job_ids"] if job_id in missing)

    # ------------------------------------------------------------------ one job set

    def _job_set_partition(self, queue: str, job_set: str) -> int:
        return partition_for(key_hash(sequence_key(queue, job_set).encode()), self.partitions)

    async def job_set_rows(self, principal: Principal, queue: str, job_set: str, states: Collection[str] = ()) -> list[tuple[str, str]]:
        """(job id, state) of the job set's jobs in ``states`` (all when empty), in submission order."""
        partition = self._job_set_partition(queue, job_set)
        body = {"queue": queue, "job_set": job_set, "states": sorted(states)}
        answers = await self._by_partition(f"reading job set {job_set!r}", "job-set-rows", principal, {partition: body})
        return [(job_id, state) for job_id, state in answers[partition]["rows"]]

    async def job_set_annotated(self, principal: Principal, queue: str, job_set: str, key: str, value: str) -> list[dict[str, Any]]:
        """The job set's jobs whose annotation ``key`` is ``value``."""
        partition = self._job_set_partition(queue, job_set)
        body = {"queue": queue, "job_set": job_set, "key": key, "value": value}
        answers = await self._by_partition(f"reading job set {job_set!r}", "job-set-annotated", principal, {partition: body})
        return [job_of(answers[partition], job_id) for job_id in answers[partition]["jobs"]]

    # ------------------------------------------------------------------ every job

    async def page(self, principal: Principal, query: JobQuery) -> Page:
        """The page ``query`` asks for among every partition's jobs: each owner's page merged by the query's sort key."""
        answers = await self._everywhere("listing jobs", "page", principal, {"query": query_json(query)})
        rows = [JobRow.decode(job_id, raw.encode()) for answer in answers for job_id, raw in answer["rows"]]
        rows.sort(key=query.key_of, reverse=query.descending)
        more = len(rows) > query.limit or any(answer["more"] for answer in answers)
        rows = rows[: query.limit]
        return Page(rows, query.key_of(rows[-1]) if more and rows else None)

    async def counts(self, principal: Principal, group_by: str, queues: Collection[str]) -> list[dict[str, Any]]:
        """Jobs per state of each group over every partition."""
        body = {"group_by": group_by, "queues": sorted(queues)}
        answers = await self._everywhere("counting jobs", "counts", principal, body)
        totals: dict[tuple[str, ...], Counter[str]] = {}
        for answer in answers:
            for group in answer["groups"]:
                name = (group["queue"], group["job_set"]) if "job_set" in group else (group["queue"],)
                totals.setdefault(name, Counter()).update(group["counts"])
        return [
            {"queue": name[0], **({"job_set": name[1]} if len(name) > 1 else {}), "counts": {s: counts.get(s, 0) for s in JOB_STATE_ORDER}}
            for name, counts in sorted(totals.items())
        ]

    async def active_queues(self, principal: Principal) -> list[str]:
        answers = await self._everywhere("finding active queues", "active-queues", principal, {})
        return sorted({queue for answer in answers for queue in answer["queues"]})

    async def matching(self, principal: Principal, job_filter: JobFilter) -> list[tuple[str, str, str]]:
        """(queue, job set, job id) of every job ``job_filter`` matches, by job id."""
        answers = await self._everywhere("selecting jobs", "matching", principal, {"filter": filter_json(job_filter)})
        return sorted(((queue, job_set, job_id) for answer in answers for queue, job_set, job_id in answer["jobs"]), key=lambda j: j[2])

    # ------------------------------------------------------------------ every worker

    async def queues_at(self, principal: Principal, offset: int, timeout_s: float) -> None:
        """Wait until every worker's queue replica has read the `queues` record at ``offset``, so any of them answers with it.

        A worker that cannot be reached is left out: it is gone, and reads the topic from its start when it comes back."""
        body = {"offset": offset, "timeout_s": timeout_s}

        async def one(url: str) -> None:
            try:
                answer = await self._ask(url, "queues-at", principal, body, timeout_s)
            except NotHere:
                return
            if answer["position"] <= offset:
                raise ApiError(504, f"worker {url} has not read the queue change yet; retry the read")

        await asyncio.gather(*(one(url) for url in self.owners.members()))

    async def scheduler(self, principal: Principal, op: str, body: dict[str, Any]) -> dict[str, Any]:
        """``op`` answered by the worker that schedules (this one while none does)."""

        async def attempt() -> dict[str, Any]:
            return await self._ask(self.owners.scheduler() or self.owners.me, op, principal, body)

        return await self._retrying("asking the scheduling worker", attempt)


def _merged(parts: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """Bodies for several partitions as one: list values concatenated, other values taken as they are."""
    merged: dict[str, Any] = {}
    for part in parts:
        for key, value in part.items():
            if isinstance(value, list):
                merged.setdefault(key, []).extend(value)
            else:
                merged[key] = value
    return merged


def job_of(answer: dict[str, Any], job_id: str) -> dict[str, Any]:
    """A job a peer sent: its state, and its spec apart (a job state carries none since release v5)."""
    job = decode("job_state", unb64(answer["jobs"][job_id]))
    job["spec"] = decode("job_submitted", unb64(answer["specs"][job_id]))
    return job
