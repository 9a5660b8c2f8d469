"""The `job-index` table: job id -> the job's row for queries (`streams.domain.job_index.JobRow`).

Partitioned like `jobs` (each row goes to the partition of the event that changed the job), and
written by the job-state agent with one `TableBatch` per fold batch, just before the batch's job
states (`JobIndexStore.write_pending`). Rows are compared with the index's own, not with the job's
previous state: a batch folded again after a crash, whose job states the table already held,
still writes any row the crash lost, because the index is written first.

The rows of this worker's active partitions are held in memory as a `JobIndex` with its sorted
lists; it is rebuilt from the table (one read of small rows, each list sorted once) after every
rebalance, so queries never read the jobs table.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import faust
from faust.types import TableT

from streams.config import Settings
from streams.domain.job_index import JobIndex, JobRow, row_of
from streams.tables.batched import BatchProducer, TableBatch
from streams.tables.jobs import JobStore
from streams.tables.types import TextKey


def job_index_table(app: faust.App, settings: Settings) -> TableT:
    return app.Table(
        "job-index",
        key_type=TextKey,
        value_type=bytes,
        partitions=settings.partitions,
        help="Each job's row for the job query API and the UI, by job id.",
    )


@dataclass
class JobIndexStore:
    table: TableT
    _index: JobIndex | None = field(default=None, repr=False)  # None: to be rebuilt from the table

    def forget(self, *args: Any, **kwargs: Any) -> None:
        """Partitions moved: the held rows are rebuilt from the table when next needed (a signal receiver)."""
        self._index = None

    def current(self) -> JobIndex:
        """The index of this worker's active partitions (rebuilt first if they changed); call once tables are recovered."""
        if self._index is None:
            self._index = JobIndex.of(JobRow.decode(job_id, raw) for job_id, raw in self.table.items())
        return self._index

    async def write_pending(self, jobs: JobStore, producer: BatchProducer) -> None:
        """Write the rows of the jobs the fold changed in this batch (``jobs``' pending writes) that differ from the index's.

        Call it before the jobs are written: see the module's docstring."""
        index = self.current()
        batch = TableBatch(self.table, producer)
        rows = []
        for partition, job_id, job in jobs.pending():
            row = row_of(job)
            if index.changed(row):
                batch.put(partition, job_id, row.encode())
                rows.append(row)
        await batch.write()
        # Held once written, before the jobs table is: a caller told its jobs are in finds them in lists too.
        for row in rows:
            index.put(row)
