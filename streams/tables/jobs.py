"""The `jobs` and `job-specs` tables: job id -> latest job state (job_state Avro), and job id -> the
job's spec (job_submitted Avro), both folded from `events`.

They are partitioned like `events` (by queue/job set): every event of a job arrives on one
partition, so the job's state lives with the worker that folds it. Each table holds encoded bytes,
so that one encoding serves both the table and its changelog, the public `job-states` and
`job-specs` topics. A job's spec is fixed at submission: it is stored once, when the job is
created, as the bytes its JobSubmitted event carried, and no later state repeats it.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import faust
from faust.types import TableT

from schemas.codec import Encoded, Partial, decode, decode_as_written, encode, encode_body, framed, writer_of
from streams.config import Settings
from streams.domain.states import JOB_TERMINAL
from streams.tables.batched import BatchProducer, write_puts
from streams.tables.store import read, read_many, store_options
from streams.tables.types import TEXT_CODEC, TextKey

# The Avro type of a job's spec, in events, job-specs and lease commands alike.
SPEC_TYPE = "flotilla.JobSubmitted"
# Specs and their pod specs, read shared (`schemas.compiled`): the jobs of a submission mostly have the
# same pod spec, often the same spec, and reading each anew was half the fold's decoding of the events
# (bench/restore.py).
SPECS_SHARED = frozenset({SPEC_TYPE, "flotilla.PodSpec"})
# A scheduling cycle's record, which the fold skips: it describes decisions, whose leases are events of their own.
CYCLES_SKIPPED = frozenset({"flotilla.SchedulingCycle"})
# What the fold reads of a spec in `events`: the job state's fields (`streams.domain.jobs`), its scheduling
# shape (`streams.scheduler.feed.spec_fields`), its grace period (`streams.scheduler.commands`) and its labels
# (`streams.domain.job_index.row_of`). The rest (images, commands, arguments, environments, limits, ports,
# services...) is walked over, not built: the spec is stored and sent as the bytes it was read from. Reading
# the sequences with their specs whole was ~14% of the worker's py-spy samples in bench/ingest.py.
SPEC_FOLDED = frozenset(
    {
        (SPEC_TYPE, frozenset({"priority", "priority_class", "client_id", "labels", "annotations", "pod_spec"})),
        (
            "flotilla.PodSpec",
            frozenset({"containers", "init_containers", "node_selector", "tolerations", "affinity", "termination_grace_period_seconds"}),
        ),
        ("flotilla.Container", frozenset({"resources"})),
        ("flotilla.ResourceRequirements", frozenset({"requests"})),
    }
)


def read_sequence(value: bytes | None) -> dict[str, Any]:
    """An `events` message's event sequence as the job-state fold reads it: specs as `Partial` (`SPEC_FOLDED`),
    read shared with their pod specs, scheduling cycles' payloads None. Raises `SchemaError`."""
    return decode("event_sequence", value, keep=SPEC_TYPE, skip=CYCLES_SKIPPED, shared=SPECS_SHARED, only=SPEC_FOLDED)


def whole_job(job: dict[str, Any]) -> dict[str, Any]:
    """``job`` with its whole spec: read again from its encoding when the fold read part of it (`read_sequence`)."""
    spec = job["spec"]
    if type(spec) is not Partial:
        return job
    return {**job, "spec": read_spec(framed("job_submitted", spec.encoding))}


def read_spec(raw: bytes) -> dict[str, Any]:
    """A whole spec from its `job_submitted` message, as `Encoded` (written back as these bytes) and read shared."""
    return decode("job_submitted", raw, keep=SPEC_TYPE, shared=SPECS_SHARED)


def read_folded_spec(raw: bytes) -> dict[str, Any]:
    """The part of a spec the fold reads (`SPEC_FOLDED`), from its `job_submitted` message, as `Partial` (written
    back as these bytes, read whole again by `whole_job`): a queued job is read back from the tables to fold
    its lease, and reading its spec whole was ~1% of the worker's py-spy samples under pipeline.py's stream."""
    return decode("job_submitted", raw, keep=SPEC_TYPE, shared=SPECS_SHARED, only=SPEC_FOLDED)


