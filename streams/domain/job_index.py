"""The job query index: which jobs a query finds, in order, without reading the jobs table.

Every job has one small row (`JobRow`): what a jobs list shows and filters on, never the spec.
The fold writes a job's row whenever it changes (the `job-index` table, `streams.tables.job_index`);
`JobIndex` holds the rows of a worker's partitions in memory with sorted lists over them, so that
a query walks only the jobs it can match, from its cursor on, and stops once its page is full:

- per queue and state, per queue and job set, per node and per label, the jobs in submission
  order (a key of submission time then job id, so a job's place never changes);
- per queue and state also in last-transition order and in priority order (a job moves in them
  when its time or priority changes), so every sort has lists in its own order;
- per queue and job set, how many jobs are in each state, for group counts without a walk.

A query sorted by submission time walks the smallest union of lists its filters name (a job set,
a node, a label, or its queues' states) and merges them in order. One sorted otherwise walks its
queues' states in the sort's order, filtering as it goes, unless a filter's list is so small that
selecting the page from all of it costs less than the walk is expected to (`_select_from_narrow`).

A job's change moves it between lists (`JobIndex.put` compares the new row with the one held),
so applying the same row twice changes nothing, whichever worker applied the first.

A row also holds where the job's events are on the `events` topic (`JobRow.events`: partition
and offset of each record with one of them), and the index where the requests of each job set
with any are (`JobIndex.requests`), so that a job's page reads those records and no others.
"""

from __future__ import annotations

import base64
import heapq
import json
import math
from collections import Counter, defaultdict
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from functools import lru_cache
from itertools import islice
from sys import intern
from typing import Any

from sortedcontainers import SortedList

from streams.domain.frozen import maker
from streams.domain.shared import shared, shared_priority, shared_time, text
from streams.domain.sorted_by_value import SortedByValue
from streams.domain.states import ACTIVE, JOB_STATE_ORDER, JOB_STATES

SORTS = ("submitted", "last_transition", "priority")
# Rows as JSON without spaces, from one encoder (json.dumps builds one per call when given separators).
_ROW_JSON = json.JSONEncoder(separators=(",", ":")).encode
MAX_LIMIT = 1000
_REASON_CHARS = 500  # a reason is shown in a list cell; the job's page has it whole

