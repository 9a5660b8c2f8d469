"""The job query index answers every query as filtering and sorting every row would, a page at a time."""

from __future__ import annotations

import base64
import json
from dataclasses import FrozenInstanceError, fields, replace
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from streams.domain.job_index import (
    REQUESTS_PREFIX,
    JobIndex,
    JobQuery,
    JobRow,
    _select_from_narrow,
    decode_cursor,
    decode_requests,
    encode_cursor,
    encode_requests,
    entry_change,
    group_counts,
    row_of,
    with_events,
)
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


def put_all(changes: list[JobRow]) -> tuple[JobIndex, dict[str, JobRow]]:
    """An index given every change in turn (a job keeps its first submission time, as the fold
    keeps it), and each job's latest row."""
    index = JobIndex()
    latest: dict[str, JobRow] = {}
    for change in changes:
        change = replace(change, submitted=latest[change.job_id].submitted) if change.job_id in latest else change
        latest[change.job_id] = change
        index.put(change)
    return index, latest


@settings(max_examples=100, deadline=None)
@given(st.lists(rows, max_size=40), st.sampled_from(("queue", "job_set")))
def test_group_counts_are_the_rows_counted_by_state(changes: list[JobRow], group_by: str) -> None:
    index, latest = put_all(changes)
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


@settings(max_examples=100, deadline=None)
@given(st.lists(rows, max_size=40), st.lists(rows, max_size=20))
def test_counts_with_rows_not_put_are_the_counts_once_they_are_put(held: list[JobRow], changes: list[JobRow]) -> None:
    """What `JobIndexStore.group_counts` counts with the rows a job index holds unmoved (the newest of each job
    it holds already): the counts putting them gives, and the index itself unchanged."""
    index, latest = put_all(held)
    unmoved = {change.job_id: replace(change, submitted=latest[change.job_id].submitted) for change in changes if change.job_id in latest}
    before = (dict(index.rows), {where: dict(counts) for where, counts in index.counts.items()})
    counted = index.counts_with(unmoved.values())
    assert (index.rows, {where: dict(counts) for where, counts in index.counts.items()}) == before
    for row in unmoved.values():
        index.put(row)
    for group_by in ("queue", "job_set"):
        assert group_counts(counted, group_by, (), lambda q: True) == index.group_counts(group_by, (), lambda q: True)


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
    # made without JobRow's own __init__ (`maker`), and no different from a row it made: equal, hashed alike, frozen
    made = JobRow(*(getattr(r, f.name) for f in fields(JobRow)))
    assert type(r) is JobRow and r == made and hash(r) == hash(made)
    with pytest.raises(FrozenInstanceError):
        r.state = "queued"  # type: ignore[misc]


def test_rows_of_different_jobs_share_their_names_and_labels_and_a_queued_jobs_keys_are_one_string() -> None:
    """The index holds a row per job: equal values decoded for each job are held once."""
    spec, reason = validate_item(item(labels={"team": "x"}), SubmitPolicy())
    assert reason is None
    first, second = (fold([Events(job_id).submitted(spec)]) for job_id in ("J1", "J2"))
    assert first is not None and second is not None
    second = json.loads(json.dumps(second))  # its own copy of every string, as each decoded job has
    rows = [row_of(first), row_of(second), JobRow.decode("J3", row_of(second).encode())]
    for name in ("queue", "job_set", "state", "priority_class", "labels"):
        assert len({id(getattr(r, name)) for r in rows}) == 1, name
    index = JobIndex()
    for r in rows:
        index.put(r)
    by_time, by_transition = index.by_state[("team-a", "queued")], index.ordered["last_transition"][("team-a", "queued")]
    assert list(by_time) == list(by_transition)
    assert all(a is b for a, b in zip(by_time, by_transition, strict=True))
    moved = replace(rows[0], state="leased", last_transition=rows[0].submitted + 5)
    index.put(moved)
    assert index.ordered["last_transition"][("team-a", "leased")][0] == moved.key_by("last_transition") != moved.key


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


def test_a_rows_event_positions_merge_in_order_and_a_row_from_before_they_were_kept_keeps_none() -> None:
    held = row(1, events=((0, 4), (0, 9)))
    assert with_events(held, held.events, [(0, 12), (0, 4)]).events == ((0, 4), (0, 9), (0, 12))
    assert JobRow.decode("J0001", held.encode()) == held
    legacy = json.loads(held.encode())[:13]  # as written before positions were kept
    old = JobRow.decode("J0001", json.dumps(legacy).encode())
    assert old.events is None and replace(old, events=held.events) == held
    assert with_events(old, old.events, [(0, 12)]).events is None
    key, value = encode_requests("a", "s/1", ((0, 7),))
    assert key.startswith(REQUESTS_PREFIX) and decode_requests(key, value) == (("a", "s/1"), ((0, 7),))


