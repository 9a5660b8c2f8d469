"""A pool's running and queued jobs, kept from cycle to cycle and changed by the jobs that changed.

Gathered afresh, they cost every cycle a walk over every unfinished job, though most of the
thousand-odd running jobs go on unchanged for many cycles. The index notes each job whose entry
changed (`SchedulerIndex.touch`), and a pool's jobs are gathered again for those only, as long as
what a job's part depends on beyond its entry (`PoolContext`) is what it was; otherwise they are
gathered afresh. Either way the result is the same as gathering every job (a property test holds
them equal).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, replace

from streams.scheduler.algorithm.matching import held_priority
from streams.scheduler.algorithm.model import Job, Node, PriorityClass, RunningJob, Taint, WellKnownNodeType
from streams.scheduler.algorithm.state import RunningStates
from streams.scheduler.convert import node_taints, scheduling_node
from streams.scheduler.feed import PART, ExecutorState, node_id
from streams.scheduler.index import END, Entry, SchedulerIndex

_QUEUE, _STATE, _CLASS = (PART[name] for name in ("queue", "state", "priority_class"))


@dataclass(frozen=True)
class PoolContext:
    """What a job's part of its pool depends on besides its entry: the pool's nodes (node id ->
    (executor, node name)) and their taints, the tick's queues, the priority classes and node types,
    and ``stranded``: the pool's nodes no job may go to now (their executor is stale), whose jobs
    count in their queues' allocation and demand as Armada counts them, on no node of the cycle."""

    where: Mapping[str, tuple[str, str]]
    taints: Mapping[str, tuple[Taint, ...]]
    queues: frozenset[str]
    classes: Mapping[str, PriorityClass]
    node_types: Mapping[str, WellKnownNodeType]
    stranded: frozenset[str]


@dataclass
class Gathered:
    """A pool's jobs for one cycle: the running ones in job id order, the queued ones in the order they
    are kept (the algorithm's decisions do not depend on it, as a property test of it holds, and a
    million ids sorted at every cycle cost a tenth of it). ``unmanaged``: per node, what runs whose
    queue (not in the tick) or priority class (not configured) the cycle does not know hold there;
    the counts are per queue (of the jobs on the cycle's nodes). ``stranded``: what the jobs on the
    stranded nodes hold, per queue and priority class (`CycleInput.stranded`)."""

    running: list[RunningJob]
    queued: tuple[Job, ...]
    unmanaged: dict[str, dict[str, int]]
    stranded: dict[str, dict[str, dict[str, int]]]
    running_per_queue: Counter[str]
    queued_per_queue: Counter[str]
    # The algorithm's states of the running jobs, kept from the pool's last cycle (`CycleInput.carried`).
    carried: RunningStates


