"""Running jobs' states carried from cycle to cycle (`RunningStates`) decide exactly as states made anew."""

from collections import Counter
from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from streams.scheduler.algorithm.model import CycleInput, CycleResult, RunningJob
from streams.scheduler.algorithm.preempting import schedule
from streams.scheduler.algorithm.state import JobState, RunningStates, Shape
from tests.scheduler.algorithm.builders import CLASSES, config, cycle, job, node, running
from tests.scheduler.algorithm.test_properties import QUEUES, job_spec, make_jobs


def next_running(
    inputs: CycleInput, result: CycleResult, kept: dict[str, RunningJob], now: float, keep_preempted: bool
) -> list[RunningJob]:
    """What runs after ``result``: the same RunningJob objects for the jobs that stay (as the
    scheduler's index hands them on; with ``keep_preempted`` the preempted ones too), new ones
    for the jobs just placed."""
    gone = set() if keep_preempted else {p.job_id for p in result.preempted}
    queued = {j.id: j for j in inputs.queued}
    running = [run for run in inputs.running if run.job.id not in gone]
    for placed in result.scheduled:
        kept[placed.job_id] = RunningJob(queued[placed.job_id], placed.node, placed.priority, now)
        running.append(kept[placed.job_id])
    return running


def recounted(carried: RunningStates) -> tuple[Counter, Counter]:
    """The kept states' counts made afresh from the states themselves."""
    bound: Counter = Counter()
    held: Counter = Counter()
    for _, _, bind_key, hold_key in carried.states.values():
        bound[bind_key] += 1
        if hold_key is not None:
            held[hold_key] += 1
    return bound, held


@settings(max_examples=80, deadline=None)
@given(
    st.lists(st.integers(2, 8), min_size=1, max_size=4),
    st.lists(
        st.tuples(st.lists(job_spec, max_size=10), st.sets(st.sampled_from(QUEUES), min_size=1), st.booleans(), st.booleans()),
        min_size=2,
        max_size=6,
    ),
    st.sampled_from([0.0, 0.5, 1.0]),
)
def test_cycles_with_carried_states_decide_as_cycles_with_states_made_anew(cpus, arrivals, protected) -> None:
    """Queues arrive one after another onto full nodes, so that carried states are evicted,
    preempted, put back and rescheduled; queues go quiet and come back, the last node goes and
    comes back; some cycles are given the runs the last one preempted again (the algorithm may be
    given any runs: a state left evicted must be reset, not reused as it is). Each cycle's result
    must equal the uncarried one, and the kept counts a recount."""
    all_nodes = [node(f"n{i}", cpu=cpu, mem=64) for i, cpu in enumerate(cpus)]
    cfg = config(protected_fraction_of_fair_share=protected, enable_prefer_large_job_ordering=True)
    carried = RunningStates()
    running: list[RunningJob] = []
    queued: list = []
    kept: dict[str, RunningJob] = {}
    for n, (specs, active, drop_node, keep_preempted) in enumerate(arrivals):
        nodes = all_nodes[:-1] if drop_node and len(all_nodes) > 1 else all_nodes
        queued = [*queued, *make_jobs(specs, f"c{n}-", 100 * n)]
        inputs = cycle(sorted(active), nodes, queued, running, now=float(n))
        fresh = schedule(inputs, cfg)
        reused = schedule(replace(inputs, carried=carried), cfg)
        assert reused == fresh
        assert set(carried.states) == {run.job.id for run in running if run.node in {n.id for n in nodes}}
        assert (Counter(carried.bound), Counter(carried.held)) == recounted(carried)
        scheduled = {s.job_id for s in fresh.scheduled}
        queued = [j for j in queued if j.id not in scheduled]
        running = next_running(inputs, fresh, kept, float(n), keep_preempted)


def test_a_reset_state_is_the_state_made_anew() -> None:
    """A state the last cycle evicted, moved and marked is, once reset, slot for slot the one `__init__` makes."""
    j = job("j1", gang=("g", 2))
    pc = CLASSES["mid"]
    shape = Shape(j, pc, (1000, 4))
    used = JobState(j, shape, True, 5.0, 0, pc.priority)
    _ = used.order_key
    used.node, used.sched_priority, used.bound, used.evicted, used.attempted, used.reason = 3, 0, False, True, True, "preempted"
    used.reset(1, pc.priority)
    made = JobState(j, shape, True, 5.0, 1, pc.priority)
    _ = made.order_key
    assert {name: getattr(used, name) for name in JobState.__slots__} == {name: getattr(made, name) for name in JobState.__slots__}
    lone = JobState(job("j2"), shape, True, 5.0, 0, pc.priority)
    lone.gang_size = 3  # an eviction counts gangs: a job alone is a gang of one again
    lone.reset(0, pc.priority)
    assert lone.gang_size == 1


def test_a_state_is_made_anew_for_another_run_of_the_job() -> None:
    nodes = [node("n0", cpu=4, mem=64), node("n1", cpu=4, mem=64)]
    j = job("j1", cpu=2)
    carried = RunningStates()
    first = RunningJob(j, "n0", 0, 0.0)
    schedule(cycle(QUEUES, nodes, running_jobs=[first], carried=carried), config())
    state = carried.states["j1"][1]
    schedule(cycle(QUEUES, nodes, running_jobs=[first], carried=carried), config())
    assert carried.states["j1"][1] is state
    moved = RunningJob(j, "n1", 0, 1.0)
    schedule(cycle(QUEUES, nodes, running_jobs=[moved], carried=carried), config())
    assert carried.states["j1"][1] is not state and carried.states["j1"][0] is moved


def slots(state: JobState) -> dict[str, object]:
    return {name: getattr(state, name) for name in JobState.__slots__}


def test_a_state_a_cycle_evicted_is_made_as_new_again_the_next_cycle_and_the_others_untouched() -> None:
    """V's one job is evicted for N's fair share and preempted; given to the next cycle again (N's
    job gone, the same queues active: the state is kept), its state is as made anew; C's gang, never evicted, keeps its states as they were,
    their gang size the members running."""
    nodes = [node("n0", cpu=4, mem=64), node("n1", cpu=4, mem=64)]
    victim = running(job("v1", "V", cpu=4, t=1.0), "n0")
    members = [running(job(f"g{i}", "C", cpu=1, pc="fixed", gang=("g", 3)), "n1") for i in range(2)]
    carried = RunningStates()
    first = cycle(["C", "N", "V"], nodes, [job("n1", "N", cpu=4, t=2.0)], [victim, *members], carried=carried)
    assert [p.job_id for p in schedule(first, config()).preempted] == ["v1"]
    gang_states = [slots(carried.states[run.job.id][1]) for run in members]
    again = cycle(["C", "N", "V"], nodes, (), [victim, *members], now=1.0, carried=carried)
    calm = config(protected_fraction_of_fair_share=1.0)  # evicts nobody, so the states stay as loaded
    assert schedule(again, calm) == schedule(replace(again, carried=None), calm)
    anew = RunningStates()
    schedule(replace(again, carried=anew), calm)
    kept, made = carried.states["v1"][1], anew.states["v1"][1]
    _, _ = kept.order_key, made.order_key
    assert slots(kept) == slots(made)
    assert [slots(carried.states[run.job.id][1]) for run in members] == gang_states
    assert {carried.states[run.job.id][1].gang_size for run in members} == {2}
