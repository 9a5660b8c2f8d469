"""The job store: each state stored without its spec, the spec stored once, and a decoded cache that
never answers with a job the tables no longer hold."""

from __future__ import annotations

import asyncio
import io
from pathlib import Path
from typing import Any

import pytest
from fastavro import schemaless_writer

from schemas import codec
from schemas.codec import Encoded, Partial, encode
from streams.tables.jobs import JobStore, MissingSpec, spec_encoding, whole_job
from tests.kit.plane import agent_plane
from tests.kit.stores import settle
from tests.schemas.samples import job_state, job_submitted, written_with
from tests.tables.test_batched import Recorded


def job(**changes: Any) -> dict[str, Any]:
    """A job as the fold holds it: its state and, under ``spec``, its spec (with every default, as read back)."""
    spec = dict(codec.decode("job_submitted", encode("job_submitted", job_submitted())))
    return {**job_state(), "spec": spec, **changes}


def put(jobs: JobStore, state: dict[str, Any]) -> None:
    jobs.put(state, 0)
    settle(jobs)


def store(size: int = 20_000) -> tuple[JobStore, dict[str, bytes], dict[str, bytes]]:
    table: dict[str, bytes] = {}
    specs: dict[str, bytes] = {}
    return JobStore(table, specs, cache_size=size), table, specs  # type: ignore[arg-type]  # dicts stand in for the Faust tables


def test_a_job_just_stored_is_read_back_without_decoding() -> None:
    jobs, _, _ = store()
    stored = job()
    put(jobs, stored)
    assert jobs.get(stored["job_id"]) is stored


def test_a_state_is_stored_without_its_spec_and_the_spec_once_beside_it() -> None:
    jobs, table, specs = store()
    first = job(state="queued")
    jobs.put(first, 3)
    assert jobs.new_specs() == [(3, first["job_id"], encode("job_submitted", first["spec"]))]
    settle(jobs)
    for state in ("leased", "running"):
        later = {**first, "state": state}
        jobs.put(later, 3)
        assert jobs.new_specs() == []  # stored with the job's first state, never again
        settle(jobs)
        assert table[first["job_id"]] == encode("job_state", later) and "spec" not in codec.decode("job_state", table[first["job_id"]])
    assert specs == {first["job_id"]: encode("job_submitted", first["spec"])}


def test_a_job_rewritten_in_the_table_by_someone_else_is_decoded_afresh_with_its_spec() -> None:
    jobs, table, _ = store()
    stored = job()
    put(jobs, stored)
    other: dict[str, Any] = {**stored, "state": "cancelled", "reason": "cancelled elsewhere"}
    table[stored["job_id"]] = encode("job_state", other)  # e.g. restored from the changelog after a rebalance
    read = jobs.get(stored["job_id"])
    assert read is not stored and read is not None and (read["state"], read["reason"]) == ("cancelled", "cancelled elsewhere")
    assert read["spec"] == stored["spec"]
    del table[stored["job_id"]]
    assert jobs.get(stored["job_id"]) is None


def test_a_job_read_back_has_its_spec_with_the_bytes_it_was_read_from() -> None:
    jobs, table, specs = store()
    stored = job()
    table[stored["job_id"]] = encode("job_state", stored)
    specs[stored["job_id"]] = encode("job_submitted", stored["spec"])
    read = jobs.latest(stored["job_id"])
    # The fold reads the part of the spec it folds (a Partial), which keeps the bytes whole; readers get it whole.
    assert read is not None and isinstance(read["spec"], Partial) and whole_job(read)["spec"] == stored["spec"]
    assert {name: read["spec"][name] for name in ("priority", "client_id", "labels")} == {
        name: stored["spec"][name] for name in ("priority", "client_id", "labels")
    }
    requests = [c["resources"]["requests"] for c in stored["spec"]["pod_spec"]["containers"]]
    assert [c["resources"]["requests"] for c in read["spec"]["pod_spec"]["containers"]] == requests
    assert spec_encoding(read["spec"]) == codec.encode_body("job_submitted", stored["spec"]) == spec_encoding(stored["spec"])
    got = jobs.get(stored["job_id"])
    assert got is not None and got["spec"] == stored["spec"] and isinstance(got["spec"], Encoded)
    leased = {**read, "state": "leased"}
    jobs.put(leased, 0)
    assert jobs.new_specs() == []
    settle(jobs)
    assert table[stored["job_id"]] == encode("job_state", leased)


class CountedReads(dict[str, bytes]):
    """A dict standing in for a table, counting the reads of its keys."""

    reads = 0

    def get(self, key: str, default: Any = None) -> Any:
        self.reads += 1
        return super().get(key, default)


def test_a_queued_job_read_back_to_be_leased_has_its_spec_read_once() -> None:
    table: dict[str, bytes] = {}
    specs = CountedReads()
    jobs = JobStore(table, specs)  # type: ignore[arg-type]  # dicts stand in for the Faust tables
    queued = job(state="queued", runs=[])
    table[queued["job_id"]] = encode("job_state", queued)
    specs[queued["job_id"]] = encode("job_submitted", queued["spec"])
    read = jobs.latest(queued["job_id"])
    assert read is not None and whole_job(read) == queued and specs.reads == 1
    leased = {**read, "state": "leased", "runs": job()["runs"][-1:]}
    jobs.put(leased, 0)
    assert specs.reads == 1 and jobs.new_specs() == []  # its spec is known to be stored: not looked up again
    settle(jobs)
    assert table[queued["job_id"]] == encode("job_state", leased)
    jobs.put({**queued, "job_id": "another", "state": "leased"}, 0)  # a job the store never read: its spec is looked up
    assert specs.reads == 2 and [job_id for _, job_id, _ in jobs.new_specs()] == ["another"]