def jobs_table(app: faust.App, settings: Settings) -> TableT:
    return _bytes_table(app, settings, "jobs", "job-states", "Latest state of every job, by job id (job_state Avro).", store_options())


def job_specs_table(app: faust.App, settings: Settings) -> TableT:
    # Written once per job, read when a job is not in the job store's cache.
    options = store_options(write_buffer_mib=4, block_cache_mib=8)
    return _bytes_table(app, settings, "job-specs", "job-specs", "Every job's spec, by job id (job_submitted Avro).", options)


def _bytes_table(app: faust.App, settings: Settings, name: str, topic: str, help: str, options: dict[str, Any]) -> TableT:
    return app.Table(
        name,
        key_type=TextKey,
        value_type=bytes,
        partitions=settings.partitions,
        changelog_topic=app.topic(
            settings.topic(topic),
            key_serializer=TEXT_CODEC,
            value_serializer="raw",
            partitions=settings.partitions,
            compacting=True,
        ),
        help=help,
        options=options,
    )


class MissingSpec(LookupError):
    """A job whose spec neither `job-specs` nor its stored state holds: the tables lost data."""


def spec_encoding(spec: dict[str, Any]) -> bytes:
    """The Avro body of a job's spec: the bytes it was read from when it came from `events` or `job-specs`."""
    return spec.encoding if isinstance(spec, Encoded) else encode_body("job_submitted", spec)


