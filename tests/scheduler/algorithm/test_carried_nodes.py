"""The node db's base carried from cycle to cycle (`NodeBase`, in `RunningStates.nodes`) decides exactly as
one made anew, and is one made anew, whatever nodes come, go or change and whatever jobs run and end."""

from dataclasses import replace
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from streams.scheduler.algorithm.matching import static_mismatch
from streams.scheduler.algorithm.model import CycleInput, Job, Node, NodeAllocation, RunningJob, Taint
from streams.scheduler.algorithm.nodedb import NodeBase, PoolNodes
from streams.scheduler.algorithm.preempting import schedule
from streams.scheduler.algorithm.state import RunningStates
from tests.kit.quantities import CPU, GI
from tests.scheduler.algorithm.builders import config, cycle, job, tolerate

QUEUES = ["A", "B", "C"]
# A node slot: (cpu, zone, gpu tainted, unschedulable, cpu held by unmanaged pods, executor, gpus).
NodeSpec = tuple[int, str, bool, bool, int, int, int]
node_spec = st.tuples(
    st.integers(2, 8), st.sampled_from("ab"), st.booleans(), st.booleans(), st.integers(0, 2), st.integers(0, 1), st.integers(0, 1)
)


def make_node(slot: int, spec: NodeSpec) -> Node:
    cpu, zone, tainted, unschedulable, held, executor, gpus = spec
    resources = {"cpu": cpu * CPU, "memory": 64 * GI}
    if gpus:
        resources["nvidia.com/gpu"] = gpus * CPU
    return Node(
        f"n{slot}",
        resources,
        labels={"zone": zone},
        taints=(Taint("gpu", "true"),) if tainted else (),
        unschedulable=unschedulable,
        allocated=(NodeAllocation(1, {"cpu": held * CPU}),) if held else (),
        executor=f"ex{executor}",
    )


# What a cycle does to the nodes: one field of a slot changed, the slot replaced by an equal copy, a slot
# added or removed, or the nodes given in another order.
change = st.one_of(
    st.tuples(st.just("field"), st.integers(0, 7), st.integers(0, 6), node_spec),
    st.tuples(st.just("copy"), st.integers(0, 7)),
    st.tuples(st.just("add"), node_spec),
    st.tuples(st.just("remove"), st.integers(0, 7)),
    st.tuples(st.just("reverse")),
)
# (queue, cpu, class, gang members, constraint): none, a zone selector, tolerating the gpu taint, a gang uniform in zone.
job_spec = st.tuples(
    st.sampled_from(QUEUES),
    st.integers(1, 4),
    st.sampled_from(["low", "mid", "high", "fixed", "away"]),
    st.integers(1, 3),
    st.sampled_from(["", "zone-a", "zone-b", "gpu", "uniform"]),
)


def make_jobs(specs: list[tuple[str, int, str, int, str]], prefix: str, now: float) -> list[Job]:
    jobs = []
    for i, (queue, cpu, pc, members, constraint) in enumerate(specs):
        kwargs: dict[str, object] = {}
        if constraint.startswith("zone-"):
            kwargs["node_selector"] = {"zone": constraint[-1]}
        elif constraint == "gpu":
            kwargs["tolerations"] = (tolerate("gpu"),)
        annotations = {"armadaproject.io/gangNodeUniformityLabel": "zone"} if constraint == "uniform" else {}
        gang = (f"{prefix}g{i}", members) if members > 1 or constraint == "uniform" else None
        for m in range(members if gang else 1):
            jobs.append(job(f"{prefix}{i}-{m}", queue, cpu=cpu, mem=2, pc=pc, t=now + i, gang=gang, annotations=annotations, **kwargs))
    return jobs


