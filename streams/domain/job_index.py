"""The job query index: which jobs a query finds, in order, without reading the jobs table.

Every job has one small row (`JobRow`): what a jobs list shows and filters on, never the spec.
The fold writes a job's row whenever it changes (the `job-index` table, `streams.tables.job_index`);
`JobIndex` holds the rows of a worker's partitions in memory with sorted lists over them, so that
a query walks only the jobs it can match, from its cursor on, and stops once its page is full:

- per queue and state, per queue and job set, per node and per label, the jobs in submission
  order (a key of submission time then job id, so a job's place never changes); a query takes
  the narrowest lists its filters name and merges them in order;
- per queue and job set, how many jobs are in each state, for group counts without a walk.

A job's change moves it between lists (`JobIndex.put` compares the new row with the one held),
so applying the same row twice changes nothing, whichever worker applied the first.

Sorting by submission time walks the lists; sorting by last transition or priority selects the
page from every matching job (a heap over the matches, so its cost grows with them).
"""

from __future__ import annotations

import base64
import heapq
import json
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Iterator
from dataclasses import dataclass, field
from itertools import islice
from typing import Any

from sortedcontainers import SortedList

from streams.domain.states import ACTIVE, JOB_STATE_ORDER, JOB_STATES

SORTS = ("submitted", "last_transition", "priority")
# Rows as JSON without spaces, from one encoder (json.dumps builds one per call when given separators).
_ROW_JSON = json.JSONEncoder(separators=(",", ":")).encode
MAX_LIMIT = 1000
_REASON_CHARS = 500  # a reason is shown in a list cell; the job's page has it whole


@dataclass(frozen=True, slots=True)
class JobRow:
    """What the jobs list shows of a job and filters it by."""

    job_id: str
    queue: str
    job_set: str
    state: str
    priority: float
    priority_class: str
    submitted: int  # epoch ms
    last_transition: int  # epoch ms
    runs: int
    executor: str | None  # of the latest run
    node: str | None
    labels: tuple[tuple[str, str], ...]
    reason: str | None
    cancel_requested: bool

    @property
    def key(self) -> str:
        """Its place in every list: submission time, then job id."""
        return sort_key(self.submitted, self.job_id)

    def encode(self) -> bytes:
        return _ROW_JSON(
            [
                self.queue,
                self.job_set,
                self.state,
                self.priority,
                self.priority_class,
                self.submitted,
                self.last_transition,
                self.runs,
                self.executor,
                self.node,
                [list(pair) for pair in self.labels],
                self.reason,
                self.cancel_requested,
            ]
        ).encode()

    @classmethod
    def decode(cls, job_id: str, raw: bytes) -> JobRow:
        q, js, state, priority, pc, submitted, last, runs, executor, node, labels, reason, cancel = json.loads(raw)
        return cls(
            job_id, q, js, state, priority, pc, submitted, last, runs, executor, node, tuple((k, v) for k, v in labels), reason, cancel
        )

    def view(self) -> dict[str, Any]:
        """The row as the API answers it (names as in the job view of `GET /api/v1/jobs/{id}`)."""
        return {
            "job_id": self.job_id,
            "queue": self.queue,
            "job_set": self.job_set,
            "state": self.state,
            "priority": self.priority,
            "priority_class": self.priority_class,
            "submitted": self.submitted,
            "last_transition": self.last_transition,
            "runs": self.runs,
            "executor": self.executor,
            "node": self.node,
            "labels": dict(self.labels),
            "reason": self.reason,
            "cancel_requested": self.cancel_requested,
        }


def row_of(job: dict[str, Any]) -> JobRow:
    """The row of a job state (the fold's `job_state` dict)."""
    latest = job["runs"][-1] if job["runs"] else None
    reason = job["reason"]
    return JobRow(
        job_id=job["job_id"],
        queue=job["queue"],
        job_set=job["job_set_id"],
        state=job["state"],
        priority=float(job["priority"]),
        priority_class=job["priority_class"],
        submitted=job["submitted"],
        last_transition=job["last_transition"],
        runs=len(job["runs"]),
        executor=latest["executor"] if latest else None,
        node=latest["node"] if latest else None,
        labels=tuple(sorted((job["spec"].get("labels") or {}).items())),
        reason=reason[:_REASON_CHARS] if reason else None,
        cancel_requested=job["cancel_requested"],
    )


def sort_key(value: int | float, job_id: str) -> str:
    """A string that sorts as (value, job id) for values from 0 to 10^15 (epoch ms, priorities)."""
    return f"{value:020.3f}|{job_id}"