@dataclass
class JobStore:
    """Typed access to the jobs and job-specs tables: dicts in and out (a job with its spec under
    ``spec``, as the fold and the API see it), Avro bytes inside.

    The fold writes a batch of jobs at once: `put` keeps each job's latest state pending (the fold
    reads it back with `latest`) until the agent writes them with one `TableBatch` per table
    (`write_specs`, then `write_states` once what the batch sends is acknowledged); readers (`get`, `in`) see the
    tables only. A job is encoded then, once per batch whatever number of its events the batch
    folded, without its spec; a job created in the batch has its spec stored first, as the bytes
    its event carried (`spec_encoding`), so that a state is never stored without its spec.

    The fold reads the specs of the jobs it creates in part (`read_sequence`); readers get them whole.
    The jobs with a run stored or read by the fold last are also kept decoded: a run's events come
    close together (leased, pending, running), and decoding the job again, spec and all, would be
    most of each fold. A cached job is used only while the table holds the very bytes it came from, so a
    job another worker folded meanwhile (after a rebalance) is decoded afresh. The fold never
    mutates a job it reads.

    A state stored before release v5 carries its spec: it is read from there, and stored in
    `job-specs` with the job's next state.
    """

    table: TableT
    specs: TableT
    cache_size: int = 20_000
    # job id -> (stored state bytes, the job they encode, with its spec)
    _decoded: OrderedDict[str, tuple[bytes, dict[str, Any]]] = field(default_factory=OrderedDict, repr=False)
    # What the fold folded since the last `hand_over` (or `mark_written`), not yet in the tables.
    _pending: PendingWrites = field(default_factory=lambda: PendingWrites(), repr=False)
    # What was handed over and is being written: the fold of the next part builds on it meanwhile.
    _handed: PendingWrites = field(default_factory=lambda: PendingWrites(), repr=False)
    # Jobs whose spec `job-specs` lacks: created (or read from a state of before v5) by the batch.
    _unstored: set[str] = field(default_factory=set, repr=False)
    # Jobs the batch read from the tables whose spec `job-specs` holds (not kept decoded: a queued job's
    # lease): `put` need not read `job-specs` again for them (~1% of the worker's samples under a stream).
    _spec_stored: set[str] = field(default_factory=set, repr=False)
    # Done when `write_states` next writes a batch (`next_write`).
    _next_write: asyncio.Future[None] | None = field(default=None, repr=False)

    def missing(self, job_ids: Sequence[str]) -> list[str]:
        """The jobs of ``job_ids`` the table does not hold, in order: one multi-get per partition database
        (`read_many`). An API call's wait for the 100 jobs it submitted looked each one up through Faust
        (~20-30 us a job on this machine, py-spy of bench/api.py)."""
        return [job_id for job_id, raw in zip(job_ids, read_many(self.table, job_ids), strict=True) if raw is None]

    def raw(self, job_id: str) -> bytes | None:
        """The job's `job_state` Avro as the table holds it."""
        raw = read(self.table, job_id)
        return None if raw is None else bytes(raw)

    def spec_raw(self, job_id: str) -> bytes | None:
        """The job's spec, `job_submitted` Avro, as `job-specs` holds it (made from the state of a job
        stored before release v5, which carries it)."""
        raw = read(self.specs, job_id)
        if raw is not None:
            return bytes(raw)
        job = self.get(job_id)
        return None if job is None else framed("job_submitted", spec_encoding(job["spec"]))

    def get(self, job_id: str) -> dict[str, Any] | None:
        """The job as the tables hold it: what readers see (a batch's writes show once written)."""
        raw = read(self.table, job_id)
        if raw is None:
            return None
        cached = self._decoded.get(job_id)
        return whole_job(cached[1]) if cached is not None and cached[0] == raw else self._read(job_id, raw, read_spec)[0]

    def latest(self, job_id: str) -> dict[str, Any] | None:
        """The job as the fold left it, its batch's pending write included: what the fold builds on (its spec
        maybe in part)."""
        pending = self._pending.jobs.get(job_id) or self._handed.jobs.get(job_id)
        if pending is not None:
            return pending[1]
        raw = read(self.table, job_id)
        if raw is None:
            self._unstored.add(job_id)
            return None
        cached = self._decoded.get(job_id)
        if cached is not None and cached[0] == raw:
            return cached[1]
        job, stored = self._read(job_id, raw, read_folded_spec)
        if stored:
            self._spec_stored.add(job_id)
            self._remember(job_id, raw, job)
        else:  # read afresh until its next state is written with its spec
            self._unstored.add(job_id)
        return job

    def _read(self, job_id: str, raw: bytes, spec_of: Callable[[bytes], dict[str, Any]]) -> tuple[dict[str, Any], bool]:
        """The job ``raw`` encodes with its spec (read with ``spec_of`` from `job-specs`), and whether `job-specs` holds the spec."""
        job = decode("job_state", raw)
        spec_raw = read(self.specs, job_id)
        if spec_raw is not None:
            job["spec"] = spec_of(spec_raw)
            return job, True
        if writer_of("job_state", raw)[0].origin != "current":
            spec = decode_as_written("job_state", raw).get("spec")
            if spec is not None:
                job["spec"] = spec
                return job, False
        raise MissingSpec(f"job {job_id}: no spec on job-specs, and its stored state carries none")

    def put(self, job: dict[str, Any], partition: int) -> None:
        """Keep the job's new state for the batch's write (``partition``: its event's)."""
        job_id = job["job_id"]
        pending = self._pending
        if job_id in self._unstored or (
            job_id not in pending.jobs
            and job_id not in self._handed.jobs
            and job_id not in self._decoded
            and job_id not in self._spec_stored
            and read(self.specs, job_id) is None
        ):
            self._unstored.discard(job_id)
            pending.specs[job_id] = partition
        pending.jobs.pop(job_id, None)  # the table gets the batch's jobs in the order they last changed
        pending.jobs[job_id] = (partition, job)

    def pending(self) -> list[tuple[int, str, dict[str, Any]]]:
        """(partition, job id, job) of every pending write, in order. They stay pending, and
        readable, until `mark_written` says the table holds them."""
        return self._pending.listed()

    def hand_over(self) -> PendingWrites:
        """The pending writes, taken for writing (`write_specs`, `write_states`) while the fold goes on:
        it reads them (`latest`) until they are written. One part at a time: the last one handed over
        must be written before the next is."""
        writes, self._handed = self._pending, self._pending
        self._pending, self._unstored, self._spec_stored = PendingWrites(), set(), set()
        return writes

    def encoded(self, writes: PendingWrites | None = None) -> list[tuple[int, str, bytes]]:
        """(partition, job id, bytes) of every pending write (of ``writes`` when given), in order, each
        job encoded now (no re-validation: the fold built it), without its spec."""
        found = []
        for job_id, (partition, job) in (writes or self._pending).jobs.items():
            raw = encode("job_state", job, validate_record=False)
            self._remember(job_id, raw, job)
            found.append((partition, job_id, raw))
        return found

    def new_specs(self, writes: PendingWrites | None = None) -> list[tuple[int, str, bytes]]:
        """(partition, job id, job_submitted message) of the specs to store with the pending jobs (``writes``' when given)."""
        writes = writes or self._pending
        return [
            (partition, job_id, framed("job_submitted", spec_encoding(writes.jobs[job_id][1]["spec"])))
            for job_id, partition in writes.specs.items()
        ]

    def _remember(self, job_id: str, raw: bytes, job: dict[str, Any]) -> None:
        """Keep the job decoded if it has a run: its run's events come close together, while a job
        not yet leased waits for the scheduler, often for long. Decoded with its spec a job holds
        about 5 KiB, and a cache full of jobs just submitted held ~100 MiB of a worker's peak
        memory in bench/ingest.py, for no fold that read them again. A finished job is not kept either:
        no event changes it any more (most jobs of a refold end within its part)."""
        if not job["runs"] or job["state"] in JOB_TERMINAL:
            self._decoded.pop(job_id, None)
            return
        self._decoded[job_id] = (raw, job)
        self._decoded.move_to_end(job_id)
        if len(self._decoded) > self.cache_size:
            self._decoded.popitem(last=False)

    def mark_written(self) -> None:
        self._pending, self._unstored, self._spec_stored = PendingWrites(), set(), set()

    def forget_pending(self) -> None:
        """Drop what was folded and not written (an agent that failed before writing it folds its input again)."""
        self._pending, self._handed, self._unstored, self._spec_stored = PendingWrites(), PendingWrites(), set(), set()

    async def write_specs(self, producer: BatchProducer, writes: PendingWrites) -> None:
        """Write the specs of the jobs ``writes`` created (`hand_over`), `job-specs` and its changelog in one
        batch; before `write_states`, so that a job's state is never stored before its spec."""
        await self.write_encoded_specs(producer, self.new_specs(writes))

    async def write_states(self, producer: BatchProducer, writes: PendingWrites) -> None:
        """Write the jobs of ``writes``, the table and its changelog (`job-states`) in one batch, once their specs are written."""
        await write_puts(self.table, producer, self.encoded(writes))
        self.written(writes)
        self._wake_next_write()

    def _wake_next_write(self) -> None:
        waiting, self._next_write = self._next_write, None
        if waiting is not None and not waiting.done():
            waiting.set_result(None)

    def empty(self) -> bool:
        """Whether the jobs table holds no job (in this worker's partitions)."""
        return next(iter(self.table.keys()), None) is None

    async def write_encoded_specs(self, producer: BatchProducer, specs: Sequence[tuple[int, str, bytes]]) -> None:
        """Write (partition, job id, job_submitted message) specs that another process folded (a refold's child,
        `streams.agents.refold_child`: its own store's `new_specs`), as `write_specs` would; before their states."""
        await write_puts(self.specs, producer, specs)

    async def write_encoded_states(self, producer: BatchProducer, states: Sequence[tuple[int, str, bytes]]) -> None:
        """Write (partition, job id, job_state bytes) states another process folded and encoded (its own store's
        `encoded`), as `write_states` would."""
        await write_puts(self.table, producer, states)
        self._wake_next_write()

    def written(self, writes: PendingWrites) -> None:
        """The tables hold ``writes`` (handed over): the fold reads their jobs from there again."""
        if self._handed is writes:
            self._handed = PendingWrites()

    def next_write(self) -> asyncio.Future[None]:
        """Done once the fold next writes a batch of job states here: a caller waiting for jobs to be
        readable looks again then, not only at its next poll. Jobs also arrive by other ways (a table
        recovered after a rebalance), so a waiter still polls."""
        if self._next_write is None:
            self._next_write = asyncio.get_running_loop().create_future()
        return self._next_write


@dataclass
class PendingWrites:
    """Jobs folded and not yet in the tables: job id -> (partition of the event that changed it last, the
    job), in the order they last changed, and job id -> partition of the new jobs whose spec is stored with them."""

    jobs: dict[str, tuple[int, dict[str, Any]]] = field(default_factory=dict)
    specs: dict[str, int] = field(default_factory=dict)

    def listed(self) -> list[tuple[int, str, dict[str, Any]]]:
        return [(partition, job_id, job) for job_id, (partition, job) in self.jobs.items()]
