"""Records of the `scheduler-feed` topic: what the scheduling agent needs, and nothing more.

The feed is internal (one partition, one reader), so its records are compact JSON rather than
Avro (a job delta as a row of values, see `delta_row`): a job's scheduling view without its pod spec, an executor's nodes and held runs, an
executor's heartbeat between those, a job-set action, the job deltas and job-set actions of one
event sequence together, the tick that closes a scheduling window, the record that commits
what a window's cycle decided, and the scheduler configuration the cycles that follow are decided
with. Each record is a complete statement (a job delta replaces what the
scheduler knew of the job), so applying one twice changes nothing.

Node ids seen by the scheduler are ``executor/node``: two clusters may both have a ``node-0``.
"""

from __future__ import annotations

import json
import operator
import struct
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from sys import intern
from typing import Any

from streams.domain.frozen import maker
from streams.domain.gangs import FAIL_FAST
from streams.domain.queues import queue_weight
from streams.domain.resources import job_resource_request
from streams.domain.shared import shared, shared_time, text
from streams.domain.states import ACTIVE, JOB_TERMINAL

GANG_ANNOTATION_PREFIX = "armadaproject.io/gang"
# Runs that ended without the job ending: the job goes back to the queue (up to a limit).
RETURNED_RUN_STATES = frozenset({"lease_returned", "lease_expired"})


def node_id(executor: str, node: str) -> str:
    return f"{executor}/{node}"


@dataclass(frozen=True, slots=True)
class JobDelta:
    """A job as the scheduler sees it: state, shape, placement constraints and latest run."""

    job_id: str
    queue: str
    job_set_id: str
    state: str
    priority_class: str
    priority: float
    submitted: int
    requests: dict[str, int]
    node_selector: dict[str, str] = field(default_factory=dict)
    tolerations: tuple[dict[str, Any], ...] = ()
    # Required node affinity terms, each a tuple of {key, operator, values} expressions.
    affinity: tuple[tuple[dict[str, Any], ...], ...] = ()
    gang: dict[str, str] = field(default_factory=dict)
    runs: int = 0
    run_id: str | None = None
    executor: str | None = None
    node: str | None = None
    run_state: str | None = None
    leased_at: int | None = None
    # Nodes (``executor/node``) whose runs of this job were returned: the job avoids them.
    avoid_nodes: tuple[str, ...] = ()
    returned_runs: int = 0
    cancel_requested: bool = False
    preempt_requested: bool = False
    grace_period_s: int = 1
    # armadaproject.io/failFast (set on every gang member): a run that comes back fails the job.
    fail_fast: bool = False

    @property
    def terminal(self) -> bool:
        return self.state in JOB_TERMINAL

    @property
    def run_active(self) -> bool:
        """The latest run holds resources: it was leased and has not ended."""
        return self.run_state in ACTIVE

    @property
    def run_returned(self) -> bool:
        """The job is not finished but its latest run is: it waits to be requeued or failed."""
        return not self.terminal and self.state != "queued" and self.run_state in RETURNED_RUN_STATES


@dataclass(frozen=True, slots=True)
class NodeState:
    name: str
    resources: dict[str, int]
    labels: dict[str, str] = field(default_factory=dict)
    taints: tuple[dict[str, Any], ...] = ()
    unschedulable: bool = False
    # Held by pods Flotilla did not start.
    used: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ExecutorState:
    """An executor's nodes and runs as of ``time`` (epoch ms, the report's time on the log)."""

    executor: str
    pool: str
    time: int
    nodes: tuple[NodeState, ...] = ()
    # run id -> job id of every run the executor holds, active or recently ended.
    runs: dict[str, str] = field(default_factory=dict)
    # The runs among those still leased, pending or running.
    active: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Heartbeat:
    """An executor reported again (``time``: the report's time on the log) and the scheduler is
    not sent its nodes and runs this time: they are forwarded every few seconds, not with every
    report, because a report of 50,000 runs cost the worker a quarter of a second to carry."""

    executor: str
    time: int


