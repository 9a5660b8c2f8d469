"""Reads answered across workers as one worker holding every partition would answer them.

Two `LocalReads` stand for two workers, each holding the job index rows and jobs of its own
partitions; calls between them go through JSON as over HTTP. Pages are merged by the query's sort
key with a cursor that continues on either worker, counts are summed, jobs are found by their ids'
partitions, refusals come back as refusals, and partitions that moved are asked again.
"""

from __future__ import annotations

import asyncio
import json
import random
from dataclasses import dataclass, field, replace
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schemas.codec import decode, encode
from streams.api.errors import ApiError
from streams.api.local_reads import LocalReads, NotHere, query_json, query_of
from streams.api.reads import Reads
from streams.auth import PermissionDenied, Permissions, Principal, Unauthenticated
from streams.auth.principal import ANONYMOUS
from streams.domain.events import sequence_key
from streams.domain.ids import job_partition, routed_id
from streams.domain.job_index import JobIndex, JobQuery, JobRow, decode_cursor, encode_cursor, row_of
from streams.domain.partitioning import key_hash
from streams.peers import PeerRefused, PeerUnavailable
from streams.scheduler.view import ClusterView
from streams.tables.job_index import JobIndexStore
from tests.domain.test_job_index import brute_force, queries, rows
from tests.kit.jobs import ENVELOPE, Events, fold

PARTITIONS = 4
A, B = "http://a:1", "http://b:1"
QUEUES = {name: {"name": name, "priority_factor": 1.0, "user_owners": ["alice"], "group_owners": [], "cordoned": False} for name in "abc"}
QUEUES["team-a"] = {**QUEUES["a"], "name": "team-a"}
ALICE, BOB = Principal("alice", credentials="Bearer alice"), Principal("bob", credentials="Bearer bob")


# The job-specs table: job id -> job_submitted Avro, of the jobs `job` made.
SPECS: dict[str, bytes] = {}


class Jobs:
    """The jobs table of one worker: job id -> job_state Avro, and each job's spec from `SPECS`."""

    def __init__(self, jobs: dict[str, bytes]) -> None:
        self.jobs = jobs
        self._next_write: asyncio.Future[None] | None = None
        self.looked_up = 0  # job ids `missing` was asked about

    def raw(self, job_id: str) -> bytes | None:
        return self.jobs.get(job_id)

    def spec_raw(self, job_id: str) -> bytes | None:
        return SPECS.get(job_id) if job_id in self.jobs else None

    def missing(self, job_ids: list[str]) -> list[str]:
        self.looked_up += len(job_ids)
        return [job_id for job_id in job_ids if job_id not in self.jobs]

    def next_write(self) -> asyncio.Future[None]:
        if self._next_write is None:
            self._next_write = asyncio.get_running_loop().create_future()
        return self._next_write

    def write(self, jobs: dict[str, bytes]) -> None:
        """What the fold's `JobStore.write_states` does: the jobs are in the table, and waiters hear of it."""
        self.jobs.update(jobs)
        waiting, self._next_write = self.next_write(), None
        waiting.set_result(None)


def local(rows_: list[JobRow], partitions: list[int], jobs: dict[str, bytes] | None = None) -> LocalReads:
    index = JobIndexStore(table=None)  # type: ignore[arg-type]  # the held index is all these reads use
    index._index = JobIndex.of(rows_)
    return LocalReads(
        jobs=Jobs(jobs or {}),  # type: ignore[arg-type]
        index=index,
        queues=QUEUES,  # type: ignore[arg-type]  # a queue replica is read like a dict
        permissions=Permissions(),
        cluster=ClusterView(),
        ready=lambda: True,
        partitions=lambda: partitions,
    )


