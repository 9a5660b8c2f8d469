"""The `job-index` table: job id -> the job's row for queries (`streams.domain.job_index.JobRow`).

Partitioned like `jobs` (each row goes to the partition of the event that changed the job), and
written by the job-state agent with one `TableBatch` per fold batch, just before the batch's job
states (`JobIndexStore.write_pending`). Rows are compared with the index's own, not with the job's
previous state: a batch folded again after a crash, whose job states the table already held,
still writes any row the crash lost, because the index is written first.

Besides a row per job it holds an entry per job set with requests (cancel or reprioritise the
job set): where they are on `events` (keys `job-set:["queue","job set"]`), for the pages of the
job set's jobs.

The rows of this worker's active partitions are held in memory as a `JobIndex` with its sorted
lists; it is rebuilt from the table (one read of small rows, each list sorted once) after every
rebalance, so queries never read the jobs table. A row written is moved between the lists when the
index is next read (`current`), not as it is written: a job's row changes about four times on its
way to running (queued, leased, pending, running), the last three mostly between two reads, and is
then moved once for all of them (the lists and counts depend only on the rows held, so a read finds what moving each
row as written would have made). While a restored log is refolded the fold holds its rows without
moving them at all (``listed=False``): the lists are sorted once when the index is next read, which
costs a refold about a third of moving each row as it changes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import faust
from faust.types import TableT

from streams.config import Settings
from streams.domain.job_index import (
    REQUESTS_PREFIX,
    JobIndex,
    JobRow,
    Position,
    decode_requests,
    encode_requests,
    group_counts,
    merged_events,
    row_of,
    with_events,
)
from streams.tables.batched import BatchProducer, write_puts
from streams.tables.store import store_options
from streams.tables.types import TextKey

# Rows held unmoved at most (see the module's docstring); a few hundred bytes each.
MOST_UNMOVED = 50_000


def job_index_table(app: faust.App, settings: Settings) -> TableT:
    return app.Table(
        "job-index",
        key_type=TextKey,
        value_type=bytes,
        partitions=settings.partitions,
        help="Each job's row for the job query API and the UI, by job id.",
        options=store_options(),  # Faust's defaults: 64 MiB memtables and a 2 GiB block cache per partition
    )


@dataclass
class JobIndexStore:
    table: TableT
    _index: JobIndex | None = field(default=None, repr=False)  # None: to be rebuilt from the table
    _unlisted: bool = field(default=False, repr=False)  # the held rows are current, their lists are not
    # Rows written since the index was last read, the newest per job, not yet held by it (see the module's docstring).
    _unmoved: dict[str, JobRow] = field(default_factory=dict, repr=False)

    def forget(self, *args: Any, **kwargs: Any) -> None:
        """Partitions moved: the held rows are rebuilt from the table when next needed (a signal receiver)."""
        self._index, self._unlisted = None, False
        self._unmoved.clear()  # in the table already

    def current(self) -> JobIndex:
        """The index of this worker's active partitions (rebuilt first if they changed); call once tables are recovered."""
        index, unmoved = self._held(), self._unmoved
        if self._unlisted:
            index.rows.update(unmoved)
            index = self._index = JobIndex.of(index.rows.values(), index.requests.items())
        else:
            for row in unmoved.values():
                index.put(row)
        unmoved.clear()
        self._unlisted = False
        return index

    def group_counts(self, group_by: str, queues: tuple[str, ...], visible: Callable[[str], bool]) -> list[dict[str, Any]]:
        """`JobIndex.group_counts` of the current index, without moving the rows written since the last read.

        GET /metrics counts every queue's jobs at each scrape: through `current` each scrape moved the row of
        every job that changed since the one before, several sorted lists a row, though nothing read the lists
        (py-spy of bench/pipeline.py, which scrapes each worker at its phases' ends: 45 us a job with one worker,
        103 with two, where a job was more often scraped half-way). The counts of the rows held unmoved are
        worked out beside the index's instead; the rows move when a query reads the lists (or past `MOST_UNMOVED`)."""
        index = self._held()
        if self._unlisted:
            return self.current().group_counts(group_by, queues, visible)
        return group_counts(index.counts_with(self._unmoved.values()), group_by, queues, visible)

    def rebuild(self) -> None:
        """Rebuild the index if the partitions changed or a refold left its lists unsorted, so that no request
        waits for it; the rows written since it was read wait for the next read (the app calls this twice a
        second: moving them then would move a job's row at most of its changes again)."""
        if self._index is None or self._unlisted:
            self.current()

    def _held(self) -> JobIndex:
        """The held index, its rows' moves between lists not made yet (rebuilt from the table first if the partitions changed)."""
        if self._index is None:
            rows, requests = [], []
            for key, raw in self.table.items():
                if key.startswith(REQUESTS_PREFIX):
                    requests.append(decode_requests(key, raw))
                else:
                    rows.append(JobRow.decode(key, raw))
            self._index, self._unlisted = JobIndex.of(rows, requests), False
            self._unmoved.clear()
        return self._index

    async def write_pending(
        self,
        jobs: Iterable[tuple[int, str, dict[str, Any]]],
        producer: BatchProducer,
        events: Mapping[str, list[Position]],
        requests: Mapping[tuple[str, str], list[Position]],
        listed: bool = True,
    ) -> None:
        """Write the rows of the jobs the fold changed in this batch (``jobs``: (partition, job id, job), `JobStore.pending`), or whose
        ``events`` it read (a refused event is shown on the job's page too), that differ from the
        index's; and the positions of job sets' ``requests``. ``listed``: the rows are moved between the held
        index's lists when it is next read (False while a restored log is refolded: the lists are sorted anew then).

        Call it before the jobs are written: see the module's docstring."""
        index, unmoved = self._held(), self._unmoved
        held_rows = index.rows

        def newest(job_id: str) -> JobRow | None:
            return unmoved.get(job_id) or held_rows.get(job_id)

        puts, rows, held_requests = index_writes(newest, index.requests, jobs, events, requests)
        await write_puts(self.table, producer, puts)
        # Held once written, before the jobs table is: a caller told its jobs are in finds them in lists too (`current`).
        for row in rows:
            if not listed:
                unmoved.pop(row.job_id, None)
                held_rows[row.job_id] = row
            elif self._unlisted or row.job_id in held_rows:
                unmoved[row.job_id] = row  # a move, made when the index is next read
            else:
                index.put(row)  # a new job's row moves nowhere: held at once
        self._unlisted = self._unlisted or (not listed and bool(rows))
        index.requests.update(held_requests)
        if len(unmoved) > MOST_UNMOVED:  # a worker nobody reads from holds two rows of these jobs meanwhile
            self.current()

    async def write_rows(self, producer: BatchProducer, puts: Iterable[tuple[int, str, bytes]]) -> None:
        """Write rows and job-set request entries another process worked out (`index_writes`, a refold's child:
        `streams.agents.refold_child`); the held index is rebuilt from the table when next read."""
        await write_puts(self.table, producer, puts)
        self.forget()


