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
from collections.abc import Collection, Mapping

from streams.scheduler.feed import ExecutorState
from streams.scheduler.index import SchedulerIndex


def unacknowledged(index: SchedulerIndex, executors: Collection[str]) -> Counter[str]:
    """Per executor of ``executors``, the runs the index holds active on it (leased, pending or running,
    and not ended by a cycle) that the executor's latest state does not list. Only busy entries can
    hold an active run (`Entry.busy`), so this walks those, not every queued job."""
    counts: Counter[str] = Counter()
    states, jobs = index.executors, index.jobs
    for job_id in index.busy:
        entry = jobs.get(job_id)
        if entry is None or not entry.has_run:
            continue
        delta = entry.delta
        executor = delta.executor
        if executor is not None and executor in executors and delta.run_active and delta.run_id not in states[executor].runs:
            counts[executor] += 1
    return counts


def held_back(index: SchedulerIndex, live: Mapping[str, ExecutorState], max_unacknowledged: int) -> dict[str, str]:
    """The executors of ``live`` a cycle places no new job on, each with why (cordoned or lagging)."""
    reasons = {}
    for name in live:
        settings = index.settings.get(name)
        if settings is not None and settings.cordoned:
            reasons[name] = f"cordoned by {settings.user or 'an administrator'}: {settings.reason}"
    # No executor can hold more unacknowledged runs than the index has busy jobs: then nothing is counted.
    if len(index.busy) > max_unacknowledged:
        for name, count in sorted(unacknowledged(index, live.keys() - reasons.keys()).items()):
            if count > max_unacknowledged:
                reasons[name] = f"{count} leased runs not acknowledged, more than {max_unacknowledged}"
    return reasons