@dataclass
class Group:
    """The assignment (partition -> worker) and the calls between the workers, as Owners and Peers do them."""

    workers: dict[str, LocalReads]
    assignment: dict[int, str]
    me: str = A
    down: set[str] = field(default_factory=set)
    asked: list[tuple[str, str]] = field(default_factory=list)

    def owner(self, partition: int) -> str:
        return self.assignment[partition]

    def by_owner(self, partitions: Any) -> dict[str, list[int]]:
        grouped: dict[str, list[int]] = {}
        for partition in sorted(set(partitions)):
            grouped.setdefault(self.assignment[partition], []).append(partition)
        return grouped

    def scheduler(self) -> str | None:
        return B

    def members(self) -> list[str]:
        return sorted(self.workers)

    async def post(self, url: str, op: str, body: dict[str, Any], credentials: str | None = None, timeout_s: float = 0) -> dict[str, Any]:
        self.asked.append((url, op))
        if url in self.down:
            raise PeerUnavailable(f"{url} is down")
        principal = ANONYMOUS if credentials is None else Principal(credentials.removeprefix("Bearer "), credentials=credentials)
        try:
            answer = await self.workers[url].answer(op, principal, json.loads(json.dumps(body)))
        except NotHere as exc:
            raise PeerUnavailable(str(exc)) from exc
        except PermissionDenied as exc:
            raise PeerRefused(403, str(exc)) from exc
        except ApiError as exc:
            raise PeerRefused(exc.status, exc.reason) from exc
        return dict(json.loads(json.dumps(answer)))

    def reads(self, me: str, timeout_s: float = 2.0) -> Reads:
        self.me = me
        return Reads(local=self.workers[me], owners=self, peers=self, partitions=PARTITIONS, timeout_s=timeout_s)  # type: ignore[arg-type]


def two_workers(rows_: list[JobRow], jobs: dict[str, bytes] | None = None) -> Group:
    """Rows spread by a fixed draw over the partitions; A holds 0 and 1, B holds 2 and 3."""
    draw = random.Random(0)
    where = {row.job_id: draw.randrange(PARTITIONS) for row in rows_}
    where.update({job_id: job_partition(job_id, PARTITIONS) or 0 for job_id in jobs or {}})
    held = {A: [0, 1], B: [2, 3]}
    # the fold writes both
    rows_ = rows_ + [
        row_of({**decode("job_state", raw), "spec": decode("job_submitted", SPECS[job_id])}) for job_id, raw in (jobs or {}).items()
    ]
    workers = {
        url: local(
            [row for row in rows_ if where[row.job_id] in partitions],
            partitions,
            {job_id: raw for job_id, raw in (jobs or {}).items() if where[job_id] in partitions},
        )
        for url, partitions in held.items()
    }
    return Group(workers, {p: url for url, partitions in held.items() for p in partitions})


def pages(reads: Reads, query: JobQuery) -> list[str]:
    seen: list[str] = []
    after = None
    for _ in range(1000):
        page = asyncio.run(reads.page(ANONYMOUS, replace(query, after=after)))
        assert len(page.rows) <= query.limit
        seen += [row.job_id for row in page.rows]
        if page.next_after is None:
            return seen
        after = decode_cursor(encode_cursor(page.next_after))
    raise AssertionError("paging did not end")


@settings(max_examples=100)
@given(st.lists(rows, max_size=40, unique_by=lambda r: r.job_id), queries)
def test_paging_through_every_worker_finds_what_one_index_of_every_row_finds(every: list[JobRow], query: JobQuery) -> None:
    group = two_workers(every)
    wanted = brute_force(every, query, set(QUEUES))
    assert pages(group.reads(A), query) == wanted
    assert pages(group.reads(B), query) == wanted


@settings(max_examples=50)
@given(st.lists(rows, max_size=40, unique_by=lambda r: r.job_id), st.sampled_from(("queue", "job_set")))
def test_counts_and_active_queues_are_every_workers_summed(every: list[JobRow], group_by: str) -> None:
    reads = two_workers(every).reads(B)
    one = JobIndex.of(every)
    assert asyncio.run(reads.counts(ANONYMOUS, group_by, ())) == one.group_counts(group_by, (), lambda queue: True)
    assert asyncio.run(reads.active_queues(ANONYMOUS)) == sorted(one.active_queues())


def job(job_set: str, number: int) -> tuple[str, bytes]:
    """A submitted job of team-a's ``job_set``, with an id as ingest draws it; (id, job_state Avro)."""
    job_id = routed_id(1_700_000_000_000 + number, random.Random(number), key_hash(sequence_key("team-a", job_set).encode()))
    events = Events(job_id)
    state = fold([events.submitted()])
    assert state is not None
    state = {**state, "job_set_id": job_set}
    SPECS[job_id] = encode("job_submitted", state["spec"])
    return job_id, encode("job_state", state)


def test_a_job_is_read_from_the_worker_holding_its_partition_and_a_caller_is_checked_there() -> None:
    jobs = dict(job(f"set-{n}", n) for n in range(12))
    assert {job_partition(job_id, PARTITIONS) for job_id in jobs} == set(range(PARTITIONS)), "spread over every partition"
    group = two_workers([], jobs)
    reads = group.reads(A)
    found = asyncio.run(reads.jobs(ALICE, [*jobs, "no-such-job"]))
    assert sorted(found) == sorted(jobs) and {j["queue"] for j in found.values()} == {ENVELOPE["queue"]}
    assert {url for url, op in group.asked if op == "jobs"} == {B}, "A's own partitions are read in process"
    with pytest.raises(PermissionDenied, match="bob"):
        asyncio.run(reads.jobs(BOB, list(jobs)))