def test_a_jobs_events_are_its_own_records_and_its_job_sets_requests() -> None:
    index = JobIndex.of(
        [row(1, job_set="s", events=((0, 1), (0, 5))), row(2, job_set="t", events=((0, 2),)), row(3, job_set="s", events=None)],
        [(("a", "s"), ((0, 3), (0, 5)))],
    )
    assert index.events_of("J0001") == ((0, 1), (0, 3), (0, 5))
    assert index.events_of("J0002") == ((0, 2),)
    assert index.events_of("J0003") is None  # read from its job set instead
    assert index.events_of("J9999") is None


@settings(max_examples=100, deadline=None)
@given(st.lists(rows, max_size=40))
def test_the_lists_in_each_sorts_order_hold_what_a_rebuild_holds_after_any_changes(changes: list[JobRow]) -> None:
    index, latest = put_all(changes)
    rebuilt = JobIndex.of(latest.values())
    for sort in ("last_transition", "priority"):
        assert {where: list(keys) for where, keys in index.ordered[sort].items()} == {
            where: list(keys) for where, keys in rebuilt.ordered[sort].items()
        }
        for (queue, state), keys in index.ordered[sort].items():
            assert list(keys) == sorted(r.key_by(sort) for r in latest.values() if (r.queue, r.state) == (queue, state))


@pytest.mark.parametrize(("label", "selects"), [(("tier", "gold"), True), (("team", "x"), False)])
def test_a_page_sorted_otherwise_is_selected_from_a_small_filters_list_or_walked_in_the_sorts_order(
    label: tuple[str, str], selects: bool
) -> None:
    # 400 jobs; "tier=gold" on 4 of them (cheaper to select from), "team=x" on half (cheaper to walk in order)
    every = [
        row(
            n,
            queue="ab"[n % 2],
            state=("queued", "running")[n % 3 == 0],
            priority=float(n % 7),
            last_transition=5_000 - n,
            labels=(("team", "x"),) * (n % 2) + (("tier", "gold"),) * (n % 100 == 0),
        )
        for n in range(400)
    ]
    index = JobIndex.of(every)
    assert _select_from_narrow(len(index.by_label[label]), len(every), 5) is selects
    for sort in ("priority", "last_transition"):
        for descending in (True, False):
            query = JobQuery(labels=(label,), sort=sort, descending=descending, limit=5)
            assert all_pages(index, query, {"a", "b"}) == brute_force(every, query, {"a", "b"})


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.builds(
            lambda r, priority: replace(r, priority=priority),
            rows,
            st.sampled_from((0.0, 0.1231, 0.1234, 0.1239, 2.5, 1e16, 1e18)) | st.floats(0, 1e18, allow_nan=False),
        ),
        max_size=40,
        unique_by=lambda r: r.job_id,
    ),
    queries,
)
@example(
    [row(1, priority=0.1234), row(2, priority=0.1231), row(3, priority=1e18), row(4, priority=2e16)],
    JobQuery(sort="priority", descending=False, limit=2),
)
def test_pages_follow_the_rows_own_values_exactly_then_job_ids(every: list[JobRow], query: JobQuery) -> None:
    """Sorted by the field's value and the job id, not by anything the index derives from them: priorities
    a thousandth apart, or beyond 10^15, keep their order."""
    found = [r for r in every if query.matches(r)]
    expected = sorted(found, key=lambda r: (getattr(r, query.sort), r.job_id), reverse=query.descending)
    assert all_pages(JobIndex.of(every), query, set(QUEUES)) == [r.job_id for r in expected]


@pytest.mark.parametrize("key", [(1_700_000_000_000, "01HJ0000000000000000000000"), (0.1 + 0.2, "J1"), (2.5e18, "J|2")])
def test_a_cursor_stands_for_its_key_exactly(key: tuple[int | float, str]) -> None:
    back = decode_cursor(encode_cursor(key))
    assert back == key and type(back[0]) is type(key[0])


def test_a_cursor_of_the_fixed_point_keys_goes_on_where_it_left_off_and_a_non_finite_one_is_refused() -> None:
    old = base64.urlsafe_b64encode(b"0000001700000000000.000|J0007").decode().rstrip("=")
    assert decode_cursor(old) == (1_700_000_000_000, "J0007")
    for written in (b"inf|J1", b"nan|J1", b"-|J1"):
        with pytest.raises(ValueError, match="cursor"):
            decode_cursor(base64.urlsafe_b64encode(written).decode())


def test_rows_with_events_in_the_same_records_hold_one_tuple_of_them() -> None:
    record, lease = (0, 17), (0, 40)
    made = [with_events(row(n), (), [record]) for n in range(3)]
    decoded = [JobRow.decode(r.job_id, r.encode()) for r in made]
    assert len({id(r.events) for r in made + decoded}) == 1
    leased = [with_events(r, r.events, [lease]) for r in made]
    assert leased[0].events == (record, lease) and leased[0].events is leased[1].events is leased[2].events
