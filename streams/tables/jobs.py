"""The `jobs` table: job id -> latest job state (job_state Avro), folded from `events`.

It is partitioned like `events` (by queue/job set): every event of a job arrives on one
partition, so the job's state lives with the worker that folds it. The table holds the encoded
bytes so that one encoding serves both the table and the `job-states` topic.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

import faust
from faust.types import TableT

from schemas.codec import decode, splice
from streams.config import Settings
from streams.tables.batched import BatchProducer, TableBatch
from streams.tables.store import store_options
from streams.tables.types import TEXT_CODEC, TextKey


def jobs_table(app: faust.App, settings: Settings) -> TableT:
    return app.Table(
        "jobs",
        key_type=TextKey,
        value_type=bytes,
        partitions=settings.partitions,
        changelog_topic=app.topic(
            settings.topic("job-states"),
            key_serializer=TEXT_CODEC,
            value_serializer="raw",
            partitions=settings.partitions,
            compacting=True,
        ),
        help="Latest state of every job, by job id (job_state Avro).",
        options=store_options(),
    )


@dataclass
class JobStore:
    """Typed access to the jobs table: dicts in and out, Avro bytes inside.

    The fold writes a batch of jobs at once: `put` keeps each write pending (the fold reads it back
    with `latest`) until the agent writes them with one `TableBatch` (`write_pending`), once what
    the batch sends is acknowledged; readers (`get`, `in`) see the table only.

    The jobs stored last are also kept decoded: a job's events come close together (leased,
    pending, running), and decoding the full spec again was a fifth of each fold. A cached job is
    used only while the table holds the very bytes it came from, so a job another worker folded
    meanwhile (after a rebalance) is decoded afresh. The fold never mutates a job it reads.
    Likewise the spec's encoding is kept with them and spliced into the job's next states: the
    fold shares the spec between a job's states, and encoding it was most of each write.
    """

    table: TableT
    cache_size: int = 20_000
    # job id -> (stored bytes, the job they encode, its spec's encoding)
    _decoded: OrderedDict[str, tuple[bytes, dict[str, Any], bytes]] = field(default_factory=OrderedDict, repr=False)
    # job id -> (partition of the event that changed it, bytes): written by the fold, not yet in the table.
    _pending: dict[str, tuple[int, bytes]] = field(default_factory=dict, repr=False)

    def __contains__(self, job_id: str) -> bool:
        return job_id in self.table

    def raw(self, job_id: str) -> bytes | None:
        """The job's `job_state` Avro as the table holds it."""
        raw = self.table.get(job_id)
        return None if raw is None else bytes(raw)

    def get(self, job_id: str) -> dict[str, Any] | None:
        """The job as the table holds it: what readers see (a batch's writes show once written)."""
        return self._decoded_job(job_id, self.table.get(job_id))

    def latest(self, job_id: str) -> dict[str, Any] | None:
        """The job as the fold left it, its batch's pending write included: what the fold builds on."""
        pending = self._pending.get(job_id)
        return self._decoded_job(job_id, pending[1] if pending is not None else self.table.get(job_id))

    def _decoded_job(self, job_id: str, raw: bytes | None) -> dict[str, Any] | None:
        if raw is None:
            return None
        cached = self._decoded.get(job_id)
        if cached is not None and cached[0] == raw:
            return cached[1]
        return decode("job_state", raw)

    def put(self, job: dict[str, Any], partition: int) -> bytes:
        """Keep the job's new state for the batch's write (``partition``: its event's); returns its
        encoding. The fold built it, so no re-validation."""
        writer = splice("job_state", "spec")
        cached = self._decoded.get(job["job_id"])
        spec = cached[2] if cached is not None and cached[1]["spec"] is job["spec"] else writer.field_bytes(job["spec"])
        raw = writer.encode(job, spec)
        self._pending.pop(job["job_id"], None)  # the table gets a job's states in the order they were made
        self._pending[job["job_id"]] = (partition, raw)
        self._decoded[job["job_id"]] = (raw, job, spec)
        self._decoded.move_to_end(job["job_id"])
        if len(self._decoded) > self.cache_size:
            self._decoded.popitem(last=False)
        return raw

    def pending(self) -> list[tuple[int, str, bytes]]:
        """(partition, job id, bytes) of every pending write, in order. They stay pending, and
        readable, until `mark_written` says the table holds them."""
        return [(partition, job_id, raw) for job_id, (partition, raw) in self._pending.items()]

    def mark_written(self) -> None:
        self._pending = {}

    async def write_pending(self, producer: BatchProducer) -> None:
        """Write the pending jobs to the table and its changelog, `job-states`, in one batch."""
        batch = TableBatch(self.table, producer)
        for partition, job_id, raw in self.pending():
            batch.put(partition, job_id, raw)
        await batch.write()
        self.mark_written()