# Where a record is on the `events` topic: (partition, offset).
Position = tuple[int, int]
# A job's place in a list: (submission time, last transition or priority; then its job id). The row's own
# value and job id, so that a key costs the index one small tuple and no text.
Key = tuple[int | float, str]
# Keys of the `job-index` table's entries for job sets' requests; job ids (ULIDs) never start so.
REQUESTS_PREFIX = "job-set:"


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
    # The records of `events` that hold the job's events, in order; None for a row written before
    # they were kept (its job set is read whole instead).
    events: tuple[Position, ...] | None = ()

    @property
    def key(self) -> Key:
        """Its place in the lists in submission order: submission time, then job id."""
        return sort_key(self.submitted, self.job_id)

    def key_by(self, sort: str, key: Key | None = None) -> Key:
        """Its place in the lists of ``sort`` (one of `SORTS`). ``key``: its `key`, when the caller has
        it, given back for a sort whose value is the submission time (a queued job's last transition),
        so that the lists hold one key for both."""
        value = self.submitted if sort == "submitted" else self.last_transition if sort == "last_transition" else self.priority
        if key is not None and value == self.submitted:
            return key
        return sort_key(value, self.job_id)

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
                self.labels,  # tuples are written as JSON arrays
                self.reason,
                self.cancel_requested,
                self.events,
            ]
        ).encode()

    @classmethod
    def decode(cls, job_id: str, raw: bytes) -> JobRow:
        q, js, state, priority, pc, submitted, last, runs, executor, node, labels, reason, cancel, *kept = json.loads(raw)
        events = _positions(kept[0]) if kept else None  # a row of 13 fields was written before events were kept
        submitted = shared_time(submitted)
        return cls(
            intern(job_id),
            intern(q),
            intern(js),
            intern(state),
            shared_priority(priority),
            intern(pc),
            submitted,
            submitted if last == submitted else last,  # one object, as `row_of` has it for a queued job
            runs,
            text(executor),
            text(node),
            shared(tuple((k, v) for k, v in labels)) if labels else (),
            reason,
            cancel,
            events,
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


# Rows made without JobRow's frozen __init__ (`streams.domain.frozen`): the fold makes one per job changed,
# three or four per job under a stream of submissions leased, and the __init__ was a third of `row_of`.
_make_row = maker(JobRow)


def row_of(job: dict[str, Any], events: tuple[Position, ...] | None = ()) -> JobRow:
    """The row of a job state (the fold's `job_state` dict), with the positions of its events (see `merged_events`).

    Its names and labels are shared with every other row holding equal ones (`streams.domain.shared`):
    the index holds a row per job, and a decoded job has its own copy of each."""
    latest = job["runs"][-1] if job["runs"] else None
    reason = job["reason"]
    labels = job["spec"].get("labels")
    submitted = shared_time(job["submitted"])  # one int for the jobs of a request (each decoded its own)
    return _make_row(
        job_id=intern(job["job_id"]),  # one string with the scheduler's index (`feed.delta_from_row`) in a worker holding both
        queue=intern(job["queue"]),
        job_set=intern(job["job_set_id"]),
        state=intern(job["state"]),
        priority=shared_priority(job["priority"]),
        priority_class=intern(job["priority_class"]),
        submitted=submitted,
        last_transition=submitted if job["last_transition"] is job["submitted"] else job["last_transition"],
        runs=len(job["runs"]),
        executor=text(latest["executor"]) if latest else None,
        node=text(latest["node"]) if latest else None,
        labels=shared(tuple(sorted(labels.items()))) if labels else (),  # most jobs have none: not looked up (~1.3 us)
        reason=reason[:_REASON_CHARS] if reason else None,
        cancel_requested=job["cancel_requested"],
        events=events,
    )


def merged_events(held: tuple[Position, ...] | None, new: Iterable[Position]) -> tuple[Position, ...] | None:
    """The positions of a job's events: those ``held`` so far and the ``new`` ones, in order, each
    once (a batch folded again adds nothing). A job whose earlier events were not kept (``held`` None) keeps none."""
    return None if held is None else _held_positions(tuple(sorted({*held, *new})))


def with_events(row: JobRow, held: tuple[Position, ...] | None, new: Iterable[Position]) -> JobRow:
    """``row`` with its job's events `merged_events`."""
    return replace(row, events=merged_events(held, new))


def _positions(raw: list[list[int]] | None) -> tuple[Position, ...] | None:
    return None if raw is None else _held_positions(tuple((partition, offset) for partition, offset in raw))


@lru_cache(maxsize=4096)
def _held_positions(positions: tuple[Position, ...]) -> tuple[Position, ...]:
    """One tuple for the equal positions of many jobs: the jobs of a request, or leased in one cycle, have
    their events in the same records (~50-130 bytes a row otherwise, the most of it for rows decoded
    from the table). Not through `streams.domain.shared`: positions are new with every record, and
    would push out of its bounded table the long-lived shapes it is there to share."""
    return positions


def encode_requests(queue: str, job_set: str, positions: tuple[Position, ...]) -> tuple[str, bytes]:
    """A job set's request positions as a `job-index` table entry (a key no job id has)."""
    return REQUESTS_PREFIX + json.dumps([queue, job_set], separators=(",", ":")), json.dumps([list(p) for p in positions]).encode()


def decode_requests(key: str, raw: bytes) -> tuple[tuple[str, str], tuple[Position, ...]]:
    queue, job_set = json.loads(key.removeprefix(REQUESTS_PREFIX))
    positions = _positions(json.loads(raw))
    assert positions is not None
    return (queue, job_set), positions


def sort_key(value: int | float, job_id: str) -> Key:
    """The key of ``job_id`` at ``value`` (a time in epoch ms or a priority): tuples sort as (value, job id),
    exactly, and hold the row's own value and id."""
    return (value, job_id)


def encode_cursor(key: Key) -> str:
    value, job_id = key
    return base64.urlsafe_b64encode(f"{value!r}|{job_id}".encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> Key:
    """The key a cursor stands for; ValueError for anything `encode_cursor` did not make.

    The value is read back as the int or float it was (a cursor of the fixed-point text keys used
    before reads as a float equal to its time or priority, and goes on where it left off)."""
    try:
        text = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
    except (ValueError, UnicodeDecodeError) as exc:
        raise ValueError(f"cursor {cursor!r} is not one this API gave") from exc
    written, sep, job_id = text.partition("|")
    try:
        value: int | float = int(written) if written.isdigit() else float(written)
    except ValueError:
        sep = ""
    if not sep or not job_id or not math.isfinite(value):
        raise ValueError(f"cursor {cursor!r} is not one this API gave")
    return (value, job_id)


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
    after: Key | None = None  # the key of the last row of the previous page (`decode_cursor`)

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

    def key_of(self, row: JobRow) -> Key:
        return row.key_by(self.sort)


@dataclass(frozen=True)
class Page:
    rows: list[JobRow]
    next_after: Key | None  # the key to continue after, when more rows match


# The sorts besides submission time: each has lists per queue and state in its own order. Priorities
# are few and shared by many jobs: their lists hold ids per priority (`SortedByValue`), not a key per job.
_ORDERED = ("last_transition", "priority")
_ORDERED_LISTS: dict[str, type[SortedList] | type[SortedByValue]] = {"last_transition": SortedList, "priority": SortedByValue}


@dataclass
class JobIndex:
    rows: dict[str, JobRow] = field(default_factory=dict)
    by_state: dict[tuple[str, str], SortedList] = field(default_factory=dict)
    by_job_set: dict[tuple[str, str], SortedList] = field(default_factory=dict)
    by_node: dict[str, SortedList] = field(default_factory=dict)
    by_label: dict[tuple[str, str], SortedList] = field(default_factory=dict)
    # sort -> (queue, state) -> the jobs in that sort's order
    ordered: dict[str, dict[tuple[str, str], SortedList]] = field(default_factory=lambda: {sort: {} for sort in _ORDERED})
    # (queue, job set) -> jobs per state
    counts: dict[tuple[str, str], Counter[str]] = field(default_factory=dict)
    # (queue, job set) -> where its requests (events without a job id) are on `events`
    requests: dict[tuple[str, str], tuple[Position, ...]] = field(default_factory=dict)

    @classmethod
    def of(cls, rows: Iterable[JobRow], requests: Iterable[tuple[tuple[str, str], tuple[Position, ...]]] = ()) -> JobIndex:
        """An index of ``rows`` and job sets' ``requests``, each list sorted once (a rebuild after a rebalance)."""
        index = cls(requests=dict(requests))
        lists: defaultdict[tuple[str, Any], list[Key]] = defaultdict(list)
        ordered: dict[str, defaultdict[tuple[str, str], list[Key]]] = {sort: defaultdict(list) for sort in _ORDERED}
        counts: defaultdict[tuple[str, str], Counter[str]] = defaultdict(Counter)
        for row in rows:
            index.rows[row.job_id] = row
            key = row.key
            for name, where in _entries(row):
                lists[(name, where)].append(key)
            for sort, lists_of_sort in ordered.items():
                lists_of_sort[(row.queue, row.state)].append(row.key_by(sort, key))
            counts[(row.queue, row.job_set)][row.state] += 1
        for (name, where), keys in lists.items():
            index._kinds[name][where] = SortedList(keys)
        for sort, lists_of_sort in ordered.items():
            index.ordered[sort] = {where: _ORDERED_LISTS[sort](keys) for where, keys in lists_of_sort.items()}
        index.counts.update(counts)
        return index

    def __post_init__(self) -> None:
        self._kinds: dict[str, dict[Any, SortedList]] = {
            "state": self.by_state,
            "job_set": self.by_job_set,
            "node": self.by_node,
            "label": self.by_label,
        }

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
                _remove(self._kinds[name], where, old_key)
        key = row.key
        for name, where in added:
            _add(self._kinds[name], where, key)
        for sort, lists in self.ordered.items():
            new = ((row.queue, row.state), row.key_by(sort, key))
            old = None if before is None else ((before.queue, before.state), before.key_by(sort))
            if old != new:
                if old is not None:
                    _remove(lists, *old)
                _add(lists, *new, _ORDERED_LISTS[sort])
        if before is not None:
            if (before.queue, before.job_set, before.state) == (row.queue, row.job_set, row.state):
                return
            counts = self.counts[(before.queue, before.job_set)]
            counts[before.state] -= 1
            if counts[before.state] == 0:
                del counts[before.state]
        held = self.counts.get((row.queue, row.job_set))
        if held is None:  # a Counter made only for a new job set, not for every put (~0.4% of a stream's worker)
            held = self.counts[(row.queue, row.job_set)] = Counter()
        held[row.state] += 1

    def events_of(self, job_id: str) -> tuple[Position, ...] | None:
        """Where the job's events and its job set's requests are on `events`, in order; None when this
        index does not hold the job or its row was written before its events were kept."""
        row = self.rows.get(job_id)
        if row is None or row.events is None:
            return None
        return tuple(sorted({*row.events, *self.requests.get((row.queue, row.job_set), ())}))

    # ------------------------------------------------------------------ queries

    def job_set(self, queue: str, job_set: str) -> list[JobRow]:
        """The job set's rows, in submission order."""
        keys = self.by_job_set.get((queue, job_set), ())
        return [self.rows[job_id] for _, job_id in keys]

    def in_states(self, states: Collection[str], queues: Collection[str] = ()) -> Iterator[JobRow]:
        """The rows of jobs in ``states`` (of ``queues``, or of every queue when none are given)."""
        for (queue, state), keys in sorted(self.by_state.items()):
            if state in states and (not queues or queue in queues):
                for _, job_id in keys:
                    yield self.rows[job_id]

    def active_queues(self) -> set[str]:
        """Queues with a job not yet finished."""
        return {queue for (queue, _), counts in self.counts.items() if any(counts.get(state) for state in ACTIVE | {"queued"})}

    def query(self, query: JobQuery, visible: Callable[[str], bool]) -> Page:
        """The page of jobs ``query`` asks for among the queues ``visible`` lets the caller see."""
        queues = [q for q in dict.fromkeys(query.queues or sorted({q for q, _ in self.counts})) if visible(q)]
        states = list(dict.fromkeys(query.states or JOB_STATE_ORDER))  # a state named twice is walked once
        by_state = [self.by_state[(q, s)] for q in queues for s in states if (q, s) in self.by_state]
        narrow = self._narrowest(query, queues)
        if query.sort == "submitted":
            sources = by_state if narrow is None or _size(by_state) <= _size(narrow) else narrow
            rows = list(islice(self._walk(query, visible, sources, in_order=True), query.limit + 1))
        elif narrow is not None and _select_from_narrow(_size(narrow), _size(by_state), query.limit):
            keyed = ((query.key_of(row), row) for row in self._walk(query, visible, narrow, in_order=False))
            if query.after is not None:
                after = query.after
                keyed = ((k, row) for k, row in keyed if (k < after if query.descending else k > after))
            pick = heapq.nlargest if query.descending else heapq.nsmallest
            rows = [row for _, row in pick(query.limit + 1, keyed, key=lambda pair: pair[0])]
        else:
            lists = self.ordered[query.sort]
            in_sort_order = [lists[(q, s)] for q in queues for s in states if (q, s) in lists]
            rows = list(islice(self._walk(query, visible, in_sort_order, in_order=True), query.limit + 1))
        more = len(rows) > query.limit
        rows = rows[: query.limit]
        return Page(rows, query.key_of(rows[-1]) if more else None)

    def _walk(self, query: JobQuery, visible: Callable[[str], bool], sources: list[SortedList], in_order: bool) -> Iterator[JobRow]:
        """Every job of ``sources`` matching ``query``; with ``in_order``, the sources are in the query's
        sort order and the walk follows it from the cursor on, else it follows submission order."""
        low = high = None
        if query.sort == "submitted" or not in_order:  # the lists are in submission order: the time bounds bound the walk
            low = None if query.submitted_from is None else sort_key(query.submitted_from, "")
            high = None if query.submitted_to is None else sort_key(query.submitted_to, "")
        if in_order and query.after is not None:
            if query.descending:
                high = query.after if high is None else min(high, query.after)
            else:
                low = query.after if low is None else max(low, query.after)
        reverse = query.descending if in_order else False
        skip = query.after if in_order else None  # the cursor's own job, on the previous page
        walks = [(key for key in source.irange(low, high, inclusive=(True, False), reverse=reverse) if key != skip) for source in sources]
        keys = heapq.merge(*walks, reverse=reverse) if len(walks) > 1 else (walks[0] if walks else iter(()))
        rows = self.rows
        for _, job_id in keys:
            row = rows[job_id]
            if visible(row.queue) and query.matches(row):
                yield row

    def _narrowest(self, query: JobQuery, queues: list[str]) -> list[SortedList] | None:
        """The smallest union of lists, in submission order, that holds every job the query's job set,
        node or label filters can match; None when it names none of them."""
        unions: list[list[SortedList]] = []
        if query.job_set is not None:
            unions.append([self.by_job_set[(q, query.job_set)] for q in queues if (q, query.job_set) in self.by_job_set])
        if query.node is not None:
            unions.append([self.by_node[query.node]] if query.node in self.by_node else [])
        unions += [[self.by_label[pair]] if pair in self.by_label else [] for pair in query.labels]
        return min(unions, key=_size) if unions else None

    def group_counts(self, group_by: str, queues: tuple[str, ...], visible: Callable[[str], bool]) -> list[dict[str, Any]]:
        """Jobs per state for each queue (``group_by`` "queue") or each job set ("job_set") of ``queues`` (all when empty)."""
        return group_counts(self.counts, group_by, queues, visible)

    def counts_with(self, rows: Iterable[JobRow]) -> Mapping[tuple[str, str], Counter[str]]:
        """The jobs per state of each (queue, job set) were ``rows`` put, each in place of the row held for its
        job, without putting them: what `counts` would then be, with no list moved (a count is a few dict
        updates, a move several sorted-list removals and insertions)."""
        changed: dict[tuple[str, str], Counter[str]] = {}

        def counter(where: tuple[str, str]) -> Counter[str]:
            found = changed.get(where)
            if found is None:
                found = changed[where] = Counter(self.counts.get(where, ()))
            return found

        for row in rows:
            before = self.rows.get(row.job_id)
            if before is not None:
                counter((before.queue, before.job_set))[before.state] -= 1
            counter((row.queue, row.job_set))[row.state] += 1
        if not changed:
            return self.counts
        return {**self.counts, **{where: +counts for where, counts in changed.items()}}  # +: no state counted 0


def group_counts(
    counts: Mapping[tuple[str, str], Counter[str]], group_by: str, queues: tuple[str, ...], visible: Callable[[str], bool]
) -> list[dict[str, Any]]:
    """From the jobs per state of each (queue, job set), those per queue (``group_by`` "queue") or per job set
    ("job_set") of ``queues`` (all when empty)."""
    if group_by not in ("queue", "job_set"):
        raise ValueError(f"cannot group by {group_by!r}; groups are queue and job_set")
    groups: dict[tuple[str, ...], Counter[str]] = {}
    for (queue, job_set), held in counts.items():
        if (queues and queue not in queues) or not visible(queue) or not held:
            continue
        group = (queue,) if group_by == "queue" else (queue, job_set)
        groups.setdefault(group, Counter()).update(held)
    return [
        {"queue": group[0], **({"job_set": group[1]} if group_by == "job_set" else {}), "counts": _all_states(held)}
        for group, held in sorted(groups.items())
    ]


def _size(lists: list[SortedList]) -> int:
    return sum(len(keys) for keys in lists)


def _select_from_narrow(narrow: int, in_sort_order: int, limit: int) -> bool:
    """Whether a page sorted by other than submission time is cheaper to select from every job of
    the narrowest filter's lists (``narrow`` jobs, each looked at) than to walk the queues' states
    in the sort's order (``in_sort_order`` jobs), where about one job in in_sort_order / narrow
    matches, until the page is full."""
    return narrow * narrow <= (limit + 1) * in_sort_order


def _add(lists: dict[Any, SortedList], where: Any, key: Key, make: type[SortedList] | type[SortedByValue] = SortedList) -> None:
    if where in lists:
        lists[where].add(key)
    else:
        lists[where] = make((key,))


def _remove(lists: dict[Any, SortedList], where: Any, key: Key) -> None:
    lists[where].remove(key)
    if not lists[where]:
        del lists[where]


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
