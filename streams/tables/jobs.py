"""The `jobs` table: job id -> latest job state (job_state Avro), folded from `events`.

It is partitioned like `events` (by queue/job set): every event of a job arrives on one
partition, so the job's state lives with the worker that folds it. The table holds the encoded
bytes so that one encoding serves both the table and the `job-states` topic.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import faust

from schemas.codec import decode, encode
from streams.config import Settings
from streams.tables.types import TEXT_CODEC, TextKey


def jobs_table(app: faust.App, settings: Settings) -> faust.Table:
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
    )


@dataclass
class JobStore:
    """Typed access to the jobs table: dicts in and out, Avro bytes inside."""

    table: faust.Table

    def __contains__(self, job_id: str) -> bool:
        return job_id in self.table

    def get(self, job_id: str) -> dict[str, Any] | None:
        raw = self.table.get(job_id)
        return None if raw is None else decode("job_state", raw)

    def put(self, job: dict[str, Any]) -> bytes:
        """Store the job; returns its encoding for publishing. The fold built it, so no re-validation."""
        raw = encode("job_state", job, validate_record=False)
        self.table[job["job_id"]] = raw
        return raw
