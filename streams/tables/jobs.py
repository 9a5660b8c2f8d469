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

from schemas.codec import Splice, decode, splice
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

    The fold writes a batch of jobs at once: `put` keeps each job's latest state pending (the fold
    reads it back with `latest`) until the agent writes them with one `TableBatch`
    (`write_pending`), once what the batch sends is acknowledged; readers (`get`, `in`) see the
    table only. A job is encoded then, once per batch whatever number of its events the batch
    folded: a restored log's batch holds most of each job's life, and encoding every state was
    a quarter of the refold.

    The jobs stored or read by the fold last are also kept decoded: a job's events come close
    together (leased, pending, running), and decoding the full spec again was a fifth of each
    fold. A cached job is used only while the table holds the very bytes it came from, so a job
    another worker folded meanwhile (after a rebalance) is decoded afresh. The fold never mutates
    a job it reads. Likewise the spec's encoding is kept with them (or cut out of the stored
    bytes) and spliced into the job's next states: the fold shares the spec between a job's
    states, and encoding it was most of each write.
    """

    table: TableT
    cache_size: int = 20_000
    # job id -> (stored bytes, the job they encode, its spec's encoding when known)
    _decoded: OrderedDict[str, tuple[bytes, dict[str, Any], bytes | None]] = field(default_factory=OrderedDict, repr=False)
    # job id -> (partition of the event that changed it last, the job): folded, not yet in the table.
    _pending: dict[str, tuple[int, dict[str, Any]]] = field(default_factory=dict, repr=False)
    # job id -> (spec, its encoding) made during the batch (for a lease command) before the job's write.
    _fresh_specs: dict[str, tuple[Any, bytes]] = field(default_factory=dict, repr=False)

    def __contains__(self, job_id: str) -> bool:
        return job_id in self.table

    def raw(self, job_id: str) -> bytes | None:
        """The job's `job_state` Avro as the table holds it."""
        raw = self.table.get(job_id)
        return None if raw is None else bytes(raw)

    def get(self, job_id: str) -> dict[str, Any] | None:
        """The job as the table holds it: what readers see (a batch's writes show once written)."""
        raw = self.table.get(job_id)
        if raw is None:
            return None
        cached = self._decoded.get(job_id)
        return cached[1] if cached is not None and cached[0] == raw else decode("job_state", raw)

    def latest(self, job_id: str) -> dict[str, Any] | None:
        """The job as the fold left it, its batch's pending write included: what the fold builds on."""
        pending = self._pending.get(job_id)
        if pending is not None:
            return pending[1]
        raw = self.table.get(job_id)
        if raw is None:
            return None
        cached = self._decoded.get(job_id)
        if cached is not None and cached[0] == raw:
            return cached[1]
        job = decode("job_state", raw)
        self._remember(job_id, raw, job, None)
        return job

    def put(self, job: dict[str, Any], partition: int) -> None:
        """Keep the job's new state for the batch's write (``partition``: its event's)."""
        self._pending.pop(job["job_id"], None)  # the table gets the batch's jobs in the order they last changed
        self._pending[job["job_id"]] = (partition, job)

    def pending(self) -> list[tuple[int, str, dict[str, Any]]]:
        """(partition, job id, job) of every pending write, in order. They stay pending, and
        readable, until `mark_written` says the table holds them."""
        return [(partition, job_id, job) for job_id, (partition, job) in self._pending.items()]

    def encoded(self) -> list[tuple[int, str, bytes]]:
        """(partition, job id, bytes) of every pending write, in order, each job encoded now (no
        re-validation: the fold built it)."""
        writer = splice("job_state", "spec")
        return [(partition, job_id, self._encode(writer, job_id, job)) for job_id, (partition, job) in self._pending.items()]

    def spec_bytes(self, job_id: str, spec: dict[str, Any]) -> bytes:
        """The encoding of ``spec``, the spec of the job the fold holds: kept from the job's last write
        or read (or cut out of its stored bytes), or made now and kept for the job's write."""
        return self._spec(splice("job_state", "spec"), job_id, spec)

    def _spec(self, writer: Splice, job_id: str, spec: dict[str, Any]) -> bytes:
        cached = self._decoded.get(job_id)
        if cached is not None and cached[1]["spec"] is spec:
            if cached[2] is not None:
                return cached[2]
            found = writer.field_in(cached[0], cached[1])
            if found is not None:
                self._decoded[job_id] = (cached[0], cached[1], found)
                return found
        fresh = self._fresh_specs.get(job_id)
        if fresh is not None and fresh[0] is spec:
            return fresh[1]
        made = writer.field_bytes(spec)
        self._fresh_specs[job_id] = (spec, made)
        return made

    def _encode(self, writer: Splice, job_id: str, job: dict[str, Any]) -> bytes:
        spec = self._spec(writer, job_id, job["spec"])
        raw = writer.encode(job, spec)
        self._remember(job_id, raw, job, spec)
        return raw

    def _remember(self, job_id: str, raw: bytes, job: dict[str, Any], spec: bytes | None) -> None:
        self._decoded[job_id] = (raw, job, spec)
        self._decoded.move_to_end(job_id)
        if len(self._decoded) > self.cache_size:
            self._decoded.popitem(last=False)

    def mark_written(self) -> None:
        self._pending, self._fresh_specs = {}, {}

    async def write_pending(self, producer: BatchProducer) -> None:
        """Write the pending jobs to the table and its changelog, `job-states`, in one batch."""
        batch = TableBatch(self.table, producer)
        for partition, job_id, raw in self.encoded():
            batch.put(partition, job_id, raw)
        await batch.write()
        self.mark_written()
