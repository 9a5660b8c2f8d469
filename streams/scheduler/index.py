"""The scheduling agent's view of the world: unfinished jobs, executors and limiter state.

The index runs ahead of the log. When a cycle leases, requeues or ends a job, the index records
that at once, while the job-state agent folds the matching event and sends the confirming job
delta back through the feed a little later. Deltas that were already on their way describe the
job as it was before the decision; the entry's expectation recognises and skips them, so a job
leased in one cycle is never seen as queued again by the next.

Everything is keyed for the agent's changelog-backed table (`writes`/`load`), from which the
index is rebuilt when a worker takes the scheduler feed over.

A lease costs the table one write of its job's entry, by the cycle that decides it. The fold's
confirming delta comes back later and mostly says just what the decision recorded; all it adds is
that the fold accepted the run (and so sent its executor the command), and when (`Entry.fold_run`).
That is not written as the job's entry again: the acceptances a batch of feed records folded are
written together, as one acceptance record keyed by the batch's last feed offset (`close_batch`).
The take-over rule: a worker that rebuilds the index applies each acceptance record to the entries
whose stored row does not carry it yet (the entry's run is the one accepted, and its stored
``fold_run`` is not), so it reaches the in-memory state of the worker that wrote them, whichever of
the two writes came last. A record is deleted once every entry it speaks for was written again
(a later decision, a change, or the job's end).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from operator import attrgetter, is_, itemgetter
from typing import TYPE_CHECKING, Any, Generic, TypeVar, overload

from streams.scheduler import feed
from streams.scheduler.algorithm.model import Job, LimiterState, RunningJob
from streams.scheduler.convert import limiters_from_json, limiters_to_json, part_job, scheduling_job
from streams.scheduler.feed import Changes, ExecutorSettings, ExecutorState, Heartbeat, JobDelta, JobSetAction, updated

if TYPE_CHECKING:
    from streams.scheduler.pool_jobs import ExecutorNodes, PoolJobs
    from streams.scheduler.takers import ExecutorRuns

LEASE, REQUEUE, END = "lease", "requeue", "end"
LIMITERS_KEY = "x:limiters"
CYCLES_KEY = "x:cycles"
OFFSET_KEY = "x:offset"
PUBLISHED_KEY = "x:published"
JOB_KEY_PREFIX = "j:"
ACCEPTED_PREFIX = "a:"
T = TypeVar("T")


class _Decisions:
    """What an entry holds beyond its job: the scheduler's decisions and the fold's acceptance of
    them. Most queued jobs have none (each field its default), and their entries hold no such object."""

    __slots__ = (
        "expect",
        "expect_runs",
        "announce_priority",
        "cancel_reason",
        "fold_run",
        "fold_run_at",
        "announce_from",
        "accepted_in",
        "_running",
    )

    def __init__(self) -> None:
        self.expect: str | None = None
        self.expect_runs = 0
        self.announce_priority: float | None = None
        self.cancel_reason: str | None = None
        self.fold_run: str | None = None
        self.fold_run_at = 0
        self.announce_from: float | None = None
        self.accepted_in: int | None = None
        self._running: RunningJob | None = None


class _Decided(Generic[T]):
    """An entry's field kept in its `_Decisions`, read as ``default`` while the entry has none, and
    giving it one only when set to something else (``is``, so that 0.0 is kept where 0 is the default)."""

    def __init__(self, default: T) -> None:
        self.default = default

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name
        self.read = attrgetter(name)

    @overload
    def __get__(self, entry: None, owner: type) -> _Decided[T]: ...
    @overload
    def __get__(self, entry: Entry, owner: type) -> T: ...
    def __get__(self, entry: Entry | None, owner: type) -> T | _Decided[T]:
        if entry is None:
            return self
        decisions = entry._decisions
        return self.default if decisions is None else self.read(decisions)

    def __set__(self, entry: Entry, value: T) -> None:
        decisions = entry._decisions
        if decisions is None:
            if value is self.default:
                return
            decisions = entry._decisions = _Decisions()
        setattr(decisions, self.name, value)


class Entry:
    """A job as the scheduler last decided or heard. ``expect`` names a decision not yet
    confirmed by the feed; ``expect_runs`` is the job's run count the decision left behind.

    A job that never ran is held as its id, its submission time and the part of its delta it shares
    with the other jobs of its queue, job set and shape (`feed.part_of`), not as a delta of its own:
    with a million jobs queued, their deltas were a third of the index. ``delta`` makes it again.
    The decision fields are held apart (`_Decisions`), for the entries that have any: a million
    queued jobs have none, and their nine slots made an entry 136 bytes, not 72."""

    __slots__ = ("_view", "job_id", "_submitted", "_job", "_decisions")
    _view: JobDelta | tuple[Any, ...]
    job_id: str
    _submitted: int | None
    _job: Job | None
    _decisions: _Decisions | None

    expect = _Decided[str | None](None)
    expect_runs = _Decided[int](0)
    # A job-set reprioritisation to announce with a JobReprioritised event at the next cycle.
    announce_priority = _Decided[float | None](None)
    # Why the job's job set was cancelled (the fold knows why a single job was, the job set's jobs do not).
    cancel_reason = _Decided[str | None](None)
    # The run the fold has accepted (and so sent its executor a command for), and the time its
    # executor was last heard from then: a run is missed in reports only counting from there,
    # since under load the fold accepts a lease long after the cycle made it.
    fold_run = _Decided[str | None](None)
    fold_run_at = _Decided[int](0)
    # The job's priority as the fold had it when ``announce_priority`` was set (None: not known, a row
    # stored before it was kept). A delta that brings the announced priority from another one is the
    # fold of the announcement itself: a refold of a restored log forwards the job-set action again,
    # then the JobReprioritised events the cycles emitted for it, which announce nothing new.
    announce_from = _Decided[float | None](None)
    # The acceptance record (its feed offset) that holds ``fold_run`` for the table, while the stored
    # entry does not (see the module's docstring).
    accepted_in = _Decided[int | None](None)
    # The job's run as the last cycle placed it (`running`): a thousand runs go on unchanged from
    # cycle to cycle, and each cycle made them all again.
    _running = _Decided[RunningJob | None](None)

    def __init__(
        self,
        delta: JobDelta,
        expect: str | None = None,
        expect_runs: int = 0,
        announce_priority: float | None = None,
        cancel_reason: str | None = None,
        fold_run: str | None = None,
        fold_run_at: int = 0,
        announce_from: float | None = None,
        accepted_in: int | None = None,
    ) -> None:
        self._store(delta)
        self._job = None
        self._decisions = None
        decided = (expect, expect_runs, announce_priority, cancel_reason, fold_run, fold_run_at, announce_from, accepted_in)
        if all(map(is_, decided, _DEFAULTS)):  # a job the feed brings first: nothing decided (eight descriptor calls saved)
            return
        self.expect = expect
        self.expect_runs = expect_runs
        self.announce_priority = announce_priority
        self.cancel_reason = cancel_reason
        self.fold_run = fold_run
        self.fold_run_at = fold_run_at
        self.announce_from = announce_from
        self.accepted_in = accepted_in

    def _store(self, delta: JobDelta) -> None:
        self.job_id = delta.job_id
        if delta.run_id is None and delta.run_state is None:
            self._view = feed.part_of(delta)
            self._submitted = delta.submitted
        else:
            self._view, self._submitted = delta, None

    @property
    def delta(self) -> JobDelta:
        view = self._view
        if type(view) is tuple:
            return feed.delta_of(self.job_id, self._submitted, *view)
        return view  # type: ignore[return-value]

    def leased(self, runs: int, run_id: str, executor: str, node: str, at: int) -> JobDelta:
        """Its delta leased (`feed.leased`), made at once from the part of a job that never ran."""
        view = self._view
        if type(view) is tuple:
            return feed.leased(self.job_id, self._submitted, view, runs, run_id, executor, node, at)  # type: ignore[arg-type]
        d: JobDelta = view  # type: ignore[assignment]
        return feed.leased(d.job_id, d.submitted, feed.part_values(d), runs, run_id, executor, node, at)

    @property
    def has_run(self) -> bool:
        """Whether the job's delta names a run (it was leased): if not, it is held in part (`feed.part_of`)."""
        return type(self._view) is not tuple

    def value(self, name: str) -> Any:
        """The delta's field ``name`` (one of `feed.PART_FIELDS`), without making the delta of a job that never ran."""
        view = self._view
        if type(view) is tuple:
            return view[_PART[name]]
        return getattr(view, name)

    @property
    def part(self) -> tuple[Any, ...] | None:
        """The part of its delta the job shares with others (`feed.part_of`) while it never ran, else None."""
        view = self._view
        return view if type(view) is tuple else None

    @property
    def job(self) -> Job:
        if self._job is None:
            view = self._view
            if type(view) is tuple:
                self._job = part_job(self.job_id, self._submitted, view)  # type: ignore[arg-type]
            else:
                self._job = scheduling_job(view)  # type: ignore[arg-type]
        return self._job

    def running(self, node: str, priority: int) -> RunningJob:
        """The job running on ``node`` at ``priority`` since its lease (`RunningJob`), the last cycle's if it is the same."""
        started = (self.delta.leased_at or 0) / 1000.0
        run = self._running
        if run is None or run.job is not self.job or run.node != node or run.scheduled_priority != priority or run.started_at != started:
            run = self._running = RunningJob(self.job, node, priority, started)
        return run

    def set(self, delta: JobDelta, same_job: bool = False) -> None:
        """``same_job``: the caller knows that ``delta`` changes nothing its Job is made of (a lease)."""
        # Most changes are of the job's run, not of what its Job is made of: the Job is kept then.
        if not same_job and self._job is not None and _job_fields(delta) != self.job_values():
            self._job = None
        self._store(delta)

    def job_values(self) -> tuple[Any, ...]:
        """What its Job is made of (`_job_fields` of the delta), read off its part while the job never ran."""
        view = self._view
        if type(view) is tuple:
            values = _job_part(view)
            return (self.job_id, *values[:3], self._submitted, *values[3:])
        return _job_fields(view)

    @property
    def busy(self) -> bool:
        """Whether a cycle's lease lifecycle may act on the job (`Cycle.lifecycle`): a reprioritisation
        to announce, a cancel request, an active or returned run. A queued job with none of these
        waits for placement only, and the lifecycle need not look at it."""
        # Read off `_decisions` itself, not through the fields' descriptors: asked at every change of an entry.
        decisions = self._decisions
        announcing = False
        if decisions is not None:
            if decisions.expect == END:
                return False
            announcing = decisions.announce_priority is not None
        view = self._view
        if type(view) is tuple:  # never ran: no run active or returned
            return announcing or bool(view[_CANCEL])
        d: JobDelta = view  # type: ignore[assignment]
        return announcing or d.cancel_requested or d.run_active or d.run_returned

    def confirmed_by(self, delta: JobDelta) -> bool:
        decisions = self._decisions
        if decisions is None:
            return False
        expect, runs = decisions.expect, decisions.expect_runs
        if expect == LEASE:
            return delta.runs >= runs
        if expect == REQUEUE:
            return delta.runs > runs or (delta.runs == runs and delta.state == "queued")
        return False  # END: only the terminal delta, which removes the entry (None: nothing to confirm)


