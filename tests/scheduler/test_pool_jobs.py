"""A pool's jobs kept from cycle to cycle (`streams.scheduler.pool_jobs`) equal its jobs gathered afresh."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from streams.scheduler.algorithm.model import Taint
from streams.scheduler.config import CycleConfig
from streams.scheduler.convert import scheduling_node
from streams.scheduler.cycle import run_cycle
from streams.scheduler.feed import JobSetAction, node_id
from streams.scheduler.index import END, LEASE, REQUEUE, SchedulerIndex
from streams.scheduler.pool_jobs import Gathered, PoolContext, PoolJobs, executor_nodes, gather
from tests.kit.quantities import CPU, GI
from tests.kit.scheduler import DEFAULT, PREEMPTIBLE, delta, executor, nodes, running, tick

CLASSES = CycleConfig().scheduling.priority_classes
NODE_TYPES = CycleConfig().scheduling.well_known_node_types


def context(queues: frozenset[str] = frozenset({"a", "b"}), tainted: bool = False, stranded: bool = False) -> PoolContext:
    """ex1's three nodes; with ``stranded``, ex2's (a stale executor of the pool) too."""
    where = {node_id("ex1", f"n{i}"): ("ex1", f"n{i}") for i in range(3)}
    taints = {name: (Taint("gpu", "true"),) if tainted and name.endswith("n2") else () for name in where}
    off = frozenset(node_id("ex2", f"n{i}") for i in range(3)) if stranded else frozenset()
    return PoolContext(where, taints, queues, CLASSES, NODE_TYPES, off)


def afresh(index: SchedulerIndex, ctx: PoolContext) -> Gathered:
    made = PoolJobs(ctx)
    made.refresh(index.jobs, index.jobs)
    return made.gathered()


def parts(gathered: Gathered) -> tuple[object, ...]:
    """The queued jobs in any order (the algorithm's decisions do not depend on it), the rest as they are."""
    queued = {job.id: job for job in gathered.queued}
    assert len(queued) == len(gathered.queued)
    return (
        gathered.running,
        queued,
        dict(gathered.unmanaged),
        gathered.stranded,
        gathered.running_per_queue,
        gathered.queued_per_queue,
    )


# One change to the index: (kind, job number, a second number picking queue, class, node or run state).
change = st.tuples(
    st.sampled_from(["submit", "run", "confirm", "end", "lease", "requeue", "decide_end", "cancel_set", "gather", "context"]),
    st.integers(0, 11),
    st.integers(0, 5),
)


@settings(max_examples=150, deadline=None)
@given(st.lists(change, max_size=60))
def test_kept_jobs_equal_jobs_gathered_afresh_after_any_changes(changes) -> None:
    index = SchedulerIndex()
    ctx = context()
    for kind, n, k in changes:
        job_id = f"j{n:02d}"
        entry = index.jobs.get(job_id)
        if kind == "submit":
            index.apply(delta(job_id, queue="abc"[k % 3], pc=(PREEMPTIBLE, DEFAULT, "unknown")[k % 3], job_set=f"s{k % 2}"))
        elif kind == "run" and entry is not None:
            executor_name = "ex1" if k < 4 else "ex2"  # ex2's nodes are in no pool, or stranded
            index.apply(running(entry.delta, f"{job_id}-{entry.delta.runs + 1}", executor_name, f"n{k % 3}", 1_000 + k))
        elif kind == "confirm" and entry is not None and entry.delta.run_id:
            index.apply(replace(entry.delta, run_state=("pending", "running", "succeeded", "failed")[k % 4]))
        elif kind == "end" and entry is not None:
            index.apply(replace(entry.delta, state="succeeded", run_state="succeeded"))
        elif kind == "lease" and entry is not None and entry.expect is None:
            d = entry.delta
            leased = running(d, f"{job_id}-x", "ex1", f"n{k % 3}", 5)
            index.decide(job_id, LEASE, replace(leased, state="leased", run_state="leased"))
        elif kind == "requeue" and entry is not None and entry.expect is None:
            index.decide(job_id, REQUEUE, replace(entry.delta, state="queued", run_state="lease_returned"))
        elif kind == "decide_end" and entry is not None:
            index.decide(job_id, END, entry.delta)
        elif kind == "cancel_set":
            index.apply(JobSetAction("abc"[k % 3], f"s{k % 2}", "cancel" if k < 3 else "reprioritise", new_priority=float(k)))
        elif kind == "context":
            ctx = context(frozenset("abc"[: 1 + k % 3]), tainted=k >= 3, stranded=k % 2 == 1)
        if kind in ("gather", "context") or n == 0:
            assert parts(gather(index, "default", ctx)) == parts(afresh(index, ctx))
    assert parts(gather(index, "default", ctx)) == parts(afresh(index, ctx))


def test_a_pool_no_cycle_gathers_is_forgotten_with_its_pending_changes() -> None:
    index = SchedulerIndex()
    index.apply(delta("j1"))
    gather(index, "default", context())
    index.apply(delta("j2"))
    index.keep_pools(["other"])
    assert index.pool_jobs == {} and index.take_changed() == set()
    index.apply(delta("j3"))  # nobody keeps a pool's jobs: no change is noted
    assert index.take_changed() == set()


def test_cycles_keep_each_pools_jobs_in_the_index_and_a_reload_starts_afresh() -> None:
    index = SchedulerIndex()
    index.apply(executor("ex1", 1_000, nodes(2)))
    for i in range(3):
        index.apply(delta(f"j{i}"))
    config = CycleConfig()
    run_cycle(index, tick(1_000, "a"), 1, config)
    kept = index.pool_jobs["default"]  # as the cycle gathered them, before it leased them
    assert kept.running == {} and sorted(kept.queued) == ["j0", "j1", "j2"]
    index.apply(delta("j3"))
    run_cycle(index, tick(2_000, "a"), 2, config)
    assert index.pool_jobs["default"] is kept and sorted(kept.running) == ["j0", "j1", "j2"] and sorted(kept.queued) == ["j3"]
    # A cycle with no executor to schedule on forgets the kept jobs, and the index stops noting changes.
    for offset in range(3, 3 + config.missed_cycles + 2):  # silent for long and for more cycles than allowed
        run_cycle(index, tick(200_000 + offset, "a"), offset, config)
    assert index.pool_jobs == {}
    index.apply(delta("j4"))
    assert index.take_changed() == set()
    reloaded = SchedulerIndex()
    reloaded.load((key, value) for key, value in ((key, index.dump(key)) for key in index.keys()) if value is not None)
    assert reloaded.pool_jobs == {}


def test_an_executors_nodes_are_made_once_per_report_and_equal_nodes_made_anew() -> None:
    index = SchedulerIndex()
    report = executor("ex1", 1_000, nodes(3))
    made = executor_nodes(index, report, 1000)
    assert executor_nodes(index, report, 1000) is made
    assert list(made.scheduling_nodes({})) == [scheduling_node(report, node, 1000) for node in report.nodes]
    assert made.where == {f"ex1/n{i}": ("ex1", f"n{i}") for i in range(3)}
    # Runs the cycle does not know count as used by other pods, on their node only.
    extra = {"ex1/n1": {"cpu": 2_000}}
    with_extra = list(made.scheduling_nodes(extra))
    assert with_extra[1] == scheduling_node(report, replace(report.nodes[1], used={"cpu": 2_000}), 1000)
    assert with_extra[0] is made.nodes[0] and with_extra[2] is made.nodes[2]
    later = executor("ex1", 2_000, nodes(2))
    remade = executor_nodes(index, later, 1000)
    assert remade is not made and [node.id for node in remade.nodes] == ["ex1/n0", "ex1/n1"]
    assert executor_nodes(index, later, 2000) is not remade  # another held priority: made anew


def test_jobs_on_stranded_nodes_are_held_per_queue_and_class_on_no_node() -> None:
    """A stale executor's jobs count in their queue's allocation (`CycleInput.stranded`), but are no
    running job of the cycle (none can be evicted, their nodes take nothing); those of a queue or
    class the cycle does not know, and those on nodes of no pool, are not counted at all."""
    index = SchedulerIndex()
    placed = [("a", PREEMPTIBLE, "ex2", 1), ("a", PREEMPTIBLE, "ex2", 2), ("a", DEFAULT, "ex2", 4), ("b", DEFAULT, "ex1", 8)]
    placed += [("c", DEFAULT, "ex2", 16), ("a", "unknown", "ex2", 16), ("a", DEFAULT, "ex3", 16)]
    for i, (queue, pc, name, cpu) in enumerate(placed):
        job_id = f"j{i}"
        index.apply(running(delta(job_id, queue=queue, pc=pc, cpu=cpu), f"{job_id}-1", name, "n0", 1_000))
    gathered = gather(index, "default", context(stranded=True))
    assert [run.job.id for run in gathered.running] == ["j3"]
    assert gathered.stranded == {"a": {PREEMPTIBLE: {"cpu": 3 * CPU, "memory": 8 * GI}, DEFAULT: {"cpu": 4 * CPU, "memory": 4 * GI}}}
    assert gathered.running_per_queue == {"b": 1} and not gathered.unmanaged
    assert gather(index, "default", context()).stranded == {}