def test_a_jobs_event_positions_come_from_the_index_of_the_worker_holding_its_partition() -> None:
    """Each worker keeps the positions of its own jobs' events (and their job sets' requests) in its
    index; asked through either worker, a job's positions are its owner's, through JSON."""
    jobs = dict(job(f"set-{n}", n) for n in range(12))
    group = two_workers([], jobs)
    numbered = {job_id: n for n, job_id in enumerate(jobs)}
    for worker in group.workers.values():
        index = worker.index.current()
        for row in list(index.rows.values()):
            n = numbered[row.job_id]
            partition = job_partition(row.job_id, PARTITIONS) or 0
            index.put(replace(row, events=None if n == 5 else ((partition, 10 * n + 2), (partition, 10 * n))))
            index.requests[(row.queue, row.job_set)] = ((partition, 10 * n + 1),)
    owner = {job_id: group.workers[group.owner(job_partition(job_id, PARTITIONS) or 0)] for job_id in jobs}
    for me in (A, B):
        reads = group.reads(me)
        for job_id in jobs:
            found = asyncio.run(reads.event_positions(ALICE, job_id))
            assert found == owner[job_id].index.current().events_of(job_id)
            n, held = numbered[job_id], job_partition(job_id, PARTITIONS) or 0
            assert found == (None if n == 5 else ((held, 10 * n), (held, 10 * n + 1), (held, 10 * n + 2)))
        assert asyncio.run(reads.event_positions(ALICE, "no-such-job")) is None
    assert {url for url, op in group.asked if op == "event-positions"} == {A, B}, "each worker asked the other for its jobs"
    with pytest.raises(PermissionDenied, match="bob"):
        asyncio.run(group.reads(A).event_positions(BOB, next(j for j in jobs if owner[j] is group.workers[B])))


def test_a_job_read_to_act_on_it_checks_the_action_on_the_owning_worker() -> None:
    jobs = dict(job(f"set-{n}", n) for n in range(12))
    reads = two_workers([], jobs).reads(A)
    assert sorted(asyncio.run(reads.jobs(ALICE, list(jobs), "cancel"))) == sorted(jobs)
    with pytest.raises(PermissionDenied, match="may not cancel"):
        asyncio.run(reads.jobs(BOB, list(jobs), "cancel"))
    with pytest.raises(ApiError, match="unknown verb"):
        asyncio.run(reads.jobs(ALICE, list(jobs), "delete"))


def test_a_refusal_by_the_other_worker_is_the_callers_refusal() -> None:
    group = two_workers([])

    async def refused(*args: Any, **kwargs: Any) -> dict[str, Any]:
        raise PeerRefused(401, "invalid token")

    group.post = refused  # type: ignore[method-assign]
    with pytest.raises(Unauthenticated, match="invalid token"):
        asyncio.run(group.reads(A).active_queues(ALICE))


def test_partitions_that_moved_are_asked_again_of_their_new_owner() -> None:
    every = [queued(n) for n in range(8)]  # job n in partition n % 4
    # B has taken partition 1 over from A; the assignment A reads has not caught up yet.
    after = {A: [0], B: [1, 2, 3]}
    workers = {url: local([r for n, r in enumerate(every) if n % PARTITIONS in held], held) for url, held in after.items()}
    group = Group(workers, {0: A, 1: A, 2: B, 3: B})
    reads = group.reads(A, timeout_s=5.0)

    async def scenario() -> list[dict[str, Any]]:
        async def catch_up() -> None:
            await asyncio.sleep(0.3)
            group.assignment[1] = B

        caught_up = asyncio.ensure_future(catch_up())
        counts = await reads.counts(ANONYMOUS, "queue", ())
        await caught_up
        return counts

    assert asyncio.run(scenario()) == JobIndex.of(every).group_counts("queue", (), lambda queue: True)
    assert group.asked.count((B, "counts")) >= 2, "asked again once A's answer did not cover partition 1"


def test_a_worker_that_stays_unreachable_ends_the_read_with_503() -> None:
    group = two_workers([queued(1)])
    group.down.add(B)
    with pytest.raises(ApiError) as refused:
        asyncio.run(group.reads(A, timeout_s=0.6).counts(ANONYMOUS, "queue", ()))
    assert refused.value.status == 503 and "b:1" in refused.value.reason


