"""One scheduling cycle around the algorithm: the lease lifecycle, placement, and what to publish.

At a tick the cycle, in this order and always walking jobs in id order so that a replay of the
feed decides the same:
1. answers cancel and preempt requests and announces job-set reprioritisations;
2. expires the leases of executors that stopped reporting, and takes back runs an executor
   returned or no longer holds: the job is requeued (avoiding a node that returned it) until
   `max_attempts` runs came back, then it fails; a fail-fast job (every gang member) fails at once;
3. tells executors to stop runs the control plane no longer wants (orphans);
4. runs `streams.scheduler.algorithm.schedule` once per pool of live executors that are not stale,
   cordoned or lagging (`streams.scheduler.takers`), with that pool's settings, and turns its leases
   and preemptions into events. The jobs running on the pool's live executors that get no new job
   count in their queues' allocation and demand, as Armada counts them, but the cycle evicts none of
   them (`CycleInput.stranded`).
Ids of events, commands and the cycle come from a generator seeded with the tick's offset on the
feed, so the same cycle over the same index produces the same events, which the fold then
de-duplicates. A new run's id is its job's id and attempt number (``streams.domain.ids.run_id_for``),
never a draw: a cycle run again after a restart, at another offset or over an index that has
moved on, may lease other jobs, and a draw would then hand one run id to two jobs.
"""

from __future__ import annotations

import random
from collections import Counter, defaultdict
from dataclasses import dataclass, field, replace
from typing import Any

from streams.domain import events
from streams.domain.gangs import FAIL_FAST
from streams.domain.ids import new_id, run_id_for
from streams.scheduler.algorithm.model import CycleInput, CycleResult
from streams.scheduler.algorithm.preempting import schedule
from streams.scheduler.commands import command
from streams.scheduler.config import CycleConfig
from streams.scheduler.convert import scheduling_queue
from streams.scheduler.feed import ExecutorState, JobDelta, Tick, node_id, updated
from streams.scheduler.index import END, LEASE, REQUEUE, Entry, SchedulerIndex, job_key
from streams.scheduler.pool_jobs import Gathered, PoolContext, executor_nodes, gather
from streams.scheduler.takers import held_back

SCHEDULER_USER = "scheduler"
CYCLES_QUEUE, CYCLES_JOB_SET = "_scheduler", "cycles"
# Decisions per SchedulingCycle record: about 100 bytes each, so a record stays far below the
# broker's 1 MB message limit however many jobs a cycle decides.
MAX_DECISIONS_PER_RECORD = 2000


@dataclass
class CycleOutcome:
    cycle_id: str
    seed: int
    sequences: list[dict[str, Any]] = field(default_factory=list)  # event_sequence records
    commands: list[dict[str, Any]] = field(default_factory=list)  # executor_command records
    # SchedulingCycle sequences, the decisions split across them in order; none when nothing was decided.
    records: list[dict[str, Any]] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)  # index table keys
    leased: int = 0
    preempted: int = 0
    requeued: int = 0
    ended: int = 0
    # Some queued job was left waiting (no room, a limit, a constraint): the cluster is not idle.
    left_waiting: bool = False


