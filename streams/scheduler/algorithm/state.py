"""Per-cycle mutable state of a job: where it is bound and whether it is evicted."""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING

from streams.scheduler.algorithm.model import Job, PriorityClass, RunningJob

if TYPE_CHECKING:
    from streams.scheduler.algorithm.nodedb import NodeBase

Pairs = tuple[tuple[int, int], ...]


class Shape:
    """What interchangeable jobs share: class, request vector and node requirements."""

    __slots__ = ("pc", "req", "pairs", "static_key", "scheduling_key")

    def __init__(self, job: Job, pc: PriorityClass, req: tuple[int, ...]) -> None:
        self.pc = pc
        self.req = req
        self.pairs = tuple((i, amount) for i, amount in enumerate(req) if amount)
        self.static_key = (tuple(sorted(job.node_selector.items())), job.tolerations, job.affinity)
        # Jobs with equal keys fail alike: once one cannot fit, the rest are skipped this cycle.
        self.scheduling_key = (self.static_key, req, pc.name)


class JobState:
    """One job during a cycle.

    `bound` means the job holds resources on `node`; `evicted` means it was taken off its node
    for this cycle and waits to be put back there (while evicted and bound it only holds
    capacity at the evicted level, so new jobs may take its place by fair-share preemption).
    """

    __slots__ = (
        "job",
        "id",
        "queue",
        "gang_id",
        "pc",
        "req",
        "pairs",
        "running",
        "started_at",
        "node",
        "sched_priority",
        "bound",
        "evicted",
        "attempted",
        "reason",
        "_order_key",
        "static_key",
        "gang_size",
        "scheduling_key",
    )

    def __init__(
        self,
        job: Job,
        shape: Shape,
        running: bool,
        started_at: float,
        node: int | None,
        sched_priority: int,
        key: tuple[object, ...] | None = None,
        gang: tuple[str, int] | None = None,
    ) -> None:
        """`key` and `gang` (id, cardinality), when the caller already has them for a whole group
        of jobs, spare recomputing them per job; they must equal what the job itself gives."""
        self.job = job
        # Copied off the job: read for every job at every step of the cycle.
        self.id = job.id
        self.queue = job.queue
        if gang is None:
            gang_id = job.gang_id if job.annotations else ""  # most jobs have no annotations: no lookup
            gang = (gang_id, job.gang_cardinality) if gang_id else ("", 1)
        self.gang_id, self.gang_size = gang
        self.pc = shape.pc
        self.req = shape.req
        self.pairs = shape.pairs
        self.static_key = shape.static_key
        self.scheduling_key = shape.scheduling_key
        self.running = running
        self.started_at = started_at
        self.node = node
        self.sched_priority = sched_priority
        self.bound = node is not None
        self.evicted = False
        self.attempted = False
        self.reason = ""
        self._order_key = key

    def reset(self, node: int, sched_priority: int) -> None:
        """Back to how a running job's state starts a cycle (as made by `__init__`, before binding),
        for the next cycle of a job that runs on unchanged (`RunningStates`)."""
        self.node, self.sched_priority = node, sched_priority
        self.bound, self.evicted, self.attempted, self.reason = True, False, False, ""
        if not self.gang_id:
            self.gang_size = 1

    @property
    def order_key(self) -> tuple[object, ...]:
        """Made when first asked: only jobs put back after an eviction are ordered by it, and most
        running jobs, loaded anew by every cycle, never are."""
        if self._order_key is None:
            self._order_key = order_key(self.job, self.pc, self.running, self.started_at)
        return self._order_key


def order_key(job: Job, pc: PriorityClass, running: bool, started_at: float) -> tuple[object, ...]:
    """Running jobs first, then higher class priority, lower job priority, earlier start,
    earlier submission, id: the order in which a queue offers its jobs."""
    return (0 if running else 1, -pc.priority, job.priority, started_at if running else 0.0, job.submit_time, job.id)


class RunningStates:
    """A pool's running jobs' states as its last cycle made them, for its next cycle to reuse
    (`CycleInput.carried`): most running jobs go on unchanged for many cycles, and making their
    states anew, binding them to their nodes and adding up their queues' allocations was much of a
    cycle's set-up. A state is reused for the same `RunningJob` object and priority class, under the
    same resource names, nodes, levels and active queues, reset as if made anew (`JobState.reset`);
    the counts change by the jobs that came and went only. With them, the node db's base with those
    counts bound (`nodedb.NodeBase`), changed by the same jobs and by the nodes that changed."""

    __slots__ = ("key", "states", "bound", "held", "nodes")

    def __init__(self) -> None:
        # What the states and counts were made for: resource names, node ids, priority levels, active queues.
        self.key: tuple[object, ...] = ()
        # Per job id: its run, its state, and what it was counted under in ``bound`` and ``held``.
        self.states: dict[str, tuple[RunningJob, JobState, tuple[int, int, Pairs], tuple[str, str, Pairs] | None]] = {}
        # The states counted per (node, levels taken, request pairs), for the node db (`NodeDb.bind_counted`),
        # and those of active queues per (queue, class, request pairs), for the queues' allocations.
        self.bound: dict[tuple[int, int, Pairs], int] = defaultdict(int)
        self.held: dict[tuple[str, str, Pairs], int] = defaultdict(int)
        # The node db's base as the last cycle left it, ``bound`` bound into it (`NodeDb.bind_counted`).
        self.nodes: NodeBase | None = None
