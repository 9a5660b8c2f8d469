"""What the scheduling agent needs to know beyond the algorithm's own configuration."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from streams.scheduler.algorithm.model import CycleInput, CycleResult, PriorityClass, SchedulingConfig


def default_priority_classes() -> dict[str, PriorityClass]:
    """Armada's defaults: the same priority, one class that may be preempted and one that may not.

    They must match the classes submission accepts (`streams.domain.validation.SubmitPolicy`).
    """
    return {
        "armada-default": PriorityClass("armada-default", priority=1000, preemptible=False),
        "armada-preemptible": PriorityClass("armada-preemptible", priority=1000, preemptible=True),
    }


@dataclass(frozen=True)
class CycleConfig:
    scheduling: SchedulingConfig = field(default_factory=lambda: SchedulingConfig(priority_classes=default_priority_classes()))
    # Pools with settings of their own; a pool not named here is scheduled with `scheduling`.
    pools: Mapping[str, SchedulingConfig] = field(default_factory=dict)
    # An executor whose last report is older than this has its leases expired...
    executor_timeout_ms: int = 10_000
    # ...once this many cycles also passed without a report from it. Time alone would expire
    # every lease after one long cycle, which holds back the reports queued behind it.
    missed_cycles: int = 3
    # An executor silent this long (and as many cycles) is stale: its leases stand, but no new
    # job is placed on its nodes (Armada's scheduling.executorTimeout).
    stale_executor_ms: int = 10_000
    # An executor holding more leased runs than this that its latest state does not list gets no new
    # job that cycle (Armada's scheduling.maxUnacknowledgedJobsPerExecutor, `streams.scheduler.takers`).
    max_unacknowledged_runs: int = 2500
    # A run an executor should hold but has not reported for this long after the fold accepted
    # its lease (and sent the command) is treated as returned. Much longer than the timeout:
    # under load the command and the executor's reports wait behind other work.
    missing_run_grace_ms: int = 60_000
    # A run is an orphan only if an executor's state that lists it as active was folded after the
    # control plane let the run go (`SchedulerIndex.unheld_runs`). Without it, also while the state
    # that listed it before is the latest: a run that ended got a needless cancel_run most times, as
    # an executor's runs reach the scheduler every few seconds. Off for logs of the releases before.
    orphans_in_later_reports: bool = True
    # Runs of a job that may be returned or expire before the job fails.
    max_attempts: int = 3
    # Unschedulable jobs named in a cycle record, so that a million queued jobs stay one message.
    max_unschedulable_recorded: int = 200
    # Told each pool's inputs and result as a cycle decides them (pool, inputs, result), for the
    # metrics and the UI of the worker that schedules; it must not change them.
    observe: Callable[[str, CycleInput, CycleResult], None] | None = field(default=None, compare=False, repr=False)
    # The hash of the configuration file this was read from, recorded with every cycle.
    config_hash: str = ""

    def for_pool(self, pool: str) -> SchedulingConfig:
        return self.pools.get(pool, self.scheduling)