class PoolJobs:
    """The parts of one pool's jobs under ``context``; ``pending``: jobs changed since they were made."""

    def __init__(self, context: PoolContext) -> None:
        self.context = context
        self.running: dict[str, RunningJob] = {}
        self.queued: dict[str, Job] = {}
        self.unmanaged: dict[str, tuple[str, Mapping[str, int]]] = {}
        # job id -> (queue, priority class, requests) of the known jobs on stranded nodes.
        self.stranded: dict[str, tuple[str, str, Mapping[str, int]]] = {}
        self.pending: set[str] = set()
        self.carried = RunningStates()
        self._running_per_queue: Counter[str] = Counter()
        self._queued_per_queue: Counter[str] = Counter()
        # Each node's id as one string, held by every run on it (`Entry.running` keeps them from cycle to cycle).
        self._node_ids = {node: node for node in (*context.where, *context.stranded)}
        # The running jobs' ids in id order as `gathered` last gave them, the ids that started running since
        # (and run still), and whether one of the ids in order stopped running: a cycle sorts only the new
        # ids into the order (most of 100,000 running jobs were there at the last cycle), not every id.
        self._order: list[str] = []
        self._joined: list[str] = []
        self._left = False

    def refresh(self, jobs: Mapping[str, Entry], job_ids: Iterable[str]) -> None:
        """Make the parts of ``job_ids`` again from their entries (gone from ``jobs``: no part)."""
        running = self.running
        for job_id in job_ids:
            run = running.pop(job_id, None)
            if run is not None:
                self._running_per_queue[run.job.queue] -= 1
            job = self.queued.pop(job_id, None)
            if job is not None:
                self._queued_per_queue[job.queue] -= 1
            self.unmanaged.pop(job_id, None)
            self.stranded.pop(job_id, None)
            entry = jobs.get(job_id)
            if entry is not None:
                self._add(job_id, entry)
            if job_id in running:
                if run is None:
                    self._joined.append(job_id)
            elif run is not None:
                self._left = True

    def _add(self, job_id: str, entry: Entry) -> None:
        """A running job holds its node at its class's priority, or at a lower one where it runs away
        (on a node type its class may use but whose taints it does not tolerate itself)."""
        if entry.expect == END:
            return
        context = self.context
        classes = context.classes
        part = entry.part
        if part is not None:  # the most of a long queue: asked without making each job's delta
            queue = part[_QUEUE]
            if part[_STATE] == "queued" and queue in context.queues and part[_CLASS] in classes:
                self.queued[job_id] = entry.job
                self._queued_per_queue[queue] += 1
            return
        d = entry.delta
        known = d.queue in context.queues and d.priority_class in classes
        if d.run_active:
            node = node_id(d.executor or "", d.node or "")
            node = self._node_ids.get(node, node)
            if node not in context.where:
                if known and node in context.stranded:
                    self.stranded[job_id] = (d.queue, d.priority_class, d.requests)
                return
            if known:
                pc, taints = classes[d.priority_class], context.taints[node]
                priority = held_priority(entry.job, taints, pc, context.node_types) if taints else pc.priority
                self.running[job_id] = entry.running(node, priority)
                self._running_per_queue[d.queue] += 1
            else:
                self.unmanaged[job_id] = (node, d.requests)
        elif known and d.state == "queued":
            self.queued[job_id] = entry.job
            self._queued_per_queue[d.queue] += 1

    def gathered(self) -> Gathered:
        running, queued = self.running, self.queued
        unmanaged: dict[str, dict[str, int]] = defaultdict(dict)
        for job_id in sorted(self.unmanaged):
            node, requests = self.unmanaged[job_id]
            for name, amount in requests.items():
                unmanaged[node][name] = unmanaged[node].get(name, 0) + amount
        stranded: dict[str, dict[str, dict[str, int]]] = {}
        for queue, class_name, requests in self.stranded.values():
            held = stranded.setdefault(queue, {}).setdefault(class_name, {})
            for name, amount in requests.items():
                held[name] = held.get(name, 0) + amount
        if self._left:
            self._order = sorted(running)
        elif self._joined:
            self._order += self._joined
            self._order.sort()  # a sorted run and the new ids: merged, not sorted anew
        self._joined, self._left = [], False
        return Gathered(
            list(map(running.__getitem__, self._order)),
            tuple(queued.values()),
            unmanaged,
            stranded,
            +self._running_per_queue,
            +self._queued_per_queue,
            self.carried,
        )


def gather(index: SchedulerIndex, pool: str, context: PoolContext) -> Gathered:
    """The pool's jobs now: its kept parts brought up to date, or made afresh when its context changed."""
    changed = index.take_changed()
    for other in index.pool_jobs.values():
        other.pending |= changed
    kept = index.pool_jobs.get(pool)
    if kept is None or kept.context != context:
        kept = index.pool_jobs[pool] = PoolJobs(context)
        kept.refresh(index.jobs, index.jobs)
    else:
        kept.refresh(index.jobs, kept.pending)
    kept.pending = set()
    return kept.gathered()


@dataclass(frozen=True)
class ExecutorNodes:
    """What an executor's report gives a cycle: its node ids (-> (executor, node name)), their taints
    and scheduling nodes (with ``held``: the level at which pods Flotilla did not start hold their
    resources). Made once per report (`executor_nodes`), not at every cycle."""

    state: ExecutorState
    held: int
    where: dict[str, tuple[str, str]]
    taints: dict[str, tuple[Taint, ...]]
    nodes: tuple[Node, ...]

    def scheduling_nodes(self, unmanaged: Mapping[str, Mapping[str, int]]) -> Iterator[Node]:
        """The nodes, where ``unmanaged`` (per node) says runs the cycle cannot schedule around
        hold resources counted as used by pods Flotilla did not start."""
        for state_node, node in zip(self.state.nodes, self.nodes, strict=True):
            extra = unmanaged.get(node.id)
            if extra:
                used = state_node.used
                yield scheduling_node(
                    self.state, replace(state_node, used={k: used.get(k, 0) + extra.get(k, 0) for k in {*used, *extra}}), self.held
                )
            else:
                yield node


def executor_nodes(index: SchedulerIndex, state: ExecutorState, held: int) -> ExecutorNodes:
    """The executor's `ExecutorNodes` for its latest report, kept by the index from cycle to cycle."""
    kept = index.executor_nodes.get(state.executor)
    if kept is None or kept.state is not state or kept.held != held:
        ids = [node_id(state.executor, node.name) for node in state.nodes]
        kept = index.executor_nodes[state.executor] = ExecutorNodes(
            state,
            held,
            {ident: (state.executor, node.name) for ident, node in zip(ids, state.nodes, strict=True)},
            {ident: node_taints(node) for ident, node in zip(ids, state.nodes, strict=True)},
            tuple(scheduling_node(state, node, held) for node in state.nodes),
        )
    return kept
