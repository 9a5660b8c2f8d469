"""What the scheduling worker shows of the cluster: the last cycle's shares and reasons per pool, and its executors.

`ClusterView.observe` is the cycle's observer (`CycleConfig.observe`): it keeps each pool's last
inputs and result as they are, and everything shown is derived from them when asked (a scrape,
a page), never per cycle. Executors are read from the scheduler's index at the same moment.
Only the worker that owns the scheduler feed has either; the others show none.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from streams.domain.states import ACTIVE
from streams.scheduler.algorithm.model import CycleInput, CycleResult
from streams.scheduler.algorithm.reasons import reason_kind
from streams.scheduler.index import SchedulerIndex


@dataclass
class PoolCycle:
    inputs: CycleInput
    result: CycleResult
    _queues: list[dict[str, Any]] | None = field(default=None, repr=False)

    def why(self, job_id: str) -> str | None:
        """Why the cycle left the job queued, or preempted it. A search, not a dict of every job: a cycle
        leaves ~100,000 jobs queued and a new cycle comes every second, so a dict would be built for
        nearly every question (~100 ms each), while the search compares ids in C (~1 ms)."""
        for preempted in self.result.preempted:
            if preempted.job_id == job_id:
                return f"preempted: {preempted.reason}"
        for group in self.result.unscheduled:
            if job_id in group.job_ids:
                return group.reason
        return None

    def queues(self) -> list[dict[str, Any]]:
        """Per queue of the pool: weight, shares, allocation and its jobs in the cycle (counted once per
        cycle: the queues page asks every 2 s per viewer, and counting 100,000 queued jobs takes ~20 ms)."""
        if self._queues is None:
            self._queues = self._count_queues()
        return self._queues

    def _count_queues(self) -> list[dict[str, Any]]:
        queued = Counter(job.queue for job in self.inputs.queued)
        running = Counter(run.job.queue for run in self.inputs.running)
        weights = {queue.name: queue.weight for queue in self.inputs.queues}
        return [
            {
                "queue": share.queue,
                "weight": weights.get(share.queue, 0.0),
                "fair_share": share.fair_share,
                "adjusted_fair_share": share.adjusted_fair_share,
                "actual_share": share.actual_share,
                "allocation": dict(share.allocation),
                "queued": queued.get(share.queue, 0),
                "running": running.get(share.queue, 0),
            }
            for share in self.result.shares
        ]

    def unschedulable(self) -> dict[str, int]:
        """Jobs left queued, by kind of reason."""
        counts: Counter[str] = Counter()
        for group in self.result.unscheduled:
            counts[reason_kind(group.reason)] += len(group.job_ids)
        return dict(sorted(counts.items()))

    def capacity(self) -> dict[str, int]:
        """What the cycle's shares were fractions of (empty unschedulable nodes left out)."""
        return dict(self.result.capacity)


@dataclass
class ClusterView:
    # The scheduler's index on this worker, when it owns the feed (read-only here).
    index: Callable[[], SchedulerIndex | None] = lambda: None
    pools: dict[str, PoolCycle] = field(default_factory=dict)

    def observe(self, pool: str, inputs: CycleInput, result: CycleResult) -> None:
        # Called on the cycle's thread while the API reads `pools` on the event loop: a new dict, swapped in whole.
        self.pools = {**self.pools, pool: PoolCycle(inputs, result)}

    @property
    def scheduling(self) -> bool:
        return self.index() is not None

    def why(self, job_id: str) -> str | None:
        for cycle in self.pools.values():
            reason = cycle.why(job_id)
            if reason is not None:
                return reason
        return None

    def executors(self, now_ms: int) -> list[dict[str, Any]]:
        """Per executor: pool, nodes, capacity and allocation per resource, active runs, those its latest
        state does not list yet (unacknowledged, as `streams.scheduler.takers` counts them), report age, cordon.

        Runs are counted as the scheduler holds them: active from their lease until they end or a
        cycle ends them (a run's pending and running reports reach the scheduler only when they matter
        to it, so the executor's own metrics count runs by state). Only the index's busy jobs can hold
        an active run (`Entry.busy`): every scrape of /metrics asks, and walking every queued job made a
        scrape's cost grow with the queue (at 300,000 queued jobs and a scrape every 50 ms, nearly half
        of the worker's samples, taking the GIL from the cycle's thread)."""
        index = self.index()
        if index is None:
            return []
        allocated: dict[str, Counter[str]] = {name: Counter() for name in index.executors}
        runs: Counter[str] = Counter()
        unacknowledged: Counter[str] = Counter()
        jobs, states = index.jobs, index.executors
        for job_id in list(index.busy):
            entry = jobs.get(job_id)
            if entry is None or not entry.has_run:
                continue
            delta = entry.delta
            if delta.executor in allocated and delta.run_state in ACTIVE:
                allocated[delta.executor].update(delta.requests)
                runs[delta.executor] += 1
                if delta.run_id not in states[delta.executor].runs:
                    unacknowledged[delta.executor] += 1
        report = []
        for name, state in sorted(states.items()):
            cordoned, settings = index.cordoned(name), index.settings.get(name)
            capacity: Counter[str] = Counter()
            for node in state.nodes:
                capacity.update(node.resources)
            report.append(
                {
                    "executor": name,
                    "pool": state.pool,
                    "nodes": len(state.nodes),
                    "schedulable_nodes": sum(1 for node in state.nodes if not node.unschedulable),
                    "capacity": dict(capacity),
                    "allocated": dict(allocated[name]),
                    "active_runs": runs[name],
                    "unacknowledged_runs": unacknowledged[name],
                    "report_age_s": max(0.0, (now_ms - index.heard.get(name, state.time)) / 1000.0),
                    "cordoned": cordoned,
                    "cordon_reason": settings.reason if cordoned and settings is not None else "",
                    "cordoned_by": settings.user if cordoned and settings is not None else "",
                }
            )
        return report
