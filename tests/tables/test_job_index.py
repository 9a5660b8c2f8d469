"""The job index store writes each changed row at once and moves it between the held lists when the index is read."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from streams.domain.job_index import JobIndex, JobRow, row_of
from streams.domain.validation import SubmitPolicy, validate_item
from streams.tables import job_index
from tests.kit.jobs import Events, fold, item
from tests.kit.plane import agent_plane
from tests.tables.test_batched import Recorded


def held(index: JobIndex) -> tuple[Any, ...]:
    return (index.rows, index.by_state, index.by_job_set, index.by_node, index.by_label, index.ordered, index.counts)


@pytest.mark.parametrize("most_unmoved", [job_index.MOST_UNMOVED, 1])
def test_a_read_finds_what_moving_each_row_as_written_makes_and_every_change_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, most_unmoved: int
) -> None:
    """J1 goes queued -> leased -> pending -> running and J2 queued -> leased over four batches, read after the
    second and the fourth. Each batch writes the rows it changed; a read finds the lists and counts that
    putting each row as it was written gives; between reads a job's changed row is not moved yet (unless
    more than `MOST_UNMOVED` are held), and counting the jobs per state (GET /metrics) moves none."""
    monkeypatch.setattr(job_index, "MOST_UNMOVED", most_unmoved)
    spec, reason = validate_item(item(), SubmitPolicy())
    assert reason is None
    one, two = Events("J1"), Events("J2")
    steps = [
        {"J1": [one.submitted(spec)], "J2": [two.submitted(spec)]},
        {"J1": [one.leased("J1-1", node="n1")]},
        {"J1": [one("JobRunPending", run_id="J1-1")], "J2": [two.leased("J2-1", node="n2")]},
        {"J1": [one("JobRunRunning", run_id="J1-1")]},
    ]

    async def scenario() -> None:
        plane, producer = agent_plane(tmp_path), Recorded()
        store, reference = plane.job_index, JobIndex()
        history: dict[str, list[tuple[str, dict[str, Any]]]] = {}
        written: list[JobRow] = []
        for n, step in enumerate(steps):
            changes = []
            for job_id, events in step.items():
                history.setdefault(job_id, []).extend(events)
                changes.append((0, job_id, fold(history[job_id])))
            await store.write_pending(changes, producer, {}, {})
            for _, _, state in changes:
                reference.put(row_of(state))
                written.append(row_of(state))
            unmoved = dict(store._unmoved)
            for group_by in ("queue", "job_set"):  # counted as moving them would count them, none moved
                assert store.group_counts(group_by, (), lambda queue: True) == reference.group_counts(group_by, (), lambda queue: True)
            assert store._unmoved == unmoved
            if n == 2 and most_unmoved > 1:  # J1 pending and J2 leased in the table, J1 still listed as leased
                store.rebuild()  # what the app's timer does twice a second: nothing to rebuild, nothing moved
                lists = store._held()
                assert [key[1] for key in lists.by_state[("team-a", "leased")]] == ["J1"]
            if n in (1, 3):
                assert held(store.current()) == held(reference)
        table = {
            JobRow.decode(key.decode(), value).job_id: JobRow.decode(key.decode(), value)
            for _, _, records in producer.batches
            for key, value in records
            if key and value
        }
        assert table == reference.rows
        assert sum(len(records) for _, _, records in producer.batches) == len(written) == 6

    asyncio.run(scenario())


def test_rows_refolded_unlisted_and_then_written_past_the_most_unmoved_are_read_with_every_request(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A refold's rows (not listed), then a batch written once caught up that holds more than `MOST_UNMOVED`
    rows unmoved: the index is sorted anew from every row, and keeps both batches' job set requests."""
    monkeypatch.setattr(job_index, "MOST_UNMOVED", 0)
    spec, reason = validate_item(item(), SubmitPolicy())
    assert reason is None
    one = Events("J1")
    submitted, leased = fold([one.submitted(spec)]), fold([one.submitted(spec), one.leased("J1-1", node="n1")])

    async def scenario() -> None:
        plane, producer = agent_plane(tmp_path), Recorded()
        store = plane.job_index
        await store.write_pending([(0, "J1", submitted)], producer, {}, {("team-a", "set-1"): [(0, 1)]}, listed=False)
        await store.write_pending([(0, "J1", leased)], producer, {}, {("team-a", "set-2"): [(0, 2)]})
        index = store.current()
        assert held(index) == held(JobIndex.of([row_of(leased)]))
        assert index.requests == {("team-a", "set-1"): ((0, 1),), ("team-a", "set-2"): ((0, 2),)}

    asyncio.run(scenario())