def index_writes(
    held: Callable[[str], JobRow | None],
    known_requests: Mapping[tuple[str, str], tuple[Position, ...]],
    jobs: Iterable[tuple[int, str, dict[str, Any]]],
    events: Mapping[str, list[Position]],
    requests: Mapping[tuple[str, str], list[Position]],
) -> tuple[list[tuple[int, str, bytes]], list[JobRow], dict[tuple[str, str], tuple[Position, ...]]]:
    """What `JobIndexStore.write_pending` writes, worked out against ``held`` (a job's newest row, None for a new
    job) and the job sets' ``known_requests``, neither changed here: the (partition, key, value) puts, the changed
    rows and the job sets' merged request positions, to hold once written."""
    puts: list[tuple[int, str, bytes]] = []
    changed: dict[str, tuple[int, JobRow]] = {}
    for partition, job_id, job in jobs:
        row = held(job_id)
        changed[job_id] = (partition, row_of(job, merged_events(() if row is None else row.events, events.get(job_id, ()))))
    for job_id, positions in events.items():
        row = held(job_id)
        if job_id not in changed and row is not None:
            changed[job_id] = (positions[-1][0], with_events(row, row.events, positions))
    rows = []
    for job_id, (partition, row) in changed.items():
        if held(job_id) != row:
            puts.append((partition, job_id, row.encode()))
            rows.append(row)
    held_requests = {}
    for (queue, job_set), positions in requests.items():
        known = known_requests.get((queue, job_set), ())
        merged = tuple(sorted({*known, *positions}))
        if merged != known:
            key, value = encode_requests(queue, job_set, merged)
            puts.append((positions[-1][0], key, value))
            held_requests[(queue, job_set)] = merged
    return puts, rows, held_requests
