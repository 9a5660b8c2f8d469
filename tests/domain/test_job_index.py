"""The job query index answers every query as filtering and sorting every row would, a page at a time."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streams.domain.job_index import JobIndex, JobQuery, JobRow, decode_cursor, encode_cursor, entry_change, row_of
from streams.domain.states import JOB_STATE_ORDER
from streams.domain.validation import SubmitPolicy, validate_item
from tests.kit.jobs import Events, fold, item

QUEUES = ("a", "b", "c")
JOB_SETS = ("s1", "s2")
NODES = ("n1", "n2")
LABELS = (("team", "x"), ("team", "y"), ("tier", "gold"))


def row(n: int, **fields: Any) -> JobRow:
    base = JobRow(
        job_id=f"J{n:04d}",
        queue="a",
        job_set="s1",
        state="queued",
        priority=1.0,
        priority_class="armada-default",
        submitted=1_000 + n,
        last_transition=1_000 + n,
        runs=0,
        executor=None,
        node=None,
        labels=(),
        reason=None,
        cancel_requested=False,
    )
    return replace(base, **fields)


rows = st.builds(
    lambda n, queue, job_set, state, node, labels, submitted, moved, priority: row(
        n,
        queue=queue,
        job_set=job_set,
        state=state,
        node=node,
        labels=tuple(sorted(set(labels))),
        submitted=submitted,
        last_transition=submitted + moved,
        priority=float(priority),
    ),
    st.integers(0, 9999),
    st.sampled_from(QUEUES),
    st.sampled_from(JOB_SETS),
    st.sampled_from(JOB_STATE_ORDER),
    st.sampled_from((None, *NODES)),
    st.lists(st.sampled_from(LABELS), max_size=2),
    st.integers(0, 50),
    st.integers(0, 50),
    st.integers(0, 3),
)

queries = st.builds(
    JobQuery,
    queues=st.lists(st.sampled_from(QUEUES), max_size=2).map(tuple),
    job_set=st.sampled_from((None, *JOB_SETS)),
    states=st.lists(st.sampled_from(JOB_STATE_ORDER), max_size=3).map(tuple),
    labels=st.lists(st.sampled_from(LABELS), max_size=1).map(tuple),
    node=st.sampled_from((None, *NODES)),
    submitted_from=st.sampled_from((None, 10, 25)),
    submitted_to=st.sampled_from((None, 30, 45)),
    sort=st.sampled_from(("submitted", "last_transition", "priority")),
    descending=st.booleans(),
    limit=st.integers(1, 7),
)


def brute_force(every: list[JobRow], query: JobQuery, visible: set[str]) -> list[str]:
    found = [r for r in every if r.queue in visible and query.matches(r)]
    return [r.job_id for r in sorted(found, key=query.key_of, reverse=query.descending)]


def all_pages(index: JobIndex, query: JobQuery, visible: set[str]) -> list[str]:
    seen: list[str] = []
    after = None
    for _ in range(1000):
        page = index.query(replace(query, after=after), visible.__contains__)
        assert len(page.rows) <= query.limit
        seen += [r.job_id for r in page.rows]
        if page.next_after is None:
            return seen
        after = decode_cursor(encode_cursor(page.next_after))
    raise AssertionError("paging did not end")


@settings(max_examples=150, deadline=None)
@given(st.lists(rows, max_size=40, unique_by=lambda r: r.job_id), st.lists(rows, max_size=20), queries, st.sets(st.sampled_from(QUEUES)))
def test_paging_through_a_query_finds_what_filtering_and_sorting_every_row_finds(
    first: list[JobRow], changes: list[JobRow], query: JobQuery, visible: set[str]
) -> None:
    # Jobs change (state, node...) after they are indexed; the key (submission time) stays theirs.
    by_id = {r.job_id: r for r in first}
    index = JobIndex()
    for r in first:
        index.put(r)
    for change in changes:
        if change.job_id in by_id:
            change = replace(change, submitted=by_id[change.job_id].submitted, queue=by_id[change.job_id].queue)
        by_id[change.job_id] = change
        index.put(change)
    every = list(by_id.values())
    assert all_pages(index, query, visible) == brute_force(every, query, visible)
    assert all_pages(JobIndex.of(every), query, visible) == brute_force(every, query, visible)


@settings(max_examples=100, deadline=None)
@given(st.lists(rows, max_size=40), st.sampled_from(("queue", "job_set")))
def test_group_counts_are_the_rows_counted_by_state(changes: list[JobRow], group_by: str) -> None:
    index = JobIndex()
    latest: dict[str, JobRow] = {}
    for change in changes:
        change = replace(change, submitted=latest[change.job_id].submitted) if change.job_id in latest else change
        latest[change.job_id] = change
        index.put(change)
    expected: dict[tuple[str, ...], dict[str, int]] = {}
    for r in latest.values():
        group = (r.queue,) if group_by == "queue" else (r.queue, r.job_set)
        counts = expected.setdefault(group, dict.fromkeys(JOB_STATE_ORDER, 0))
        counts[r.state] += 1
    answered = {
        (g["queue"],) if group_by == "queue" else (g["queue"], g["job_set"]): g["counts"]
        for g in index.group_counts(group_by, (), lambda q: True)
    }
    assert answered == expected


def test_a_row_put_twice_changes_nothing_and_a_change_moves_only_what_it_changes() -> None:
    index = JobIndex()
    queued = row(1, labels=(("team", "x"),))
    index.put(queued)
    index.put(queued)
    assert len(index.by_state[("a", "queued")]) == 1
    running = replace(queued, state="running", node="n1", executor="e", runs=1)
    removed, added = entry_change(queued, running)
    assert removed == [("state", ("a", "queued"))]
    assert added == [("state", ("a", "running")), ("node", "n1")]
    index.put(running)
    assert ("a", "queued") not in index.by_state
    assert list(index.by_node["n1"]) == [running.key]
    assert index.counts[("a", "s1")] == {"running": 1}


def test_rows_encode_and_decode_and_come_from_job_states() -> None:
    spec, reason = validate_item(item(labels={"team": "x"}), SubmitPolicy())
    assert reason is None
    make = Events("J1")
    job = fold([make.submitted(spec), make.leased("J1-1", node="n7"), make("JobRunRunning", run_id="J1-1")])
    assert job is not None
    r = row_of(job)
    assert (r.job_id, r.queue, r.state, r.node, r.executor, r.runs, r.labels) == (
        "J1",
        "team-a",
        "running",
        "n7",
        "cluster-1",
        1,
        (("team", "x"),),
    )
    assert JobRow.decode("J1", r.encode()) == r


@pytest.mark.parametrize("cursor", ["", "bm90IGEga2V5", "%%%"])
def test_a_cursor_the_api_did_not_give_is_refused(cursor: str) -> None:
    with pytest.raises(ValueError, match="cursor"):
        decode_cursor(cursor)


@pytest.mark.parametrize(
    ("fields", "message"),
    [({"states": ("sleeping",)}, "unknown state"), ({"sort": "name"}, "cannot sort"), ({"limit": 0}, "limit"), ({"limit": 1001}, "limit")],
)
def test_a_query_out_of_bounds_is_refused(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        JobQuery(**fields)


def test_a_job_sets_rows_and_the_queues_with_unfinished_jobs() -> None:
    index = JobIndex.of(
        [row(1, queue="a", job_set="s"), row(2, queue="a", job_set="s", state="succeeded"), row(3, queue="b", state="cancelled")]
    )
    assert [r.job_id for r in index.job_set("a", "s")] == ["J0001", "J0002"]
    assert index.job_set("a", "nothing") == []
    assert index.active_queues() == {"a"}
    index.put(row(1, queue="a", job_set="s", state="failed"))
    assert index.active_queues() == set()
