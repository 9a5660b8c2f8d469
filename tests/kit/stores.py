"""The jobs store over a plain dict instead of the Faust table, for tests of the fold without Faust."""

from __future__ import annotations

from streams.tables.jobs import JobStore


def dict_jobs(cache_size: int = 20_000) -> JobStore:
    return JobStore({}, cache_size=cache_size)  # type: ignore[arg-type]  # a dict stands in for the Faust table: the fold reads it as a mapping


def settle(jobs: JobStore) -> None:
    """Write the store's pending jobs into its dict, as the agent's batch write does into the table."""
    for _, job_id, raw in jobs.encoded():
        jobs.table[job_id] = raw
    jobs.mark_written()