@dataclass(frozen=True, slots=True)
class JobSetAction:
    """Cancel or reprioritise every unfinished job of a job set, as of the next cycle."""

    queue: str
    job_set_id: str
    action: str  # cancel or reprioritise
    reason: str = ""
    new_priority: float | None = None
    event_id: str = ""
    time: int = 0


@dataclass(frozen=True, slots=True)
class ExecutorSettings:
    """An executor's settings as an administrator last set them (`streams.domain.executor_settings`):
    while ``cordoned``, its nodes take no new job (its runs go on). ``user``, ``time`` and ``event_id``
    say who set them, when, and with which event."""

    executor: str
    cordoned: bool
    reason: str = ""
    user: str = ""
    time: int = 0
    event_id: str = ""


@dataclass(frozen=True, slots=True)
class Changes:
    """Everything one event sequence changed for the scheduler, in the order of its events.

    The job-state agent forwards a folded sequence as one record: a submission of a hundred
    jobs, or a cycle's thousand leases, used to cross the feed as that many messages, and Faust's
    handling of each message cost the scheduling agent more than applying the delta in it."""

    records: tuple[JobDelta | JobSetAction | ExecutorSettings, ...]


@dataclass(frozen=True, slots=True)
class QueueInfo:
    name: str
    weight: float
    cordoned: bool = False
    # The queue record's resource_limits_by_priority_class_name, per-pool overrides included.
    resource_limits: dict[str, dict[str, Any]] = field(default_factory=dict)


def queue_info(queue: dict[str, Any]) -> QueueInfo:
    """The scheduling view of a validated queue record."""
    return QueueInfo(
        name=queue["name"],
        weight=queue_weight(queue),
        cordoned=queue["cordoned"],
        resource_limits=queue["resource_limits_by_priority_class_name"],
    )


@dataclass(frozen=True, slots=True)
class Tick:
    """Closes a scheduling window. Carries the cycle's clock and queue definitions so that
    everything a cycle depends on is on the feed, and the token of the worker that sent it: a
    worker taking the feed over knows it has caught up with the log when it reads its own tick."""

    time: int
    queues: tuple[QueueInfo, ...] = ()
    owner: str = ""


@dataclass(frozen=True, slots=True)
class Committed:
    """What the cycle of the tick at feed offset ``tick`` publishes, committed as one record.

    The scheduler appends it to the feed (one record on one partition: all of it or nothing)
    before it publishes any of it, so a cycle is committed once, whole, and a worker taking the
    feed over publishes again what a committed cycle's owner may not have finished publishing,
    byte for byte. ``events`` and ``commands`` are the (key, value) messages for `events` and
    `executor-commands`, encoded as they are sent."""

    tick: int
    cycle_id: str
    events: tuple[tuple[bytes, bytes], ...] = ()
    commands: tuple[tuple[bytes, bytes], ...] = ()


@dataclass(frozen=True, slots=True)
class Configuration:
    """The scheduler configuration (`streams.scheduler.config_file`, resolved: every setting with the
    value in force) that the feed's owner decides the following cycles with. A worker appends it when
    it takes the feed over, before its first tick, so a replay of the feed repeats every cycle with the
    configuration that decided it, from the log alone (each cycle record carries the same hash)."""

    hash: str
    resolved: dict[str, Any]


FeedRecord = JobDelta | ExecutorState | Heartbeat | JobSetAction | ExecutorSettings | Changes | Tick | Committed | Configuration

_KIND = {
    JobDelta: "job",
    ExecutorState: "executor",
    Heartbeat: "heartbeat",
    JobSetAction: "job_set",
    ExecutorSettings: "executor_settings",
    Changes: "changes",
    Tick: "tick",
    Configuration: "config",
}


def job_delta(job: dict[str, Any]) -> JobDelta:
    """The scheduling view of a folded job (a job_state record with its spec)."""
    return JobDelta(**state_fields(job), **spec_fields(job["spec"]))


# Job id -> (the job as a change left it, its `_view`): kept by a fold across the changes of a part (`changed`).
Views = dict[str, tuple[dict[str, Any], tuple[Any, ...]]]


