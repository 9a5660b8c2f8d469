"""The job store's decoded cache never answers with a job the table no longer holds."""

from __future__ import annotations

from typing import Any

from schemas.codec import encode
from streams.tables.jobs import JobStore
from tests.kit.stores import settle
from tests.schemas.samples import job_state


def put(jobs: JobStore, job: dict[str, Any]) -> None:
    jobs.put(job, 0)
    settle(jobs)


def store(size: int = 20_000) -> tuple[JobStore, dict[str, bytes]]:
    table: dict[str, bytes] = {}
    return JobStore(table, cache_size=size), table  # type: ignore[arg-type]  # a dict stands in for the Faust table: the fold reads it as a mapping


def test_a_job_just_stored_is_read_back_without_decoding() -> None:
    jobs, _ = store()
    job = job_state()
    put(jobs, job)
    assert jobs.get(job["job_id"]) is job


def test_a_job_rewritten_in_the_table_by_someone_else_is_decoded_afresh() -> None:
    jobs, table = store()
    job = job_state()
    put(jobs, job)
    other: dict[str, Any] = {**job, "state": "cancelled", "reason": "cancelled elsewhere"}
    table[job["job_id"]] = encode("job_state", other)  # e.g. restored from the changelog after a rebalance
    read = jobs.get(job["job_id"])
    assert read is not job and read is not None and (read["state"], read["reason"]) == ("cancelled", "cancelled elsewhere")
    del table[job["job_id"]]
    assert jobs.get(job["job_id"]) is None


def test_the_cache_keeps_only_the_jobs_stored_last() -> None:
    jobs, _ = store(size=2)
    stored = [{**job_state(), "job_id": f"job-{i}"} for i in range(3)]
    for job in stored:
        put(jobs, job)
    evicted = jobs.get("job-0")
    assert evicted is not None and evicted["job_id"] == "job-0" and evicted is not stored[0]
    assert jobs.get("job-1") is stored[1] and jobs.get("job-2") is stored[2]


def test_every_state_of_a_job_is_stored_as_encode_writes_it() -> None:
    """The spec's encoding is reused while the job's states share its spec, and made afresh otherwise."""
    jobs, table = store()
    job = job_state()
    for state in ("queued", "leased", "running"):
        job = {**job, "state": state}
        put(jobs, job)
        assert table[job["job_id"]] == encode("job_state", job)
    replaced = {**job, "spec": {**job["spec"], "priority": job["spec"]["priority"] + 1}}
    put(jobs, replaced)
    assert table[job["job_id"]] == encode("job_state", replaced)


def test_a_pending_write_is_the_folds_to_read_and_readers_see_it_once_written() -> None:
    jobs, table = store()
    job = job_state()
    jobs.put(job, 0)
    assert jobs.latest(job["job_id"]) is job
    assert jobs.get(job["job_id"]) is None and job["job_id"] not in jobs
    settle(jobs)
    assert jobs.get(job["job_id"]) is job and job["job_id"] in jobs and job["job_id"] in table


def test_a_job_read_back_from_the_table_is_stored_again_as_encode_writes_it() -> None:
    """Its spec's encoding is cut out of the stored bytes instead of made afresh."""
    jobs, table = store()
    job = job_state()
    table[job["job_id"]] = encode("job_state", job)
    read = jobs.latest(job["job_id"])
    assert read is not None and read is not job
    leased = {**read, "state": "leased"}
    put(jobs, leased)
    assert table[job["job_id"]] == encode("job_state", leased)


def test_a_batch_stores_the_last_of_a_jobs_states_once() -> None:
    jobs, table = store()
    job = job_state()
    states = [{**job, "state": state} for state in ("queued", "leased", "running")]
    for state in states:
        jobs.put(state, 0)
    assert jobs.latest(job["job_id"]) is states[-1]
    assert [job_id for _, job_id, _ in jobs.encoded()] == [job["job_id"]]
    settle(jobs)
    assert table[job["job_id"]] == encode("job_state", states[-1])