def queued(number: int) -> JobRow:
    return JobRow(f"J{number:04d}", "a", "s1", "queued", 1.0, "armada-default", number, number, 0, None, None, (), None, False)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=8,
)
op_fields = [
    "job_ids",
    "queue",
    "job_set",
    "states",
    "key",
    "value",
    "query",
    "group_by",
    "queues",
    "filter",
    "timeout_s",
    "offset",
    "job_id",
]


@settings(max_examples=300)
@given(st.sampled_from(sorted(local([], [0]).ops())), st.dictionaries(st.sampled_from(op_fields), json_values, max_size=5))
def test_a_peer_call_with_any_body_is_answered_or_refused_with_a_reason(op: str, body: dict[str, Any]) -> None:
    """The peer routes are public: a body no worker sends is refused with the reason (400, or 404 for a
    queue that does not exist), never a crash."""
    worker = local([queued(1)], [0])
    worker.queues = SimpleNamespace(get=QUEUES.get, position=10)  # type: ignore[assignment]
    if "timeout_s" in body:
        body["timeout_s"] = 0  # the waits give up at once
    try:
        answer = asyncio.run(worker.answer(op, ANONYMOUS, body))
    except ApiError as exc:
        assert 400 <= exc.status < 500 and exc.reason
    else:
        assert isinstance(answer, dict)


@pytest.mark.parametrize("after", [None, (1_700_000_000_000, "J0001"), (0.1 + 0.2, "J0002")])
def test_a_query_sent_to_another_worker_is_the_same_query_there(after: tuple[int | float, str] | None) -> None:
    query = JobQuery(queues=("a",), labels=(("team", "x"),), sort="priority", descending=False, limit=7, after=after)
    assert query_of(json.loads(json.dumps(query_json(query)))) == query


def test_a_wait_for_submitted_jobs_ends_when_the_fold_writes_them_not_at_the_next_poll(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("streams.api.local_reads._POLL_S", 60.0)  # only the write can end the wait in time

    async def scenario() -> dict[str, Any]:
        reads = local([], list(range(PARTITIONS)))
        table = reads.jobs
        waiting = asyncio.ensure_future(reads.await_jobs(ALICE, {"job_ids": ["j1", "j2", "j3"], "timeout_s": 30}))
        await asyncio.sleep(0.01)
        table.write({"j1": b"1"})  # type: ignore[attr-defined]
        await asyncio.sleep(0.01)
        assert not waiting.done(), "j2 and j3 are not written yet"
        table.write({"j2": b"2", "j3": b"3"})  # type: ignore[attr-defined]
        return await asyncio.wait_for(waiting, 5.0)  # a minute's poll would time out here

    answer = asyncio.run(scenario())
    assert answer["missing"] == [] and answer["partitions"] == list(range(PARTITIONS))


def test_a_wait_for_submitted_jobs_that_times_out_names_every_job_still_missing() -> None:
    reads = local([], list(range(PARTITIONS)), {"j1": b"1", "j4": b"4"})
    answer = asyncio.run(reads.await_jobs(ALICE, {"job_ids": ["j1", "j2", "j3", "j4", "j2"], "timeout_s": 0.05}))
    assert answer["missing"] == ["j2", "j3"], "j4, after the first missing job, is found held"


def test_a_wait_reads_the_first_missing_job_alone_until_it_is_written_then_the_rest_together() -> None:
    """A request's jobs are written in the order submitted: every look at all 100 of them (or one lookup
    per job) cost the API more than the wait itself."""

    async def scenario() -> tuple[dict[str, Any], int, int]:
        reads = local([], list(range(PARTITIONS)))
        table: Any = reads.jobs
        job_ids = [f"j{number}" for number in range(100)]
        waiting = asyncio.ensure_future(reads.await_jobs(ALICE, {"job_ids": job_ids, "timeout_s": 30}))
        for _ in range(3):  # three writes of other jobs: three looks at j0 alone
            await asyncio.sleep(0.01)
            table.write({"other": b"x"})
        await asyncio.sleep(0.01)
        before = table.looked_up
        table.write({job_id: b"1" for job_id in job_ids})
        return await asyncio.wait_for(waiting, 5.0), before, table.looked_up

    answer, before, after = asyncio.run(scenario())
    assert answer["missing"] == []
    assert before <= 5, f"{before} job ids read while the first was missing: one per look"
    assert after - before == 100, "then the first alone and the other 99 together"