def changed(before: dict[str, Any] | None, after: dict[str, Any], views: Views | None = None) -> bool:
    """Whether a folded change changed the scheduler's view of the job, so that its delta is forwarded.

    The fold never changes a job's spec, so only the part its events change is compared, and
    pending and running hold the same resources: see `_view`. With ``views``, the view of ``after`` is kept
    there and that of ``before`` taken from there when it is the very job a change left: a job's events come
    several to a part in a refold, and working out both views of every change was ~5% of its child's fold
    (py-spy, bench/fold.py)."""
    if views is None:
        return before is None or _view(before) != _view(after)
    view = _view(after)
    held = views.get(after["job_id"])
    views[after["job_id"]] = (after, view)
    return before is None or view != (held[1] if held is not None and held[0] is before else _view(before))


def feed_change(before: dict[str, Any] | None, after: dict[str, Any]) -> JobDelta | None:
    """The delta the job-state agent forwards for a folded change, or None when the scheduler's
    view of the job did not change."""
    return job_delta(after) if changed(before, after) else None


# A job whose scheduling view changed (its state after the change), a job-set action or an executor's
# settings: what the fold forwards, made into deltas (`job_delta`) only once a batch has kept each job's last.
Change = dict[str, Any] | JobSetAction | ExecutorSettings


def latest_changes(changes: list[Change]) -> list[Change]:
    """``changes`` with each job's changes between two job-set actions reduced to the last one, in its place.

    A delta is a complete statement of the job, so the last one says all the earlier ones did: a
    batch of a restored log holds most of each job's life, whose queued, leased and ended deltas
    become one (and the scheduler never indexes a job it already knows to be over). A job-set
    action acts on the jobs the index holds when it comes, so no delta moves across one."""
    kept: list[Change | None] = []
    at: dict[str, int] = {}
    for change in changes:
        if isinstance(change, dict):
            earlier = at.get(change["job_id"])
            if earlier is not None:
                kept[earlier] = None
            at[change["job_id"]] = len(kept)
        else:
            at = {}
        kept.append(change)
    return [change for change in kept if change is not None]


def _view(job: dict[str, Any]) -> tuple[Any, ...]:
    """The values of `state_fields` that a job's events change, compared as the scheduler needs them:
    the job's state moves along with its latest run's, so a run leased, pending or running and its
    job are both "active" (the scheduler need not hear of the step from pending to running)."""
    runs = job["runs"]
    state = job["state"]
    if runs:
        latest = runs[-1]
        run_state = latest["state"]
        if run_state in ACTIVE:
            run_state = "active"
            if state in ACTIVE:
                state = "active"
        run: tuple[Any, ...] = (latest["run_id"], latest["executor"], latest["node"], run_state, latest["leased_at"])
        returned = [r for r in runs if r["state"] in RETURNED_RUN_STATES]
        gone: tuple[Any, ...] = (_avoided(returned), len(returned)) if returned else ()
    else:
        run = gone = ()
    return (state, job["priority_class"], job["priority"], len(runs), run, gone, job["cancel_requested"], job["preempt_requested"])


def _avoided(returned: list[dict[str, Any]]) -> tuple[str, ...]:
    """Nodes to avoid: those of the runs their executor gave back. An expired lease says nothing against
    the node (the scheduler's own take-back of an expired lease avoids nothing either)."""
    return tuple(sorted({node_id(run["executor"], run["node"]) for run in returned if run["node"] and run["state"] == "lease_returned"}))