def test_the_cache_keeps_only_the_jobs_stored_last() -> None:
    jobs, _, _ = store(size=2)
    stored = [job(job_id=f"job-{i}") for i in range(3)]
    for state in stored:
        put(jobs, state)
    evicted = jobs.get("job-0")
    assert evicted is not None and evicted["job_id"] == "job-0" and evicted is not stored[0] and evicted["spec"] == stored[0]["spec"]
    assert jobs.get("job-1") is stored[1] and jobs.get("job-2") is stored[2]


def test_a_job_without_a_run_is_not_kept_decoded() -> None:
    jobs, _, _ = store()
    queued = job(state="queued", runs=[])
    put(jobs, queued)
    read = jobs.get(queued["job_id"])
    assert read == queued and read is not queued  # decoded afresh from the table
    leased = {**queued, "state": "leased", "runs": job()["runs"][-1:]}
    put(jobs, leased)
    assert jobs.get(queued["job_id"]) is leased


def test_a_pending_write_is_the_folds_to_read_and_readers_see_it_once_written() -> None:
    jobs, table, _ = store()
    stored = job()
    jobs.put(stored, 0)
    assert jobs.latest(stored["job_id"]) is stored
    assert jobs.get(stored["job_id"]) is None and jobs.missing([stored["job_id"]]) == [stored["job_id"]]
    settle(jobs)
    assert jobs.get(stored["job_id"]) is stored and jobs.missing([stored["job_id"]]) == [] and stored["job_id"] in table


def test_a_batch_stores_the_last_of_a_jobs_states_once() -> None:
    jobs, table, _ = store()
    states = [job(state=state) for state in ("queued", "leased", "running")]
    assert jobs.latest(states[0]["job_id"]) is None
    for state in states:
        jobs.put(state, 0)
    assert jobs.latest(states[0]["job_id"]) is states[-1]
    assert [job_id for _, job_id, _ in jobs.encoded()] == [states[0]["job_id"]]
    assert [job_id for _, job_id, _ in jobs.new_specs()] == [states[0]["job_id"]]
    settle(jobs)
    assert table[states[0]["job_id"]] == encode("job_state", states[-1])


def release_v3_state(state: dict[str, Any]) -> bytes:
    """``state`` as release v3 stored it, its spec inside."""
    writer = codec.parse_directory(codec.FROZEN_DIR / "v3")["job_state"]
    body = io.BytesIO()
    schemaless_writer(body, writer, {**written_with(writer, "job_state"), **state})
    return codec.SINGLE_OBJECT_MAGIC + codec.schema_fingerprint(writer) + body.getvalue()


def test_a_state_stored_before_release_v5_gives_its_spec_which_is_stored_with_the_next_state() -> None:
    jobs, table, specs = store()
    old = job()
    table[old["job_id"]] = release_v3_state(old)
    read = jobs.latest(old["job_id"])
    assert read is not None and read["spec"] == old["spec"] and jobs.get(old["job_id"]) == read
    assert jobs.latest(old["job_id"]) is not read  # not cached: read afresh until its spec is stored
    leased = {**read, "state": "leased"}
    jobs.put(leased, 2)
    assert jobs.new_specs() == [(2, old["job_id"], encode("job_submitted", old["spec"]))]
    settle(jobs)
    assert specs[old["job_id"]] == encode("job_submitted", old["spec"]) and table[old["job_id"]] == encode("job_state", leased)
    fresh = JobStore(table, specs)  # type: ignore[arg-type]  # another worker's store over the same tables: nothing cached
    again = fresh.latest(old["job_id"])
    assert again is not None and whole_job(again) == leased == fresh.get(old["job_id"])


def test_a_state_without_a_spec_anywhere_is_an_error_naming_the_job() -> None:
    jobs, table, _ = store()
    lost = job()
    table[lost["job_id"]] = encode("job_state", lost)
    with pytest.raises(MissingSpec, match=lost["job_id"]):
        jobs.latest(lost["job_id"])


def test_a_caller_waiting_for_jobs_hears_once_their_states_are_in_the_table(tmp_path: Path) -> None:
    """What ends an API call's wait for the jobs it submitted (`LocalReads.await_jobs`) before its next poll."""

    async def scenario() -> None:
        jobs = agent_plane(tmp_path, store="memory://").jobs
        waiting = jobs.next_write()
        assert jobs.next_write() is waiting, "every caller waits for the same write"
        state = job()
        jobs.put(state, 0)
        writes = jobs.hand_over()
        await jobs.write_specs(Recorded(), writes)
        assert not waiting.done(), "a spec alone is not a readable job"
        await jobs.write_states(Recorded(), writes)
        assert waiting.done() and jobs.missing([state["job_id"]]) == []
        assert jobs.next_write() is not waiting, "the next caller waits for the next write"

    asyncio.run(scenario())


def test_the_jobs_a_table_does_not_hold_are_named_in_order_over_every_partition(tmp_path: Path) -> None:
    """What an API call's wait for its submitted jobs looks up (`LocalReads.await_jobs`): the same answer as `in` per job."""

    async def scenario() -> None:
        jobs = agent_plane(tmp_path, store="rocksdb://", partitions=2).jobs
        held = [job(job_id=f"job-{number}") for number in range(3)]
        for number, state in enumerate(held):
            jobs.put(state, number % 2)  # two partitions' databases
        writes = jobs.hand_over()
        await jobs.write_specs(Recorded(), writes)
        await jobs.write_states(Recorded(), writes)
        asked = ["job-9", "job-2", "job-0", "job-7", "job-1"]
        assert jobs.missing(asked) == [job_id for job_id in asked if jobs.get(job_id) is None] == ["job-9", "job-7"]
        assert jobs.missing([]) == []

    asyncio.run(scenario())
