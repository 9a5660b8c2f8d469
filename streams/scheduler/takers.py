"""Which live executors a cycle places new jobs on: Armada's filterLaggingExecutors and
filterCordonedExecutors (scheduling_algo.go), beside the stale executors the cycle leaves out itself.

An executor left out keeps its runs: they go on, and a cycle still answers their requests and
takes back what the executor returns. Only new placements skip its nodes, for that cycle:
- cordoned: an administrator cordoned it (`streams.domain.executor_settings`), until uncordoned;
- lagging: it holds more leased runs it has not acknowledged (listed in its latest state, the way
  Armada counts a run the executor has not echoed since it was scheduled) than
  ``scheduling.maxUnacknowledgedJobsPerExecutor``, so more jobs would only pile up unstarted.
Both are read off the index, which the feed alone makes, so a replay of the feed leaves out the
same executors at every cycle.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field

from streams.scheduler.feed import ExecutorState
from streams.scheduler.index import END, Entry, SchedulerIndex


@dataclass
class ExecutorRuns:
    """Each executor's active runs as the index holds them (leased, pending or running, and not ended by a
    cycle) and how many of them its state (``counted``: the state they were counted against, and that count)
    does not list. Kept from cycle to cycle and changed by the jobs whose entries changed
    (`SchedulerIndex.touch`), and counted afresh for an executor only when its state is a new one: walking
    every busy entry at each cycle cost ~3 us a job (0.3 s a cycle at 100,000 running jobs), and comparing
    every run with its executor's state at each cycle ~0.3 us (30 ms)."""

    by_executor: dict[str, set[str]] = field(default_factory=dict)
    of_job: dict[str, tuple[str, str]] = field(default_factory=dict)
    counted: dict[str, tuple[ExecutorState, int]] = field(default_factory=dict)

    def refresh(self, jobs: Mapping[str, Entry], job_ids: Iterable[str]) -> None:
        for job_id in job_ids:
            held = self.of_job.pop(job_id, None)
            if held is not None:
                self.by_executor[held[0]].discard(held[1])
                self._count(held[0], held[1], -1)
            entry = jobs.get(job_id)
            if entry is None or not entry.has_run or entry.expect == END:
                continue
            delta = entry.delta
            if delta.run_active and delta.executor is not None and delta.run_id is not None:
                self.of_job[job_id] = (delta.executor, delta.run_id)
                self.by_executor.setdefault(delta.executor, set()).add(delta.run_id)
                self._count(delta.executor, delta.run_id, 1)

    def _count(self, executor: str, run_id: str, change: int) -> None:
        counted = self.counted.get(executor)
        if counted is not None and run_id not in counted[0].runs:
            self.counted[executor] = (counted[0], counted[1] + change)

    def unacknowledged(self, state: ExecutorState) -> int:
        """How many of the executor's active runs ``state`` (its latest) does not list."""
        counted = self.counted.get(state.executor)
        if counted is None or counted[0] is not state:
            counted = self.counted[state.executor] = (state, len(self.by_executor.get(state.executor, set()).difference(state.runs)))
        return counted[1]


def executor_runs(index: SchedulerIndex) -> ExecutorRuns:
    """The index's `ExecutorRuns`, brought up to date (made afresh from the busy entries, the only ones
    that can hold an active run, when no cycle kept them)."""
    kept = index.executor_runs
    if kept is None:
        kept = index.executor_runs = ExecutorRuns()
        kept.refresh(index.jobs, index.busy)
    else:
        kept.refresh(index.jobs, index.runs_changed)
    index.runs_changed = set()
    return kept


def unacknowledged(index: SchedulerIndex, executors: Collection[str]) -> Counter[str]:
    """Per executor of ``executors``, the active runs its latest state does not list."""
    kept = executor_runs(index)
    return +Counter({name: kept.unacknowledged(index.executors[name]) for name in executors})


def held_back(index: SchedulerIndex, live: Mapping[str, ExecutorState], max_unacknowledged: int) -> dict[str, str]:
    """The executors of ``live`` a cycle places no new job on, each with why (cordoned or lagging)."""
    reasons = {}
    for name in live:
        settings = index.settings.get(name)
        if settings is not None and settings.cordoned:
            reasons[name] = f"cordoned by {settings.user or 'an administrator'}: {settings.reason}"
    if len(index.busy) <= max_unacknowledged:
        # No executor can hold more unacknowledged runs than the index has busy jobs: nothing to count,
        # and nothing kept to bring up to date meanwhile (made afresh when it is needed again).
        index.executor_runs, index.runs_changed = None, set()
        return reasons
    for name, count in sorted(unacknowledged(index, live.keys() - reasons.keys()).items()):
        if count > max_unacknowledged:
            reasons[name] = f"{count} leased runs not acknowledged, more than {max_unacknowledged}"
    return reasons