def spec_fields(spec: dict[str, Any]) -> dict[str, Any]:
    """The part of a job's scheduling view that its spec fixes at submission."""
    pod = spec.get("pod_spec") or {}
    affinity = ((pod.get("affinity") or {}).get("node_affinity") or {}).get("required") or []
    return {
        "requests": job_resource_request(pod),
        "node_selector": dict(pod.get("node_selector") or {}),
        "tolerations": tuple(
            {k: v for k, v in t.items() if v is not None and k != "toleration_seconds"} for t in pod.get("tolerations") or []
        ),
        "affinity": tuple(tuple(dict(e) for e in term["match_expressions"]) for term in affinity),
        "gang": {k: v for k, v in (spec.get("annotations") or {}).items() if k.startswith(GANG_ANNOTATION_PREFIX)},
        "grace_period_s": int(pod.get("termination_grace_period_seconds") or 1),
        "fail_fast": (spec.get("annotations") or {}).get(FAIL_FAST) == "true",
    }


def state_fields(job: dict[str, Any]) -> dict[str, Any]:
    """The part of a job's scheduling view that its events change."""
    runs = job["runs"]
    latest = runs[-1] if runs else None
    returned = [run for run in runs if run["state"] in RETURNED_RUN_STATES]
    return {
        "job_id": job["job_id"],
        "queue": job["queue"],
        "job_set_id": job["job_set_id"],
        "state": job["state"],
        "priority_class": job["priority_class"],
        "priority": job["priority"],
        "submitted": job["submitted"],
        "runs": len(runs),
        "run_id": latest["run_id"] if latest else None,
        "executor": latest["executor"] if latest else None,
        "node": latest["node"] if latest else None,
        "run_state": latest["state"] if latest else None,
        "leased_at": latest["leased_at"] if latest else None,
        "avoid_nodes": _avoided(returned),
        "returned_runs": len(returned),
        "cancel_requested": job["cancel_requested"],
        "preempt_requested": job["preempt_requested"],
    }


# JSON without spaces, from one encoder (json.dumps builds an encoder per call when given separators).
compact_json = json.JSONEncoder(separators=(",", ":")).encode

# A committed cycle is binary, not JSON: it carries encoded messages, up to megabytes of them.
_COMMITTED_MAGIC = b"\x00FC1"
_COUNTS = struct.Struct(">qII")
_LENGTHS = struct.Struct(">II")


def encode(record: FeedRecord) -> bytes:
    if isinstance(record, Committed):
        return _encode_committed(record)
    return compact_json(to_json(record)).encode()


def encode_changes(changes: Sequence[Change]) -> bytes:
    """The `Changes` record of ``changes`` (each job as its delta, see `job_delta`), as `encode` writes
    it, each job written straight as its row: the fold forwards one per changed job, and making each
    a frozen JobDelta first cost as much as writing it."""
    records = [job_row(change) if isinstance(change, dict) else to_json(change) for change in changes]
    return compact_json({"records": records, "k": _KIND[Changes]}).encode()


def job_row(job: dict[str, Any]) -> list[Any]:
    """`delta_row` of the job's delta (`job_delta`), made from the job itself."""
    runs = job["runs"]
    latest = runs[-1] if runs else None
    returned = [run for run in runs if run["state"] in RETURNED_RUN_STATES]
    return [
        job["job_id"],
        job["queue"],
        job["job_set_id"],
        job["state"],
        job["priority_class"],
        job["priority"],
        job["submitted"],
        len(runs),
        *((latest["run_id"], latest["executor"], latest["node"], latest["state"], latest["leased_at"]) if latest else _NO_RUN),
        _avoided(returned),
        len(returned),
        job["cancel_requested"],
        job["preempt_requested"],
        shape_text(job["spec"]),
    ]


_NO_RUN = (None, None, None, None, None)
# The text of each shape by what it is made of (`_shape_key`): the jobs of a workload share a few
# shapes, and making one's text (`spec_fields`, then JSON) cost ~10 us per job forwarded.
_SHAPE_TEXTS: OrderedDict[Any, str] = OrderedDict()


def shape_text(spec: dict[str, Any]) -> str:
    """The text of `spec_fields` of ``spec`` as a row holds it (`delta_row`)."""
    key = _shape_key(spec)
    try:
        text = None if key is None else _SHAPE_TEXTS.get(key)
    except TypeError:  # an unhashable value in it: not the shape of a validated spec
        key = text = None
    if text is None:
        text = compact_json(tuple(spec_fields(spec).values()))
        if key is not None:
            _SHAPE_TEXTS[key] = text
            if len(_SHAPE_TEXTS) > _SHAPES_SIZE:
                _SHAPE_TEXTS.popitem(last=False)
    return text