def assert_base_as_made_anew(inputs: CycleInput, carried: RunningStates) -> None:
    """The carried base, field by field, is the base made anew from the cycle's nodes with the kept counts
    bound; its level indices are those made anew, and its masks those of the nodes now."""
    base = carried.nodes
    assert base is not None
    pool = PoolNodes(inputs.nodes)
    names, priorities, indexed = base.key
    anew = NodeBase(pool, names, list(priorities), indexed)
    anew.bind(carried.bound)
    assert base.pool.ids == pool.ids
    assert base.pool.nodes == pool.nodes
    assert (base.totals, base.alloc, base.tops, base.over) == (anew.totals, anew.alloc, anew.tops, anew.over)
    for lvl, index in base.indices.items():
        made = anew.index(lvl)
        assert (index.keys, index.key_of) == (made.keys, made.key_of)
    for static_key, mask in base.home_masks.items():
        assert mask == _mask(pool, static_key, (), ())
    for key, mask in base.masks.items():
        kind, extra, extra_selector = key
        assert mask == _mask(pool, kind, extra, extra_selector)
    for label, values in base.label_values.items():
        assert values == sorted({node.labels[label] for node in pool.nodes if node.labels.get(label)})


def _mask(pool: PoolNodes, static_key: Any, tolerations: Any, selector: Any) -> bytearray:
    """The nodes a job of ``static_key`` (`Shape.static_key`) may use, made anew (as `NodeDb.mask` makes them)."""
    node_selector, own, affinity = static_key
    kind = Job("probe", "A", "low", {}, node_selector=dict(node_selector), tolerations=own, affinity=affinity)
    return bytearray(static_mismatch(node, kind, tolerations, dict(selector)) is None for node in pool.nodes)


def apply_change(slots: dict[int, Node], order: list[int], step: tuple) -> None:
    kind = step[0]
    if kind == "field":
        _, slot, field, spec = step
        if slot in slots:
            old = slots[slot]
            cpu = old.resources["cpu"] // CPU
            now = [
                cpu,
                old.labels["zone"],
                bool(old.taints),
                old.unschedulable,
                old.allocated[0].resources["cpu"] // CPU if old.allocated else 0,
                int(old.executor[-1]),
                old.resources.get("nvidia.com/gpu", 0) // CPU,
            ]
            now[field] = spec[field]
            slots[slot] = make_node(slot, tuple(now))  # type: ignore[arg-type]
    elif kind == "copy" and step[1] in slots:
        slots[step[1]] = replace(slots[step[1]])
    elif kind == "add":
        slot = max(slots, default=-1) + 1
        slots[slot] = make_node(slot, step[1])
        order.append(slot)
    elif kind == "remove" and step[1] in slots and len(slots) > 1:
        del slots[step[1]]
        order.remove(step[1])
    elif kind == "reverse":
        order.reverse()


@settings(max_examples=120, deadline=None)
@given(
    st.lists(node_spec, min_size=1, max_size=5),
    st.lists(
        st.tuples(st.lists(change, max_size=3), st.lists(job_spec, max_size=6), st.sets(st.integers(0, 30), max_size=4)),
        min_size=2,
        max_size=7,
    ),
    st.sampled_from([0.0, 0.5, 1.0]),
)
def test_cycles_with_a_carried_node_base_decide_as_cycles_with_one_made_anew(specs, cycles, protected) -> None:
    """Each cycle changes some nodes (capacity, zone, taint, schedulability, unmanaged pods' holds, executor,
    a new resource), replaces some with equal copies, adds, removes or reorders them, queues new jobs (some
    with selectors, tolerations, gangs uniform in a zone) and ends some running ones; the jobs the cycle
    before placed run, the ones it preempted do not. Nodes unchanged are given as the same objects, as the
    scheduler's index gives them. Every cycle with the carried base decides as one without anything carried,
    and leaves a base equal to one made anew."""
    cfg = config(protected_fraction_of_fair_share=protected, enable_prefer_large_job_ordering=True)
    slots = {i: make_node(i, spec) for i, spec in enumerate(specs)}
    order = list(slots)
    carried = RunningStates()
    running: list[RunningJob] = []
    queued: list[Job] = []
    for n, (changes, arrivals, ending) in enumerate(cycles):
        for step in changes:
            apply_change(slots, order, step)
        queued = [*queued, *make_jobs(arrivals, f"c{n}-", 100.0 * n)]
        live = {node.id for node in slots.values()}
        running = [run for i, run in enumerate(running) if i not in ending and run.node in live]
        inputs = cycle(QUEUES, [slots[i] for i in order], queued, running, now=float(n))
        fresh = schedule(inputs, cfg)
        assert schedule(replace(inputs, carried=carried), cfg) == fresh
        assert_base_as_made_anew(inputs, carried)
        placed = {s.job_id: s for s in fresh.scheduled}
        gone = {p.job_id for p in fresh.preempted}
        running = [run for run in running if run.job.id not in gone]
        running += [RunningJob(j, placed[j.id].node, placed[j.id].priority, float(n)) for j in queued if j.id in placed]
        queued = [j for j in queued if j.id not in placed]