class Cycle:
    def __init__(self, index: SchedulerIndex, tick: Tick, offset: int, config: CycleConfig) -> None:
        self.index, self.tick, self.config = index, tick, config
        self.now = tick.time
        self.rng = random.Random(offset)
        self.outcome = CycleOutcome(cycle_id=new_id(self.now, self.rng), seed=offset)
        self.emitted: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
        self.decisions: list[dict[str, Any]] = []
        # Per pool scheduled: capacity and each queue's shares, for the cycle record (what explain reads).
        self.pools: list[dict[str, Any]] = []
        self.unschedulable_omitted = 0
        # Jobs this cycle ended: the fold sends the command that stops their runs.
        self.ended: set[str] = set()
        self.outcome.changed.append(index.start_cycle())
        self.live = {name: state for name, state in sorted(index.executors.items()) if self.heard_within(name, config.executor_timeout_ms)}
        # Stale, cordoned and lagging executors keep their leases, but get no new job.
        held = held_back(index, self.live, config.max_unacknowledged_runs)
        self.schedulable = [
            state for name, state in self.live.items() if self.heard_within(name, config.stale_executor_ms) and name not in held
        ]
        # The live executors that get no new job: their jobs still count in their pool (`place`).
        usable = {state.executor for state in self.schedulable}
        self.unusable = [state for name, state in self.live.items() if name not in usable]

    def heard_within(self, executor: str, timeout_ms: int) -> bool:
        """Heard from within ``timeout_ms``, or within the last few cycles: time alone would
        condemn every executor after one long cycle, which holds back the reports behind it."""
        index = self.index
        return self.now - index.heard[executor] <= timeout_ms or index.cycles_without_report(executor) <= self.config.missed_cycles

    # -- output -----------------------------------------------------------------------------
    def emit(self, delta: JobDelta, kind: str, payload: dict[str, Any]) -> None:
        self.emitted[(delta.queue, delta.job_set_id)].append(
            events.event(new_id(self.now, self.rng), self.now, delta.job_id, events.payload(kind, payload))
        )

    def decide(self, entry: Entry, expect: str, delta: JobDelta) -> None:
        if expect == END:
            self.ended.add(entry.job_id)
        self.outcome.changed.append(self.index.decide(entry.job_id, expect, delta))

    def end(self, entry: Entry, kind: str, payload: dict[str, Any]) -> None:
        self.emit(entry.delta, kind, payload)
        self.decide(entry, END, entry.delta)
        self.outcome.ended += 1

    # -- 1 and 2: requests and the lease lifecycle -------------------------------------------
    def lifecycle(self) -> None:
        """Only busy jobs can be acted on here (`Entry.busy`), and of those only the ones not found
        quiet before (`SchedulerIndex.walk`); walked in id order, as every job was, so the same events
        are emitted in the same order with the same ids."""
        index = self.index
        for job_id in index.walk(self.live):
            entry = index.jobs[job_id]
            d = entry.delta
            if entry.announce_priority is not None:
                self.emit(d, "JobReprioritised", {"new_priority": entry.announce_priority})
                entry.announce_priority = entry.announce_from = None
                self.index.touch(job_id)
                self.outcome.changed.append(job_key(job_id))
            active = d.run_active  # asked once: most busy jobs are running, and nothing is to be done for them
            if d.cancel_requested:
                reason = "cancelled on request" + (f": {entry.cancel_reason}" if entry.cancel_reason else "")
                self.end(entry, "JobCancelled", {"run_id": d.run_id if active else None, "reason": reason})
            elif active:
                if d.preempt_requested:
                    self.end(entry, "JobPreempted", {"run_id": d.run_id, "reason": "preempted on request"})
                elif d.executor not in self.live:
                    message = (
                        f"executor {d.executor} has not reported for {self.config.executor_timeout_ms / 1000:g} s"
                        f" and {self.config.missed_cycles} cycles"
                    )
                    self.take_back(entry, "lease_expired", message, avoid=None)
                elif self.lost(entry, self.live[d.executor or ""]):
                    message = f"executor {d.executor} no longer holds the run"
                    self.take_back(entry, "lease_returned", message, avoid=node_id(d.executor or "", d.node or ""))
                else:
                    index.rest(job_id, self.live[d.executor or ""], d.run_id or "")
            elif d.run_returned:  # never an active run
                self.requeue_or_fail(entry, d, f"run {d.run_id} returned")

    def lost(self, entry: Entry, executor: ExecutorState) -> bool:
        """The executor's runs, listed well after the fold accepted the lease, lack the run."""
        d = entry.delta
        return (
            entry.fold_run == d.run_id
            and executor.time - entry.fold_run_at > self.config.missing_run_grace_ms
            and d.run_id not in executor.runs
        )

    def take_back(self, entry: Entry, category: str, message: str, avoid: str | None) -> None:
        d = entry.delta
        reason = category.replace("_", " ")
        self.emit(
            d,
            "JobRunFailed",
            {"run_id": d.run_id, "reason": reason, "message": message, "exit_code": None, "category": category, "retryable": True},
        )
        taken = updated(
            d,
            run_state=category,
            returned_runs=d.returned_runs + 1,
            avoid_nodes=tuple(sorted({*d.avoid_nodes, avoid})) if avoid else d.avoid_nodes,
        )
        self.requeue_or_fail(entry, taken, f"{reason}: {message}")

    def requeue_or_fail(self, entry: Entry, d: JobDelta, reason: str) -> None:
        if d.fail_fast or d.returned_runs >= self.config.max_attempts:
            message = (
                f"{reason}; the job is fail-fast (annotation {FAIL_FAST}, as every gang member), so it is not retried"
                if d.fail_fast
                else f"{d.returned_runs} runs were returned or expired (limit {self.config.max_attempts})"
            )
            self.emit(d, "JobFailed", {"reason": "max_runs_exceeded", "message": message, "exit_code": None})
            self.decide(entry, END, d)
            self.outcome.ended += 1
            return
        self.emit(d, "JobRequeued", {"run_id": d.run_id, "reason": reason, "avoid_nodes": list(d.avoid_nodes)})
        self.decide(entry, REQUEUE, updated(d, state="queued"))
        self.outcome.requeued += 1

    # -- 3: orphans ---------------------------------------------------------------------------
    def orphans(self) -> None:
        """Stop the runs a live executor lists as active that no job holds. With
        `CycleConfig.orphans_in_later_reports`, only those its state listed once they were let go."""
        # Forget runs no executor reports any more, so the set stays as small as the orphans.
        if self.index.orphans_cancelled:
            self.index.orphans_cancelled &= self.index.active_runs()
        cancelled = self.index.orphans_cancelled
        unheld = self.index.unheld_runs if self.config.orphans_in_later_reports else None
        for name, state in self.live.items():
            # The run of a job the lifecycle found quiet is that job's active run (`SchedulerIndex.rest`): no orphan.
            quiet = self.index.quiet.get(name, {})
            for run_id in state.active if unheld is None else unheld[name]:
                job_id = state.runs.get(run_id, "")
                if run_id in cancelled or quiet.get(run_id) == job_id:
                    continue
                entry = self.index.jobs.get(job_id)
                # The job's active run is no orphan, unless an earlier cycle ended the job (this
                # cycle's endings are stopped by the fold, with the right kind of command).
                if entry is not None and entry.delta.run_id == run_id and entry.delta.run_active:
                    if entry.expect != END or job_id in self.ended:
                        continue
                cancelled.add(run_id)
                self.outcome.commands.append(
                    command(
                        command_id=new_id(self.now, self.rng),
                        executor=name,
                        kind="cancel_run",
                        job_id=job_id,
                        run_id=run_id,
                        queue=entry.delta.queue if entry else "",
                        job_set_id=entry.delta.job_set_id if entry else "",
                        grace_period_s=entry.delta.grace_period_s if entry else 1,
                        reason="the control plane no longer holds this run",
                        created=self.now,
                    )
                )

    # -- 4: placement -------------------------------------------------------------------------
    def place(self) -> None:
        queues = {q.name: q for q in self.tick.queues}
        pools = sorted({state.pool for state in self.schedulable})
        self.index.keep_pools(pools)
        if not pools:
            # No executor can take a job: a queued one waits (and a tick before the period would change nothing).
            self.outcome.left_waiting = any(entry.value("state") == "queued" and entry.expect != END for entry in self.index.jobs.values())
            return
        held = max((pc.priority for pc in self.config.scheduling.priority_classes.values()), default=0)
        leased: set[str] = set()
        for pool in pools:
            config = self.config.for_pool(pool)
            executors = [executor_nodes(self.index, state, held) for state in self.schedulable if state.pool == pool]
            where = {ident: place for executor in executors for ident, place in executor.where.items()}
            taints = {ident: taints for executor in executors for ident, taints in executor.taints.items()}
            stranded = frozenset(
                ident for state in self.unusable if state.pool == pool for ident in executor_nodes(self.index, state, held).where
            )
            context = PoolContext(where, taints, frozenset(queues), config.priority_classes, config.well_known_node_types, stranded)
            gathered = gather(self.index, pool, context)
            active = sorted(gathered.queued_per_queue.keys() | gathered.running_per_queue.keys() | gathered.stranded.keys())
            inputs = CycleInput(
                queues=tuple(scheduling_queue(queues[name], pool) for name in active),
                nodes=tuple(node for executor in executors for node in executor.scheduling_nodes(gathered.unmanaged)),
                running=tuple(gathered.running),
                queued=gathered.queued,
                now=self.now / 1000.0,
                seed=self.outcome.seed,
                limiters=self.index.limiters,
                carried=gathered.carried,
                stranded=gathered.stranded,
            )
            result = schedule(inputs, config)
            if self.config.observe is not None:
                self.config.observe(pool, inputs, result)
            self.apply(pool, result, where, leased)
            self.pools.append(self.pool_summary(pool, inputs, result, gathered))
            # The result holds the buckets of the pool's active queues only: the others keep theirs.
            limiters = replace(result.limiters, per_queue={**self.index.limiters.per_queue, **result.limiters.per_queue})
            self.outcome.changed += self.index.set_limiters(limiters)

    def apply(self, pool: str, result: CycleResult, where: dict[str, tuple[str, str]], leased: set[str]) -> None:
        jobs, changed, now, cycle_id = self.index.jobs, self.outcome.changed, self.now, self.outcome.cycle_id
        reason = f"scheduled in pool {pool}"
        for placed in result.scheduled:
            job_id = placed.job_id
            entry = jobs[job_id]
            executor, node = where[placed.node]
            runs = entry.value("runs") + 1
            new_run = run_id_for(job_id, runs)
            # Made once from the entry, not from its delta (a job that never ran is held as its part): the event
            # names the same job, queue and job set as the delta before it.
            lease = entry.leased(runs, new_run, executor, node, now)
            self.emit(
                lease,
                "JobLeased",
                {
                    "run_id": new_run,
                    "executor": executor,
                    "node": node,
                    "pool": pool,
                    "scheduled_at_priority": placed.priority,
                    "cycle_id": cycle_id,
                },
            )
            # A lease changes the job's run only, not what its Job is made of.
            changed.append(self.index.decide(job_id, LEASE, lease, same_job=True))
            leased.add(job_id)
            self.decisions.append({"job_id": job_id, "kind": "leased", "executor": executor, "node": node, "reason": reason})
        self.outcome.leased += len(result.scheduled)
        for victim in result.preempted:
            entry = self.index.jobs[victim.job_id]
            held_by, held_on = where.get(victim.node, (entry.delta.executor, entry.delta.node))
            self.end(entry, "JobPreempted", {"run_id": entry.delta.run_id, "reason": victim.reason})
            self.decisions.append(
                {"job_id": victim.job_id, "kind": "preempted", "executor": held_by, "node": held_on, "reason": victim.reason}
            )
        self.outcome.preempted += len(result.preempted)
        self.outcome.left_waiting = self.outcome.left_waiting or any(group.job_ids for group in result.unscheduled)
        budget = self.config.max_unschedulable_recorded
        for group in sorted(result.unscheduled, key=lambda g: not g.attempted):
            for job_id in group.job_ids[:budget]:
                if job_id not in leased:
                    self.decisions.append(
                        {"job_id": job_id, "kind": "unschedulable", "executor": None, "node": None, "reason": group.reason}
                    )
                    budget -= 1
            if budget <= 0:
                break
        recorded = self.config.max_unschedulable_recorded - budget
        self.unschedulable_omitted += sum(len(group.job_ids) for group in result.unscheduled) - recorded

    def pool_summary(self, pool: str, inputs: CycleInput, result: CycleResult, gathered: Gathered) -> dict[str, Any]:
        """The pool's capacity and, per active queue, the shares the cycle decided with."""
        weights = {queue.name: queue.weight for queue in inputs.queues}
        queued, running = gathered.queued_per_queue, gathered.running_per_queue
        jobs = self.index.jobs
        scheduled = Counter(jobs[placed.job_id].value("queue") for placed in result.scheduled)
        preempted = Counter(jobs[victim.job_id].delta.queue for victim in result.preempted)
        return {
            "pool": pool,
            "nodes": len(inputs.nodes),
            # What the shares are fractions of: without the empty unschedulable nodes.
            "capacity": dict(result.capacity),
            "queued": len(inputs.queued),
            "unschedulable": sum(len(group.job_ids) for group in result.unscheduled),
            "queues": [
                {
                    "queue": share.queue,
                    "weight": weights.get(share.queue, 0.0),
                    "fair_share": share.fair_share,
                    "adjusted_fair_share": share.adjusted_fair_share,
                    "share_before": share.share_before,
                    "share": share.actual_share,
                    "allocation": dict(sorted(share.allocation.items())),
                    "queued": queued[share.queue],
                    "running": running[share.queue],
                    "scheduled": scheduled[share.queue],
                    "preempted": preempted[share.queue],
                }
                for share in result.shares
            ],
        }

    # -- all together -------------------------------------------------------------------------
    def run(self) -> CycleOutcome:
        self.lifecycle()
        self.orphans()
        self.place()
        self.outcome.sequences = [
            sequence
            for (queue, job_set), emitted in sorted(self.emitted.items())
            for sequence in events.sequences(queue, job_set, SCHEDULER_USER, (), emitted)
        ]
        if self.emitted or self.outcome.commands:
            self.outcome.records = [
                self.cycle_record(self.decisions[start : start + MAX_DECISIONS_PER_RECORD], first=start == 0)
                for start in range(0, max(len(self.decisions), 1), MAX_DECISIONS_PER_RECORD)
            ]
        return self.outcome

    def cycle_record(self, decisions: list[dict[str, Any]], first: bool) -> dict[str, Any]:
        payload = {
            "cycle_id": self.outcome.cycle_id,
            "cycle_time": self.now,
            "seed": self.outcome.seed,
            "feed_offsets": {"0": self.outcome.seed},
            "decisions": decisions,
            "config_hash": self.config.config_hash,
            "pools": self.pools if first else [],
            "unschedulable_omitted": self.unschedulable_omitted if first else 0,
        }
        record = events.event(new_id(self.now, self.rng), self.now, None, events.payload("SchedulingCycle", payload))
        (sequence,) = events.sequences(CYCLES_QUEUE, CYCLES_JOB_SET, SCHEDULER_USER, (), [record])
        return sequence


def run_cycle(index: SchedulerIndex, tick: Tick, offset: int, config: CycleConfig) -> CycleOutcome:
    """Run the cycle closed by ``tick`` (at feed ``offset``); mutates ``index`` with its decisions."""
    return Cycle(index, tick, offset, config).run()