def _shape_key(spec: dict[str, Any]) -> tuple[Any, ...] | None:
    """Everything `spec_fields` reads of ``spec``; None for a spec with tolerations or affinity (rarer,
    and nested: their text is made each time)."""
    pod = spec.get("pod_spec") or {}
    if pod.get("tolerations") or pod.get("affinity"):
        return None
    annotations = spec.get("annotations") or {}
    return (
        tuple(tuple(((c.get("resources") or {}).get("requests") or {}).items()) for c in pod.get("containers") or []),
        tuple(tuple(((c.get("resources") or {}).get("requests") or {}).items()) for c in pod.get("init_containers") or []),
        tuple((pod.get("node_selector") or {}).items()),
        pod.get("termination_grace_period_seconds"),
        tuple((k, v) for k, v in annotations.items() if k.startswith(GANG_ANNOTATION_PREFIX) or k == FAIL_FAST),
    )


def decode(raw: bytes) -> FeedRecord:
    """Raises ValueError for anything that is not a feed record."""
    if raw[: len(_COMMITTED_MAGIC)] == _COMMITTED_MAGIC:
        return _decode_committed(raw)
    try:
        body = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"not a scheduler-feed record: {exc}") from exc
    return from_json(body)


def _encode_committed(record: Committed) -> bytes:
    cycle_id = record.cycle_id.encode()
    counts = _COUNTS.pack(record.tick, len(record.events), len(record.commands))
    parts = [_COMMITTED_MAGIC, counts, struct.pack(">H", len(cycle_id)), cycle_id]
    for key, value in (*record.events, *record.commands):
        parts += (_LENGTHS.pack(len(key), len(value)), key, value)
    return b"".join(parts)


def _decode_committed(raw: bytes) -> Committed:
    try:
        at = len(_COMMITTED_MAGIC)
        tick, events, commands = _COUNTS.unpack_from(raw, at)
        at += _COUNTS.size
        (id_length,) = struct.unpack_from(">H", raw, at)
        at += 2
        cycle_id = raw[at : at + id_length].decode()
        at += id_length
        messages = []
        for _ in range(events + commands):
            key_length, value_length = _LENGTHS.unpack_from(raw, at)
            at += _LENGTHS.size
            messages.append((raw[at : at + key_length], raw[at + key_length : at + key_length + value_length]))
            at += key_length + value_length
    except (struct.error, UnicodeDecodeError) as exc:
        raise ValueError(f"not a committed-cycle record: {exc}") from exc
    if at != len(raw):
        raise ValueError(f"a committed-cycle record of {len(raw)} bytes ends at byte {at}")
    return Committed(tick, cycle_id, tuple(messages[:events]), tuple(messages[events:]))


def to_json(record: FeedRecord) -> dict[str, Any]:
    """The record as a JSON-ready dict, for embedding in other JSON (the scheduler's index table)."""
    body = _to_json(record)
    body["k"] = _KIND[type(record)]
    return body


# A job delta travels as a row: the fields its job's events change, then the text of the fields its
# spec fixes (its shape). Keys cost more than values to write and to read, and the jobs of a
# workload share a few shapes, so a reader decodes each distinct shape text once (`_SHAPES`).
_DELTA_STATE = (
    "job_id",
    "queue",
    "job_set_id",
    "state",
    "priority_class",
    "priority",
    "submitted",
    "runs",
    "run_id",
    "executor",
    "node",
    "run_state",
    "leased_at",
    "avoid_nodes",
    "returned_runs",
    "cancel_requested",
    "preempt_requested",
)
_DELTA_SHAPE = ("requests", "node_selector", "tolerations", "affinity", "gang", "grace_period_s", "fail_fast")
assert tuple(spec_fields({})) == _DELTA_SHAPE  # job_row writes spec_fields' values in this order
assert sorted(_DELTA_STATE + _DELTA_SHAPE) == sorted(JobDelta.__slots__)
_state_of = operator.attrgetter(*_DELTA_STATE)
_shape_of = operator.attrgetter(*_DELTA_SHAPE)
_SHAPES: OrderedDict[str, tuple[Any, ...]] = OrderedDict()
_SHAPES_SIZE = 8192
# The text of each shape in `_SHAPES`, by the identity of its parts: the deltas read from rows hold
# those very objects, so writing one back (the scheduler's index entries) finds its text without
# writing it again. The parts are held here too, so their ids are not reused while remembered.
_TEXTS: dict[tuple[int, ...], tuple[tuple[Any, ...], str]] = {}