def test_a_node_that_shrank_is_seen_by_the_next_cycle() -> None:
    """A running job's node is given again as a smaller node: the job's capacity is taken from the new size."""
    big = Node("n0", {"cpu": 4 * CPU, "memory": 64 * GI})
    carried = RunningStates()
    first = job("r", cpu=2)
    inputs = cycle(QUEUES, [big], [first], carried=carried)
    (placed,) = schedule(inputs, config()).scheduled
    small = replace(big, resources={"cpu": 3 * CPU, "memory": 64 * GI})
    later = cycle(QUEUES, [small], [job("q", cpu=2, t=1.0)], [RunningJob(first, placed.node, placed.priority)], now=1.0, carried=carried)
    result = schedule(later, config())
    assert result == schedule(replace(later, carried=None), config())
    assert not result.scheduled


def test_a_node_tainted_since_takes_only_jobs_that_tolerate_it() -> None:
    """The nodes a kind of job may use are made again once a node's taints change."""
    plain = Node("n0", {"cpu": 4 * CPU, "memory": 64 * GI})
    carried = RunningStates()
    assert schedule(cycle(QUEUES, [plain], [job("a")], carried=carried), config()).scheduled
    tainted = replace(plain, taints=(Taint("gpu", "true"),))
    later = cycle(QUEUES, [tainted], [job("b", t=1.0), job("c", t=1.0, tolerations=(tolerate("gpu"),))], now=1.0, carried=carried)
    result = schedule(later, config())
    assert result == schedule(replace(later, carried=None), config())
    assert [s.job_id for s in result.scheduled] == ["c"]


def test_a_node_that_shrank_under_its_running_job_keeps_it_and_takes_no_new_job() -> None:
    """The node is over-allocated in the base the cycle starts from and changed by no job of the cycle (its
    queue is within its fair share: no fair-share eviction). As in Armada (TestSchedule, "reschedules all
    jobs onto overallocated node"), the running job is evicted for it (`NodeBase.over`) but goes back
    although it no longer fits (`NodeDb.over_allocated`, found from the base's over-allocated nodes), and
    the node takes no new job, which would fit had the running job been preempted."""
    big, other = Node("n0", {"cpu": 4 * CPU, "memory": 64 * GI}, labels={"zone": "a"}), Node("n1", {"cpu": 32 * CPU, "memory": 256 * GI})
    carried = RunningStates()
    first = job("r", cpu=3, node_selector={"zone": "a"})
    calm = config(protected_fraction_of_fair_share=1.0)
    (placed,) = schedule(cycle(QUEUES, [big, other], [first], carried=carried), calm).scheduled
    small = replace(big, resources={"cpu": 2 * CPU, "memory": 64 * GI})
    newcomer = job("n", cpu=1, t=1.0, node_selector={"zone": "a"})
    later = cycle(QUEUES, [small, other], [newcomer], [RunningJob(first, placed.node, placed.priority)], now=1.0, carried=carried)
    result = schedule(later, calm)
    assert result == schedule(replace(later, carried=None), calm)
    assert result.preempted == () and result.scheduled == ()
