"""The `jobs` table: job id -> latest job state (job_state schema), folded from `events`.

It is partitioned like `events` (by queue/job set): every event of a job arrives on one
partition, so the job's state lives with the worker that folds it.
"""

from __future__ import annotations

import faust

from streams.config import Settings
from streams.tables.types import TextKey, avro_value


def jobs_table(app: faust.App, settings: Settings) -> faust.Table:
    return app.Table(
        "jobs",
        key_type=TextKey,
        value_type=avro_value("job_state"),
        partitions=settings.partitions,
        help="Latest state of every job, by job id.",
    )
