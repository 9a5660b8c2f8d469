"""Per-cycle mutable state of a job: where it is bound and whether it is evicted."""

from __future__ import annotations

from streams.scheduling.model import Job, PriorityClass


class JobState:
    """One job during a cycle.

    `bound` means the job holds resources on `node`; `evicted` means it was taken off its node
    for this cycle and waits to be put back there (while evicted and bound it only holds
    capacity at the evicted level, so new jobs may take its place by fair-share preemption).
    """

    __slots__ = (
        "job", "pc", "req", "pairs", "running", "started_at", "node", "sched_priority",
        "bound", "evicted", "attempted", "reason", "order_key", "static_key", "gang_size",
    )

    def __init__(self, job: Job, pc: PriorityClass, req: tuple[int, ...], running: bool,
                 started_at: float, node: int | None, sched_priority: int) -> None:
        self.job = job
        self.pc = pc
        self.req = req
        self.pairs = tuple((i, amount) for i, amount in enumerate(req) if amount)
        self.running = running
        self.started_at = started_at
        self.node = node
        self.sched_priority = sched_priority
        self.bound = node is not None
        self.evicted = False
        self.attempted = False
        self.reason = ""
        # Running jobs first, then higher class priority, lower job priority, earlier start,
        # earlier submission, id: the order in which a queue offers its jobs.
        self.order_key = (
            0 if running else 1, -pc.priority, job.priority, started_at if running else 0.0,
            job.submit_time, job.id,
        )
        self.static_key = (
            tuple(sorted(job.node_selector.items())), job.tolerations, job.affinity,
        )
        self.gang_size = job.gang_cardinality

    @property
    def id(self) -> str:
        return self.job.id

    @property
    def queue(self) -> str:
        return self.job.queue

    @property
    def scheduling_key(self) -> tuple[object, ...]:
        """Jobs with equal keys fail alike: once one cannot fit, the rest are skipped this cycle."""
        return (self.static_key, self.req, self.pc.name)
