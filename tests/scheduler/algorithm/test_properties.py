"""Invariants over random small clusters (two cycles: fill, then compete)."""

import random
from collections import defaultdict

from hypothesis import given, settings
from hypothesis import strategies as st

from streams.scheduler.algorithm import reasons
from streams.scheduler.algorithm.fairness import DrfCost
from streams.scheduler.algorithm.model import CycleInput, RunningJob
from streams.scheduler.algorithm.preempting import schedule
from tests.scheduler.algorithm.builders import CLASSES, config, cycle, job, node

QUEUES = ["A", "B", "C"]
PCS = ["low", "mid", "high", "fixed"]

# (queue, cpu, memory GiB, priority class, gang group: 0 = none)
job_spec = st.tuples(st.sampled_from(QUEUES), st.integers(1, 4), st.integers(1, 16), st.sampled_from(PCS), st.integers(0, 3))


@st.composite
def scenarios(draw):
    nodes = [node(f"n{i}", cpu=draw(st.integers(2, 8)), mem=64) for i in range(draw(st.integers(1, 4)))]
    first = draw(st.lists(job_spec, max_size=14))
    second = draw(st.lists(job_spec, max_size=14))
    protected = draw(st.sampled_from([0.0, 0.5, 1.0]))
    return nodes, first, second, protected


def make_jobs(specs, prefix, offset):
    jobs, gang_members = [], defaultdict(list)
    for i, (queue, _cpu, _mem, pc, gang) in enumerate(specs):
        if gang:
            gang_members[(queue, pc, gang)].append(i)
    for i, (queue, cpu, mem, pc, gang) in enumerate(specs):
        key = (queue, pc, gang)
        annotations = {}
        if gang and len(gang_members[key]) > 1:
            annotations = {
                "armadaproject.io/gangId": f"{prefix}{queue}{pc}{gang}",
                "armadaproject.io/gangCardinality": str(len(gang_members[key])),
            }
        jobs.append(job(f"{prefix}{i}", queue, cpu=cpu, mem=mem, pc=pc, t=offset + i, annotations=annotations))
    return jobs


def two_cycles(data):
    nodes, first, second, protected = data
    cfg = config(protected_fraction_of_fair_share=protected, enable_prefer_large_job_ordering=True)
    first_jobs = make_jobs(first, "f", 0)
    r1 = schedule(cycle(QUEUES, nodes, first_jobs), cfg)
    by_id = {j.id: j for j in first_jobs}
    running = [RunningJob(by_id[s.job_id], s.node, s.priority, 0.0) for s in r1.scheduled]
    inputs = cycle(QUEUES, nodes, make_jobs(second, "s", 100), running, now=1.0)
    return inputs, cfg, schedule(inputs, cfg)


def final_placement(inputs, result):
    gone = {p.job_id for p in result.preempted}
    queued = {j.id: j for j in inputs.queued}
    placed = [(r.job, r.node) for r in inputs.running if r.job.id not in gone]
    placed += [(queued[s.job_id], s.node) for s in result.scheduled]
    return placed


@settings(max_examples=60, deadline=None)
@given(scenarios())
def test_no_node_is_over_capacity(data):
    inputs, _, result = two_cycles(data)
    used: defaultdict[str, defaultdict[str, int]] = defaultdict(lambda: defaultdict(int))
    for j, node_id in final_placement(inputs, result):
        for name, amount in j.requests.items():
            used[node_id][name] += amount
    capacity = {n.id: n.resources for n in inputs.nodes}
    for node_id, amounts in used.items():
        for name, amount in amounts.items():
            assert amount <= capacity[node_id].get(name, 0)


@settings(max_examples=60, deadline=None)
@given(scenarios())
def test_gangs_are_all_or_nothing_and_fixed_jobs_stay(data):
    inputs, _, result = two_cycles(data)
    scheduled = {s.job_id for s in result.scheduled}
    preempted = {p.job_id for p in result.preempted}
    gangs = defaultdict(list)
    for j in inputs.queued:
        if j.gang_id:
            gangs[j.gang_id].append(j.id in scheduled)
    for r in inputs.running:
        if r.job.gang_id:
            gangs["running-" + r.job.gang_id].append(r.job.id in preempted)
        if not CLASSES[r.job.priority_class].preemptible:
            assert r.job.id not in preempted
    for flags in gangs.values():
        assert all(flags) or not any(flags)


@settings(max_examples=60, deadline=None)
@given(scenarios())
def test_fair_share_preemption_only_above_protected_share(data):
    inputs, cfg, result = two_cycles(data)
    names = ["cpu", "memory"]
    totals = [sum(n.resources[r] for n in inputs.nodes) for r in names]
    cost = DrfCost(totals, [0, 1])
    allocation: defaultdict[str, list[int]] = defaultdict(lambda: [0, 0])
    for r in inputs.running:
        for i, name in enumerate(names):
            allocation[r.job.queue][i] += r.job.requests[name]
    shares = {s.queue: s for s in result.shares}
    running = {r.job.id: r.job for r in inputs.running}
    for p in result.preempted:
        if p.reason != reasons.FAIR_SHARE_PREEMPTED:
            continue
        queue = running[p.job_id].queue
        fair = max(shares[queue].fair_share, shares[queue].adjusted_fair_share)
        assert cost.unweighted(allocation[queue]) / fair > cfg.protected_fraction_of_fair_share


@settings(max_examples=40, deadline=None)
@given(scenarios(), st.randoms(use_true_random=False))
def test_decisions_do_not_depend_on_input_order(data, rnd: random.Random):
    inputs, cfg, result = two_cycles(data)
    shuffled = [list(inputs.queues), list(inputs.nodes), list(inputs.running), list(inputs.queued)]
    for items in shuffled:
        rnd.shuffle(items)
    permuted = CycleInput(
        queues=tuple(shuffled[0]), nodes=tuple(shuffled[1]), running=tuple(shuffled[2]), queued=tuple(shuffled[3]), now=inputs.now
    )
    assert schedule(permuted, cfg) == result