def delta_row(delta: JobDelta) -> list[Any]:
    """The delta as a JSON-ready row (`delta_from_row` reads it)."""
    shape = _shape_of(delta)
    known = _TEXTS.get(tuple(map(id, shape)))
    if known is not None and all(map(operator.is_, known[0], shape)):
        return [*_state_of(delta), known[1]]
    return [*_state_of(delta), compact_json(shape)]


def delta_from_row(row: Any) -> JobDelta:
    """The delta ``row`` encodes; raises ValueError (or TypeError, KeyError) for anything else.

    Its text and values are shared with every other delta holding equal ones (streams.domain.shared):
    the index holds a delta per unfinished job, a million of them when the queues are long."""
    if not isinstance(row, list) or len(row) != len(_DELTA_STATE) + 1:
        raise ValueError(f"a job delta is a row of {len(_DELTA_STATE) + 1} values, not {str(row)[:80]}")
    (
        job_id,
        queue,
        job_set_id,
        state,
        priority_class,
        priority,
        submitted,
        runs,
        run_id,
        executor,
        node,
        run_state,
        leased_at,
        avoid_nodes,
        returned_runs,
        cancel_requested,
        preempt_requested,
        shape_text,
    ) = row
    shape = _SHAPES.get(shape_text)
    if shape is None:
        shape = _shape(shape_text)
    return _make_delta(
        intern(job_id),  # one string with the API's job index (`streams.domain.job_index`) in a worker holding both
        intern(queue),
        intern(job_set_id),
        intern(state),
        intern(priority_class),
        shared(priority),
        shared_time(submitted),
        runs,
        run_id,
        None if executor is None else intern(executor),
        None if node is None else intern(node),
        None if run_state is None else intern(run_state),
        leased_at,
        shared(tuple(avoid_nodes)) if avoid_nodes else (),
        returned_runs,
        cancel_requested,
        preempt_requested,
        *shape,
    )


# Rows are read into deltas without JobDelta's own __init__ (`streams.domain.frozen`): a million a replay.
_DELTA_FIELDS = _DELTA_STATE + _DELTA_SHAPE
_make_delta = maker(JobDelta, _DELTA_FIELDS)
_delta_values = operator.attrgetter(*_DELTA_FIELDS)
_DELTA_POSITION = {name: i for i, name in enumerate(_DELTA_FIELDS)}


# A delta without its job id and submission time: its part (`part_of`). The jobs that never ran (most of
# them when the queues are long) share theirs with every other job of the same queue, job set, state,
# priority and shape, so the scheduler's index keeps each such job as its id, its time and that one
# part (`streams.scheduler.index.Entry`), and makes its delta again when asked (`delta_of`).
PART_FIELDS = tuple(name for name in _DELTA_FIELDS if name not in ("job_id", "submitted"))
PART = {name: i for i, name in enumerate(PART_FIELDS)}
part_values = operator.attrgetter(*PART_FIELDS)  # a delta's values in `PART_FIELDS` order
delta_of = maker(JobDelta, ("job_id", "submitted", *PART_FIELDS))
# Parts by the identity of their values (so two equal values of another type, 0 and 0.0, or a True and
# a 1, are never taken for one another; the text of deltas read from rows is interned, and their
# values shared). The parts hold those values, so their ids are not reused while remembered; emptied
# when it grows past what a workload has.
_PARTS: dict[tuple[Any, ...], tuple[Any, ...]] = {}
_PARTS_SIZE = 65536
# The part handed out last: the jobs of a submission come one after another with the same part, and comparing
# with it value by value (`is`) costs half of making the key of ids and looking it up.
_last_part: list[tuple[Any, ...]] = [()]