# What `SchedulerIndex._fold_job` did to an entry.
_CHANGED, _ACCEPTED, _UNCHANGED = range(3)
_PART = feed.PART
_CANCEL = _PART["cancel_requested"]
# The decision fields a job's table value holds after its delta's row, in `Entry`'s argument order (`load`).
_STORED = ("expect", "expect_runs", "announce_priority", "cancel_reason", "fold_run", "fold_run_at", "announce_from")
_stored_of = attrgetter(*_STORED)
# Every decision field's default, in `Entry`'s argument order: an entry given just these has no `_Decisions`.
_DEFAULTS = tuple(getattr(Entry, name).default for name in (*_STORED, "accepted_in"))
# That tail for an entry with no decisions (each field's default), written as text (`SchedulerIndex.dump`).
_UNDECIDED = "," + feed.compact_json([getattr(Entry, name).default for name in _STORED])[1:]


# What `scheduling_job` reads of a delta (the others are state and run fields).
_job_fields = attrgetter(
    "job_id",
    "queue",
    "priority_class",
    "requests",
    "submitted",
    "priority",
    "node_selector",
    "tolerations",
    "affinity",
    "avoid_nodes",
    "gang",
)
# The same of a part (`feed.part_of`): all but the job id and, between the third and the fourth, the submission time.
_job_part = itemgetter(
    *(
        feed.PART[name]
        for name in ("queue", "priority_class", "requests", "priority", "node_selector", "tolerations", "affinity", "avoid_nodes", "gang")
    )
)


