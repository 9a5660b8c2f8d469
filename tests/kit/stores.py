"""The jobs store over a plain dict instead of the Faust table, for tests of the fold without Faust."""

from __future__ import annotations

from streams.tables.jobs import JobStore


def dict_jobs(cache_size: int = 20_000) -> JobStore:
    return JobStore({}, {}, cache_size=cache_size)  # type: ignore[arg-type]  # dicts stand in for the Faust tables: the fold reads them as mappings


def settle(jobs: JobStore) -> None:
    """Write the store's pending specs and jobs into its dicts, as the agent's batch writes do into the tables."""
    for _, job_id, raw in jobs.new_specs():
        jobs.specs[job_id] = raw
    for _, job_id, raw in jobs.encoded():
        jobs.table[job_id] = raw
    jobs.mark_written()