def part_of(delta: JobDelta) -> tuple[Any, ...]:
    """The delta's values but its job id and submission time, in `PART_FIELDS` order: one tuple for every
    equal part (``delta_of(delta.job_id, delta.submitted, *part_of(delta)) == delta``)."""
    part = part_values(delta)
    last = _last_part[0]
    if last and all(map(operator.is_, part, last)):
        return last
    key = tuple(map(id, part))
    known = _PARTS.get(key)
    if known is None:
        if len(_PARTS) >= _PARTS_SIZE:
            _PARTS.clear()
        known = _PARTS[key] = part
    _last_part[0] = known
    return known


# The text of each part's row around its job's id and submission time (`part_row_text`), by the part's
# identity (parts are shared: `part_of`), the part held beside it so that its id is not reused meanwhile.
_PART_TEXTS: dict[int, tuple[tuple[Any, ...], str, str]] = {}
_SUBMITTED_AT = _DELTA_STATE.index("submitted")


def part_row_text(job_id: str, submitted: int, part: tuple[Any, ...]) -> str:
    """``compact_json(delta_row(delta_of(job_id, submitted, *part)))``, with the text of the part made once for
    all the jobs sharing it: a queued job's row differs from its job set's others only by its id and time,
    and the scheduler writes one per job it folds queued (its index entry, `SchedulerIndex.dump`)."""
    known = _PART_TEXTS.get(id(part))
    if known is None or known[0] is not part:
        row = delta_row(delta_of("", 0, *part))
        known = (part, compact_json(row[1:_SUBMITTED_AT])[1:-1], compact_json(row[_SUBMITTED_AT + 1 :])[1:-1])
        if len(_PART_TEXTS) >= _PARTS_SIZE:
            _PART_TEXTS.clear()
        _PART_TEXTS[id(part)] = known
    return f"[{compact_json(job_id)},{known[1]},{compact_json(submitted)},{known[2]}]"


def updated(delta: JobDelta, **changes: Any) -> JobDelta:
    """``dataclasses.replace(delta, **changes)``, made as rows are read (`_make_delta`): a cycle
    makes one per lease, and replace's walk over the fields cost three times as much."""
    values = list(_delta_values(delta))
    for name, value in changes.items():
        values[_DELTA_POSITION[name]] = value
    return _make_delta(*values)


# Where a lease's values go among `delta_of`'s arguments (`leased`): the part's first five, state and run fields, then the rest.
_LEASE_CHANGES = ("state", "runs", "run_id", "executor", "node", "run_state", "leased_at")
assert PART_FIELDS[2] == "state" and PART_FIELDS[5:11] == _LEASE_CHANGES[1:]


def leased(job_id: str, submitted: int, part: tuple[Any, ...], runs: int, run_id: str, executor: str, node: str, at: int) -> JobDelta:
    """``updated(delta_of(job_id, submitted, *part), state="leased", runs=runs, run_id=run_id, executor=executor,
    node=node, run_state="leased", leased_at=at)``, made at once: a cycle makes one per lease, mostly of a job the index
    holds as its part, and making its delta first, then a copy through `updated`'s names, cost three times as much."""
    return delta_of(job_id, submitted, part[0], part[1], "leased", part[3], part[4], runs, run_id, executor, node, "leased", at, *part[11:])


def _shape(shape_text: str) -> tuple[Any, ...]:
    requests, node_selector, tolerations, affinity, gang, grace_period_s, fail_fast = json.loads(shape_text)
    shape = (
        shared(requests),
        shared(node_selector),
        shared(tuple(tolerations)),
        shared(tuple(tuple(term) for term in affinity)),
        shared(gang),
        grace_period_s,
        fail_fast,
    )
    _SHAPES[shape_text] = shape
    _TEXTS[tuple(map(id, shape))] = (shape, shape_text)
    if len(_SHAPES) > _SHAPES_SIZE:
        _, evicted = _SHAPES.popitem(last=False)
        _TEXTS.pop(tuple(map(id, evicted)), None)
    return shape