class SchedulerIndex:
    def __init__(self) -> None:
        self.jobs: dict[str, Entry] = {}
        # The jobs whose entry is busy (see `Entry.busy`), kept with every change of an entry
        # (`touch`): a cycle's lifecycle walks these, not every queued job.
        self.busy: set[str] = set()
        # Busy jobs a cycle's lifecycle found nothing to do for, and that nothing can change until their
        # entry changes (`touch`) or their executor reports anew or goes silent (`unquiet`): the jobs of a
        # full cluster, which every cycle walked again. Per executor, run id -> job id, as of its report
        # in ``quiet_reports``; and per job, where it is held.
        self.quiet: dict[str, dict[str, str]] = {}
        self.quiet_reports: dict[str, ExecutorState] = {}
        self._quiet_at: dict[str, tuple[str, str]] = {}
        # Each pool's running and queued jobs as its last cycle gathered them (`streams.scheduler.pool_jobs`),
        # and the jobs whose entries changed since (noted only while some pool's are kept).
        self.pool_jobs: dict[str, PoolJobs] = {}
        self._changed: set[str] = set()
        # Each executor's active runs as the index holds them (`streams.scheduler.takers`), while some cycle keeps
        # them, and the jobs whose entries changed since they were last brought up to date.
        self.executor_runs: ExecutorRuns | None = None
        self.runs_changed: set[str] = set()
        # Each executor's nodes as a cycle uses them, made from its latest report (`pool_jobs.executor_nodes`).
        self.executor_nodes: dict[str, ExecutorNodes] = {}
        self.executors: dict[str, ExecutorState] = {}
        # Each executor's settings as an administrator last set them (its cordon), whether it reports or not.
        self.settings: dict[str, ExecutorSettings] = {}
        # Per executor the time of its latest report, full or heartbeat: its liveness. The
        # state's own time is when its runs were listed.
        self.heard: dict[str, int] = {}
        self.limiters = LimiterState()
        # Cycles run so far, and per executor the cycle that closed (or will close) the window
        # of its last report.
        self.cycles = 0
        self.reported_in_cycle: dict[str, int] = {}
        # Orphan runs already told to stop; in memory only, so a take-over may ask once more.
        self.orphans_cancelled: set[str] = set()
        # Per executor, the runs its latest state lists as active that the control plane no longer held
        # when that state was folded (`unheld`): the only runs it can be an orphan of. A run that ends
        # after the state was listed stays in it until the next one (its runs go to the scheduler every
        # few seconds: `streams.agents.executor_reports`), and is no orphan for that.
        self.unheld_runs: dict[str, tuple[str, ...]] = {}
        # The runs some executor lists as active, made when asked after an executor's report changed them.
        self._active_runs: set[str] | None = None
        # The feed offset of the last record folded in, stored with the rest in the same batch: a
        # worker that rebuilds the index skips what it already holds, so no record is folded twice
        # and no cycle runs twice over an index that has moved on. And the offset of the last tick
        # whose cycle's outcome was published, stored as soon as it was, so that a worker taking
        # over publishes again only what may not have been.
        self.offset = -1
        self.published = -1
        # Acceptances folded in this batch whose entries have not been written since (job id -> entry),
        # the acceptance records written (feed offset -> the jobs whose stored entry lacks it), and
        # records left with none to be deleted at the end of the batch.
        self._accepting: dict[str, Entry] = {}
        self.acceptances: dict[int, set[str]] = {}
        self._emptied: list[int] = []

    # -- the feed ---------------------------------------------------------------------------
    def apply(self, record: JobDelta | ExecutorState | Heartbeat | JobSetAction | ExecutorSettings | Changes) -> list[str]:
        """Fold one feed record; returns the table keys it changed."""
        if isinstance(record, JobDelta):
            return self._apply_job(record)
        if isinstance(record, Changes):
            # Its job deltas folded here, not each through `apply` again: hundreds a record, a call each showed.
            apply_job = self._apply_job
            return [key for change in record.records for key in (apply_job(change) if type(change) is JobDelta else self.apply(change))]
        if isinstance(record, ExecutorState):
            self.executors[record.executor] = record
            self.unheld_runs[record.executor] = self.unheld(record)
            self._active_runs = None
            self._heard(record.executor, record.time)
            return [executor_key(record.executor)]
        if isinstance(record, Heartbeat):
            if record.executor not in self.executors:  # its nodes are not known yet: nothing to keep alive
                return []
            self._heard(record.executor, record.time)
            return [heartbeat_key(record.executor)]
        if isinstance(record, ExecutorSettings):
            self.settings[record.executor] = record
            return [settings_key(record.executor)]
        return self._apply_job_set(record)

    def cordoned(self, executor: str) -> bool:
        settings = self.settings.get(executor)
        return settings is not None and settings.cordoned

    def _heard(self, executor: str, time: int) -> None:
        self.heard[executor] = max(self.heard.get(executor, time), time)
        self.reported_in_cycle[executor] = self.cycles + 1

    def touch(self, job_id: str) -> None:
        """Note that the job's entry changed (or went): it is busy or not (see `Entry.busy`)."""
        entry = self.jobs.get(job_id)
        if entry is not None and entry.busy:
            self.busy.add(job_id)
        else:
            self.busy.discard(job_id)
        if self.pool_jobs:
            self._changed.add(job_id)
        if self.executor_runs is not None:
            self.runs_changed.add(job_id)
        self._unquiet_job(job_id)

    def _unquiet_job(self, job_id: str) -> None:
        """The job is walked by the next lifecycle again, if it was found quiet."""
        held = self._quiet_at.pop(job_id, None)
        if held is not None:
            del self.quiet[held[0]][held[1]]

    def walk(self, live: Mapping[str, ExecutorState]) -> list[str]:
        """The busy jobs a cycle's lifecycle walks, in id order: those not quiet, once the quiet ones are
        brought up to the ``live`` executors' latest reports (every job of an executor not live is walked)."""
        for name in list(self.quiet):
            report = live.get(name)
            if report is None or self.quiet_reports.get(name) is not report:
                self.unquiet(name, report)
        return sorted(self.busy.difference(self._quiet_at))

    def rest(self, job_id: str, executor: ExecutorState, run_id: str) -> None:
        """The lifecycle found nothing to do for the job, whose run ``executor``'s latest report lists or not."""
        if self.quiet_reports.get(executor.executor) is not executor:
            self.unquiet(executor.executor, executor)
        self.quiet.setdefault(executor.executor, {})[run_id] = job_id
        self._quiet_at[job_id] = (executor.executor, run_id)

    def unquiet(self, name: str, executor: ExecutorState | None) -> None:
        """Bring the quiet jobs of executor ``name`` up to its report ``executor`` (None: it is not live):
        those whose run the report lists stay quiet (a run is taken back only once its executor stops
        listing it), the others are walked by the next lifecycle again."""
        if executor is None:
            self.quiet_reports.pop(name, None)
        else:
            self.quiet_reports[name] = executor
        quiet = self.quiet.get(name)
        if not quiet:
            return
        gone = list(quiet) if executor is None else quiet.keys() - executor.runs.keys()
        for run_id in gone:
            del self._quiet_at[quiet.pop(run_id)]

    def unheld(self, state: ExecutorState) -> tuple[str, ...]:
        """The runs ``state`` lists as active that no job holds as its active run, or whose job a cycle ended."""
        jobs, runs = self.jobs, state.runs
        # A quiet job's run is its active run, which no cycle ended (`rest`): held, and most are quiet.
        quiet = self.quiet.get(state.executor, {})
        unheld = []
        for run_id in state.active:
            job_id = runs.get(run_id, "")
            if quiet.get(run_id) == job_id:
                continue
            entry = jobs.get(job_id)
            if entry is None or entry.expect == END or not entry.has_run:
                unheld.append(run_id)
                continue
            d = entry.delta
            if d.run_id != run_id or not d.run_active:
                unheld.append(run_id)
        return tuple(unheld)

    def active_runs(self) -> set[str]:
        """Every run some executor lists as active (most cycles ask with no report between them)."""
        if self._active_runs is None:
            self._active_runs = {run_id for state in self.executors.values() for run_id in state.active}
        return self._active_runs

    def take_changed(self) -> set[str]:
        """The jobs whose entries changed since the last call (`touch`)."""
        changed, self._changed = self._changed, set()
        return changed

    def keep_pools(self, pools: Iterable[str]) -> None:
        """Forget the kept jobs of other pools: no cycle gathers them, and their pending changes would only grow."""
        self.pool_jobs = {pool: kept for pool, kept in self.pool_jobs.items() if pool in pools}
        if not self.pool_jobs:
            self._changed = set()

    def _apply_job(self, delta: JobDelta) -> list[str]:
        """Fold the delta and note what changed (`touch`): a delta that changed nothing, or only the run the
        fold accepted (the confirmation of a lease, one per job), is not noted as a change of the entry."""
        job_id = delta.job_id
        if delta.terminal:
            ended = self.jobs.pop(job_id, None)
            if ended is None:
                return []
            self._release(job_id, ended)  # the key is deleted in this batch
            self.touch(job_id)
            return [job_key(job_id)]
        entry = self.jobs.get(job_id)
        if entry is None:
            entry = self.jobs[job_id] = Entry(delta)
            self._fold_run(entry)
            self.touch(job_id)
            return [job_key(job_id)]
        folded = self._fold_job(entry, delta)
        if folded == _CHANGED:
            self.touch(job_id)
            return [job_key(job_id)]
        if folded == _ACCEPTED:
            # Only the accepted run changed, which no pool's jobs and no entry's busyness read: the lifecycle's
            # `lost` does, so the job is walked again if it was found quiet.
            self._unquiet_job(job_id)
        return []

    def _fold_job(self, entry: Entry, delta: JobDelta) -> int:
        """Fold a delta of a job the index holds: whether the entry changed (`_CHANGED`: its key is written),
        only its accepted run did (`_ACCEPTED`), or nothing did (`_UNCHANGED`)."""
        # The decision fields read off `_decisions` (None: nothing decided), not one descriptor call each: once per delta.
        decisions = entry._decisions
        announced = decisions is not None and decisions.announce_priority is not None and self._announced(entry, delta)
        held = entry.delta
        # Requests are sticky, and a job-set cancel is known here only (the fold does not mark
        # the jobs), so neither a newer nor an older delta takes one away.
        flags = (held.cancel_requested or delta.cancel_requested, held.preempt_requested or delta.preempt_requested)
        if decisions is None or decisions.expect is None or entry.confirmed_by(delta):
            # Mostly the delta says the requests already: it is kept as it is then, not copied.
            same = flags == (delta.cancel_requested, delta.preempt_requested)
            merged = delta if same else updated(delta, cancel_requested=flags[0], preempt_requested=flags[1])
            # The fold may confirm just what the decision recorded: then the expectation stays,
            # and only goes on skipping deltas older than it.
            if merged != held:
                entry.set(merged)
                entry.expect = None
                self._fold_run(entry)
                return _CHANGED
            if self._fold_run(entry):
                # The confirmation of a decision: recorded with the batch's acceptances, not by writing the entry again.
                self._release(delta.job_id, entry)
                self._accepting[delta.job_id] = entry
                return _CHANGED if announced else _ACCEPTED
            return _CHANGED if announced else _UNCHANGED
        else:
            # Older than our decision: only the requests are taken from it.
            if flags == (held.cancel_requested, held.preempt_requested):
                return _CHANGED if announced else _UNCHANGED
            entry.set(updated(held, cancel_requested=flags[0], preempt_requested=flags[1]))
        return _CHANGED

    @staticmethod
    def _announced(entry: Entry, delta: JobDelta) -> bool:
        """Whether ``delta`` is the fold of the entry's announcement (`Entry.announce_from`), which is then made."""
        if entry.announce_priority is None or delta.priority != entry.announce_priority or entry.announce_from in (None, delta.priority):
            return False
        entry.announce_priority = entry.announce_from = None
        return True

    def _fold_run(self, entry: Entry) -> bool:
        """Note the entry's active run as accepted by the fold, if it is new; whether it was."""
        view = entry._view
        if type(view) is tuple:  # never ran
            return False
        d: JobDelta = view  # type: ignore[assignment]
        if not d.run_active or d.run_id is None or entry.fold_run == d.run_id:
            return False
        entry.fold_run = d.run_id
        entry.fold_run_at = self.heard.get(d.executor or "", d.leased_at or 0)
        return True

    def _apply_job_set(self, action: JobSetAction) -> list[str]:
        changed = []
        for job_id, entry in self.jobs.items():
            if entry.value("queue") != action.queue or entry.value("job_set_id") != action.job_set_id:
                continue
            if action.action == "cancel" and not entry.value("cancel_requested"):
                entry.set(updated(entry.delta, cancel_requested=True))
                entry.cancel_reason = action.reason or None
            elif action.action == "reprioritise" and action.new_priority is not None:
                if entry.announce_priority is None:
                    entry.announce_from = entry.delta.priority
                entry.set(updated(entry.delta, priority=action.new_priority))
                entry.announce_priority = action.new_priority
            else:
                continue
            self.touch(job_id)
            changed.append(job_key(job_id))
        return changed

    # -- decisions --------------------------------------------------------------------------
    def decide(self, job_id: str, expect: str, delta: JobDelta, same_job: bool = False) -> str:
        """Record a decision about a job ahead of its confirmation (``same_job``: see `Entry.set`); returns the changed key."""
        entry = self.jobs[job_id]
        entry.set(delta, same_job)
        # Set on its `_Decisions` at once (a decision always expects something), not through two descriptor calls.
        decisions = entry._decisions
        if decisions is None:
            decisions = entry._decisions = _Decisions()
        decisions.expect, decisions.expect_runs = expect, delta.runs
        self.touch(job_id)
        return job_key(job_id)

    def start_cycle(self) -> str:
        self.cycles += 1
        return CYCLES_KEY

    def cycles_without_report(self, executor: str) -> int:
        return max(0, self.cycles - self.reported_in_cycle.get(executor, 0))

    def set_limiters(self, limiters: LimiterState) -> list[str]:
        if limiters == self.limiters:
            return []
        self.limiters = limiters
        return [LIMITERS_KEY]

    # -- the table ----------------------------------------------------------------------------
    def writes(self, keys: Iterable[str]) -> list[tuple[str, bytes | None]]:
        """What to write to the table for ``keys``, each once (None: delete the key). The caller
        writes them all, in this batch: a job entry written carries its acceptance itself from then on."""
        rows = []
        for key in dict.fromkeys(keys):
            rows.append((key, self.dump(key)))
            if key.startswith(JOB_KEY_PREFIX):
                job_id = key[len(JOB_KEY_PREFIX) :]
                entry = self.jobs.get(job_id)
                if entry is not None:
                    self._release(job_id, entry)
        return rows

    def close_batch(self) -> list[str]:
        """The acceptance keys to write at the end of a batch (before its offset): the record of
        the acceptances it folded, named by its last offset, and the records nothing relies on now."""
        keys = [acceptance_key(at) for at in self._emptied]
        self._emptied = []
        if self._accepting:
            at = self.offset
            self.acceptances[at] = set(self._accepting)
            for entry in self._accepting.values():
                entry.accepted_in = at
            self._accepting = {}
            keys.append(acceptance_key(at))
        return keys

    def _release(self, job_id: str, entry: Entry) -> None:
        """The job's stored entry will carry its acceptance (or be gone): no record needs to hold it."""
        self._accepting.pop(job_id, None)
        at = entry.accepted_in
        if at is None:
            return
        entry.accepted_in = None
        relying = self.acceptances[at]
        relying.discard(job_id)
        if not relying:
            del self.acceptances[at]
            self._emptied.append(at)

    def dump(self, key: str) -> bytes | None:
        """The table value for ``key``, or None when the key is to be deleted."""
        kind, _, name = key.partition(":")
        if kind == "j":
            entry = self.jobs.get(name)
            if entry is None:
                return None
            view = entry._view
            if entry._decisions is None and type(view) is tuple:  # queued, never ran, nothing decided: the commonest
                return f"[{feed.part_row_text(entry.job_id, entry._submitted, view)}{_UNDECIDED}".encode()  # type: ignore[arg-type]
            return feed.compact_json([feed.delta_row(entry.delta), *_stored_of(entry)]).encode()
        if kind == "a":
            relying = self.acceptances.get(int(name))
            if not relying:
                return None
            accepted = [(job_id, self.jobs[job_id]) for job_id in sorted(relying)]
            return feed.compact_json([[job_id, entry.fold_run, entry.fold_run_at] for job_id, entry in accepted]).encode()
        if kind == "e":
            state = self.executors.get(name)
            if state is None:
                return None
            return feed.compact_json(
                {"s": feed.to_json(state), "c": self.reported_in_cycle.get(name, 0), "o": self.unheld_runs[name]}
            ).encode()
        if kind == "s":
            settings = self.settings.get(name)
            return None if settings is None else feed.compact_json(feed.to_json(settings)).encode()
        if kind == "h":
            if name not in self.executors:
                return None
            return json.dumps({"t": self.heard[name], "c": self.reported_in_cycle.get(name, 0)}).encode()
        if key == LIMITERS_KEY:
            return json.dumps(limiters_to_json(self.limiters)).encode()
        if key == CYCLES_KEY:
            return str(self.cycles).encode()
        if key == OFFSET_KEY:
            return str(self.offset).encode()
        if key == PUBLISHED_KEY:
            return str(self.published).encode()
        raise KeyError(key)

    def load(self, items: Iterable[tuple[str, bytes]]) -> None:
        """Rebuild from the table's contents."""
        self.__init__()  # type: ignore[misc]
        heartbeats = []
        accepted = []
        for key, value in items:
            kind, _, name = key.partition(":")
            if kind == "j":
                body = json.loads(value)
                if isinstance(body, list):
                    row, *rest = body
                    entry = Entry(feed.delta_from_row(row), *rest)
                    self.jobs[entry.job_id] = entry  # keyed by the entry's own id, not a second string of it (the key's)
                    continue
                # An entry written before rows, as a dict of fields.
                delta = feed.from_json(body["d"])
                assert isinstance(delta, JobDelta)
                self.jobs[name] = Entry(delta, body["x"], body["n"], body["p"], body["c"], body["r"], body["a"])
            elif kind == "e":
                body = json.loads(value)
                state = feed.from_json(body["s"])
                assert isinstance(state, ExecutorState)
                self.executors[name] = state
                # A row written before the unheld runs were kept: every active run may be an orphan, as then.
                self.unheld_runs[name] = tuple(body["o"]) if "o" in body else state.active
                self.heard[name] = state.time
                self.reported_in_cycle[name] = body["c"]
            elif kind == "s":
                settings = feed.from_json(json.loads(value))
                assert isinstance(settings, ExecutorSettings)
                self.settings[name] = settings
            elif kind == "h":
                heartbeats.append((name, json.loads(value)))
            elif kind == "a":
                accepted.append((int(name), json.loads(value)))
            elif key == LIMITERS_KEY:
                self.limiters = limiters_from_json(json.loads(value))
            elif key == CYCLES_KEY:
                self.cycles = int(value)
            elif key == OFFSET_KEY:
                self.offset = int(value)
            elif key == PUBLISHED_KEY:
                self.published = int(value)
        for at, rows in accepted:
            self._accept(at, rows)
        self.busy = {job_id for job_id, entry in self.jobs.items() if entry.busy}
        # The state and the heartbeat keys each hold what the latest record of their kind said.
        for name, body in heartbeats:
            if name in self.executors:
                self.heard[name] = max(self.heard[name], body["t"])
                self.reported_in_cycle[name] = max(self.reported_in_cycle[name], body["c"])

    def _accept(self, at: int, rows: list[list[Any]]) -> None:
        """The take-over rule: the acceptance record at feed offset ``at`` applies to each entry whose run
        it accepted and whose stored row does not say so (a row written after the acceptance does)."""
        relying = set()
        for job_id, run_id, run_at in rows:
            entry = self.jobs.get(job_id)
            if entry is not None and entry.value("run_id") == run_id and entry.fold_run != run_id:
                entry.fold_run, entry.fold_run_at, entry.accepted_in = run_id, run_at, at
                relying.add(job_id)
        if relying:
            self.acceptances[at] = relying
        else:
            self._emptied.append(at)

    def keys(self) -> Iterator[str]:
        yield from (job_key(job_id) for job_id in self.jobs)
        yield from (acceptance_key(at) for at in self.acceptances)
        yield from (executor_key(name) for name in self.executors)
        yield from (heartbeat_key(name) for name in self.executors)
        yield from (settings_key(name) for name in self.settings)
        yield LIMITERS_KEY
        yield CYCLES_KEY
        yield OFFSET_KEY
        yield PUBLISHED_KEY


def job_key(job_id: str) -> str:
    return JOB_KEY_PREFIX + job_id


def acceptance_key(offset: int) -> str:
    return f"{ACCEPTED_PREFIX}{offset}"


def executor_key(executor: str) -> str:
    return f"e:{executor}"


def heartbeat_key(executor: str) -> str:
    return f"h:{executor}"


def settings_key(executor: str) -> str:
    return f"s:{executor}"