def encode_cursor(key: str) -> str:
    return base64.urlsafe_b64encode(key.encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> str:
    """The key a cursor stands for; ValueError for anything `encode_cursor` did not make."""
    try:
        key = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
    except (ValueError, UnicodeDecodeError) as exc:
        raise ValueError(f"cursor {cursor!r} is not one this API gave") from exc
    value, sep, job_id = key.partition("|")
    try:
        float(value)
    except ValueError:
        sep = ""
    if not sep or not job_id:
        raise ValueError(f"cursor {cursor!r} is not one this API gave")
    return key


@dataclass(frozen=True)
class JobQuery:
    """A list request. Empty tuples and None filter nothing; filters combine with AND, values of one
    filter with OR (any of the states), labels with AND (every label)."""

    queues: tuple[str, ...] = ()
    job_set: str | None = None
    states: tuple[str, ...] = ()
    priority_classes: tuple[str, ...] = ()
    labels: tuple[tuple[str, str], ...] = ()
    node: str | None = None
    submitted_from: int | None = None  # epoch ms, inclusive
    submitted_to: int | None = None  # epoch ms, exclusive
    sort: str = "submitted"
    descending: bool = True
    limit: int = 100
    after: str | None = None  # the key of the last row of the previous page (`decode_cursor`)

    def __post_init__(self) -> None:
        unknown = sorted(set(self.states) - JOB_STATES)
        if unknown:
            raise ValueError(f"unknown state(s) {', '.join(unknown)}; states are {', '.join(JOB_STATE_ORDER)}")
        if self.sort not in SORTS:
            raise ValueError(f"cannot sort by {self.sort!r}; sorts are {', '.join(SORTS)}")
        if not 1 <= self.limit <= MAX_LIMIT:
            raise ValueError(f"limit must be from 1 to {MAX_LIMIT}, got {self.limit}")

    def matches(self, row: JobRow) -> bool:
        return (
            (not self.queues or row.queue in self.queues)
            and (self.job_set is None or row.job_set == self.job_set)
            and (not self.states or row.state in self.states)
            and (not self.priority_classes or row.priority_class in self.priority_classes)
            and (self.node is None or row.node == self.node)
            and (self.submitted_from is None or row.submitted >= self.submitted_from)
            and (self.submitted_to is None or row.submitted < self.submitted_to)
            and all(pair in row.labels for pair in self.labels)
        )

    def key_of(self, row: JobRow) -> str:
        value = row.submitted if self.sort == "submitted" else row.last_transition if self.sort == "last_transition" else row.priority
        return sort_key(value, row.job_id)


@dataclass(frozen=True)
class Page:
    rows: list[JobRow]
    next_after: str | None  # the key to continue after, when more rows match


@dataclass
class JobIndex:
    rows: dict[str, JobRow] = field(default_factory=dict)
    by_state: dict[tuple[str, str], SortedList] = field(default_factory=dict)
    by_job_set: dict[tuple[str, str], SortedList] = field(default_factory=dict)
    by_node: dict[str, SortedList] = field(default_factory=dict)
    by_label: dict[tuple[str, str], SortedList] = field(default_factory=dict)
    # (queue, job set) -> jobs per state
    counts: dict[tuple[str, str], Counter[str]] = field(default_factory=dict)

    @classmethod
    def of(cls, rows: Iterable[JobRow]) -> JobIndex:
        """An index of ``rows``, each list sorted once (a rebuild after a rebalance)."""
        index = cls()
        lists: dict[tuple[str, Any], list[str]] = {}
        for row in rows:
            index.rows[row.job_id] = row
            key = row.key
            for name, where in _entries(row):
                lists.setdefault((name, where), []).append(key)
            index.counts.setdefault((row.queue, row.job_set), Counter())[row.state] += 1
        for (name, where), keys in lists.items():
            index._kinds[name][where] = SortedList(keys)
        return index

    def __post_init__(self) -> None:
        self._kinds: dict[str, dict[Any, SortedList]] = {
            "state": self.by_state,
            "job_set": self.by_job_set,
            "node": self.by_node,
            "label": self.by_label,
        }

    def changed(self, row: JobRow) -> bool:
        return self.rows.get(row.job_id) != row

    def put(self, row: JobRow) -> None:
        """Hold ``row`` as its job's row, moving the job between lists as its row says."""
        before = self.rows.get(row.job_id)
        if before == row:
            return
        self.rows[row.job_id] = row
        removed, added = entry_change(before, row)
        if before is not None:
            old_key = before.key
            for name, where in removed:
                lists = self._kinds[name]
                lists[where].remove(old_key)
                if not lists[where]:
                    del lists[where]
        key = row.key
        for name, where in added:
            lists = self._kinds[name]
            if where in lists:
                lists[where].add(key)
            else:
                lists[where] = SortedList((key,))
        if before is not None:
            if (before.queue, before.job_set, before.state) == (row.queue, row.job_set, row.state):
                return
            counts = self.counts[(before.queue, before.job_set)]
            counts[before.state] -= 1
            if counts[before.state] == 0:
                del counts[before.state]
        self.counts.setdefault((row.queue, row.job_set), Counter())[row.state] += 1

    # ------------------------------------------------------------------ queries

    def job_set(self, queue: str, job_set: str) -> list[JobRow]:
        """The job set's rows, in submission order."""
        keys = self.by_job_set.get((queue, job_set), ())
        return [self.rows[key.rpartition("|")[2]] for key in keys]

    def in_states(self, states: Collection[str], queues: Collection[str] = ()) -> Iterator[JobRow]:
        """The rows of jobs in ``states`` (of ``queues``, or of every queue when none are given)."""
        for (queue, state), keys in sorted(self.by_state.items()):
            if state in states and (not queues or queue in queues):
                for key in keys:
                    yield self.rows[key.rpartition("|")[2]]

    def active_queues(self) -> set[str]:
        """Queues with a job not yet finished."""
        return {queue for (queue, _), counts in self.counts.items() if any(counts.get(state) for state in ACTIVE | {"queued"})}

    def query(self, query: JobQuery, visible: Callable[[str], bool]) -> Page:
        """The page of jobs ``query`` asks for among the queues ``visible`` lets the caller see."""
        wanted = self._candidates(query, visible)
        if query.sort == "submitted":
            rows = list(islice(wanted, query.limit + 1))
        else:
            keyed = ((query.key_of(row), row) for row in wanted)
            if query.after is not None:
                after = query.after
                keyed = ((k, row) for k, row in keyed if (k < after if query.descending else k > after))
            pick = heapq.nlargest if query.descending else heapq.nsmallest
            rows = [row for _, row in pick(query.limit + 1, keyed, key=lambda pair: pair[0])]
        more = len(rows) > query.limit
        rows = rows[: query.limit]
        return Page(rows, query.key_of(rows[-1]) if more else None)

    def _candidates(self, query: JobQuery, visible: Callable[[str], bool]) -> Iterator[JobRow]:
        """Every job matching ``query``, in submission order (as the query orders it) when sorting by it."""
        sources = self._sources(query, visible)
        in_order = query.sort == "submitted"
        low = None if query.submitted_from is None else sort_key(query.submitted_from, "")
        high = None if query.submitted_to is None else sort_key(query.submitted_to, "")
        if in_order and query.after is not None:
            if query.descending:
                high = query.after if high is None else min(high, query.after)
            else:
                low = query.after if low is None else max(low, query.after)
        walks = [
            (key for key in source.irange(low, high, inclusive=(True, False), reverse=query.descending) if key != query.after)
            for source in sources
        ]
        keys = heapq.merge(*walks, reverse=query.descending) if len(walks) > 1 else (walks[0] if walks else iter(()))
        rows = self.rows
        for key in keys:
            row = rows[key.rpartition("|")[2]]
            if visible(row.queue) and query.matches(row):
                yield row

    def _sources(self, query: JobQuery, visible: Callable[[str], bool]) -> list[SortedList]:
        """The narrowest lists that hold every job the query can match."""
        queues = [q for q in dict.fromkeys(query.queues or sorted({q for q, _ in self.counts})) if visible(q)]
        if query.job_set is not None:
            return [self.by_job_set[(q, query.job_set)] for q in queues if (q, query.job_set) in self.by_job_set]
        narrow: list[SortedList] = []
        if query.node is not None:
            narrow.append(self.by_node.get(query.node, SortedList()))
        narrow += [self.by_label.get(pair, SortedList()) for pair in query.labels]
        if narrow:
            return [min(narrow, key=len)]
        states = dict.fromkeys(query.states or JOB_STATE_ORDER)  # a state named twice is walked once
        return [self.by_state[(q, s)] for q in queues for s in states if (q, s) in self.by_state]

    def group_counts(self, group_by: str, queues: tuple[str, ...], visible: Callable[[str], bool]) -> list[dict[str, Any]]:
        """Jobs per state for each queue (``group_by`` "queue") or each job set ("job_set") of ``queues`` (all when empty)."""
        if group_by not in ("queue", "job_set"):
            raise ValueError(f"cannot group by {group_by!r}; groups are queue and job_set")
        groups: dict[tuple[str, ...], Counter[str]] = {}
        for (queue, job_set), counts in self.counts.items():
            if (queues and queue not in queues) or not visible(queue) or not counts:
                continue
            group = (queue,) if group_by == "queue" else (queue, job_set)
            groups.setdefault(group, Counter()).update(counts)
        return [
            {"queue": group[0], **({"job_set": group[1]} if group_by == "job_set" else {}), "counts": _all_states(counts)}
            for group, counts in sorted(groups.items())
        ]


def _all_states(counts: Counter[str]) -> dict[str, int]:
    return {state: counts.get(state, 0) for state in JOB_STATE_ORDER}


def _entries(row: JobRow) -> list[tuple[str, Any]]:
    """The lists a row belongs to: (kind, where)."""
    entries: list[tuple[str, Any]] = [("state", (row.queue, row.state)), ("job_set", (row.queue, row.job_set))]
    if row.node:
        entries.append(("node", row.node))
    entries += [("label", pair) for pair in row.labels]
    return entries


def entry_change(before: JobRow | None, after: JobRow) -> tuple[list[tuple[str, Any]], list[tuple[str, Any]]]:
    """The lists a job leaves and the lists it joins when its row goes from ``before`` to ``after``.

    Its key (submission time, job id) never changes, so a list it stays in is left alone."""
    new = _entries(after)
    if before is None:
        return [], new
    old = _entries(before)
    if before.key != after.key:
        return old, new
    return [e for e in old if e not in new], [e for e in new if e not in old]