# A job delta written as a dict of fields (before rows, so still in older index tables) shares these too.
_SHARED_TEXT = ("queue", "job_set_id", "state", "priority_class", "executor", "node", "run_state")
_SHARED_VALUES = ("priority", "requests", "node_selector", "tolerations", "affinity", "gang", "avoid_nodes", "grace_period_s")


def from_json(body: Any) -> FeedRecord:
    """The record ``to_json`` gave (``body`` is consumed); raises ValueError for anything else."""
    try:
        kind = body.pop("k")
        if kind == "job" and "r" in body:
            return delta_from_row(body["r"])
        if kind == "job":
            fields = {
                **body,
                "tolerations": tuple(body.get("tolerations", ())),
                "affinity": tuple(tuple(term) for term in body.get("affinity", ())),
                "avoid_nodes": tuple(body.get("avoid_nodes", ())),
            }
            for name in _SHARED_TEXT:
                if name in fields:
                    fields[name] = text(fields[name])
            for name in _SHARED_VALUES:
                if name in fields:
                    fields[name] = shared(fields[name])
            return JobDelta(**fields)
        if kind == "executor":
            nodes = tuple(NodeState(**{**n, "taints": tuple(n.get("taints", ()))}) for n in body.pop("nodes", ()))
            return ExecutorState(**{**body, "active": tuple(body.get("active", ()))}, nodes=nodes)
        if kind == "heartbeat":
            return Heartbeat(**body)
        if kind == "job_set":
            return JobSetAction(**body)
        if kind == "executor_settings":
            return ExecutorSettings(**body)
        if kind == "changes":
            # Rows read here, not through `_change`: a changes record holds hundreds, and the call per row showed.
            return Changes(records=tuple([delta_from_row(r) if type(r) is list else _change(r) for r in body["records"]]))
        if kind == "config":
            return Configuration(hash=body["hash"], resolved=body["resolved"])
        if kind == "tick":
            return Tick(time=body["time"], queues=tuple(QueueInfo(**q) for q in body.get("queues", ())), owner=body.get("owner", ""))
    except (TypeError, KeyError, AttributeError) as exc:
        raise ValueError(f"not a scheduler-feed record: {exc}") from exc
    raise ValueError(f"unknown scheduler-feed record kind {kind!r}")


def _change(body: Any) -> JobDelta | JobSetAction | ExecutorSettings:
    """A member of a changes record: a job delta (a row), a job-set action or an executor's settings, checked before decoding."""
    if isinstance(body, list):
        return delta_from_row(body)
    kind = body.get("k") if isinstance(body, dict) else None
    if kind not in ("job", "job_set", "executor_settings"):
        raise ValueError(f"a changes record holds job, job_set and executor_settings records, not {kind!r}")
    record = from_json(body)
    assert isinstance(record, (JobDelta, JobSetAction, ExecutorSettings))
    return record


def _to_json(record: FeedRecord) -> dict[str, Any]:
    if isinstance(record, Changes):
        return {"records": [delta_row(r) if isinstance(r, JobDelta) else to_json(r) for r in record.records]}
    if isinstance(record, JobDelta):
        return {"r": delta_row(record)}
    if isinstance(record, ExecutorState):
        return {
            "executor": record.executor,
            "pool": record.pool,
            "time": record.time,
            "runs": record.runs,
            "active": record.active,
            "nodes": [{name: getattr(n, name) for name in NodeState.__slots__} for n in record.nodes],
        }
    if isinstance(record, Tick):
        queues = [{name: getattr(q, name) for name in QueueInfo.__slots__} for q in record.queues]
        return {"time": record.time, "queues": queues, "owner": record.owner}
    return {name: getattr(record, name) for name in type(record).__slots__}
