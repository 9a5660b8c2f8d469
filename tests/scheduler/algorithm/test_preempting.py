"""Each scheduling rule on small hand-built cycles."""

from dataclasses import replace

from streams.scheduler.algorithm import reasons
from streams.scheduler.algorithm.model import (
    LimiterState,
    NodeAllocation,
    NodeSelectorRequirement,
    Queue,
    RateLimit,
    Taint,
    TokenBucket,
)
from streams.scheduler.algorithm.preempting import schedule
from tests.kit.quantities import CPU, GI
from tests.scheduler.algorithm.builders import config, cycle, job, node, running, tolerate


def placed(result):
    return {s.job_id: s.node for s in result.scheduled}


def preempted(result):
    return {p.job_id for p in result.preempted}


def unscheduled(result):
    return result.left_queued()


def test_tightest_fit_prefers_the_fullest_node_that_fits():
    nodes = [node("a"), node("b"), node("c")]
    busy = [running(job("r1", cpu=20), "b"), running(job("r2", cpu=30), "c")]
    result = schedule(cycle(["A"], nodes, [job("j", cpu=4, t=1)], busy), config(enable_fairshare_preemption=False))
    assert placed(result) == {"j": "b"}


def test_equal_nodes_are_filled_one_at_a_time_in_id_order():
    jobs = [job(f"j{i}", t=i) for i in range(40)]
    result = schedule(cycle(["A"], [node("b"), node("a")], jobs), config())
    by_node = list(placed(result).values())
    assert by_node.count("a") == 32 and by_node.count("b") == 8


def test_a_node_whose_free_capacity_rounds_below_the_request_at_index_resolution_is_not_found():
    # Armada's node index holds free capacity rounded down to the resolution and looks nodes up from
    # the request: at cpu resolution 17 a 32-cpu node (seen as 17) takes one 16-cpu job, and then
    # (16 free, seen as 0) no second one although it would fit (TestGangScheduler, "jobs of size not
    # a multiple of the resolution blocks scheduling new jobs").
    jobs = [job(f"j{i}", cpu=16, mem=128, t=i) for i in range(4)]
    indexed = (("cpu", 17 * CPU), ("memory", 128 * GI // 1024))
    result = schedule(cycle(["A"], [node("a"), node("b"), node("c")], jobs), config(indexed_resources=indexed))
    assert sorted(placed(result).values()) == ["a", "b", "c"]
    assert set(unscheduled(result)) == {"j3"}


def test_jobs_of_an_over_allocated_node_all_go_back_and_no_new_job_goes_there():
    # Armada: a node whose running jobs exceed its capacity (it shrank, say) takes no new job this
    # cycle, and its evicted jobs always go back, so that a momentary drop in capacity preempts
    # nothing (TestSchedule, "reschedules all jobs onto overallocated node"): 17 x 1 cpu / 16 GiB on
    # a 32-cpu, 256-GiB node (over by 16 GiB of memory), every job evicted for fair share. The new
    # cpu-only job would fit there (15 cpus free, the tighter fit) but goes to the empty node.
    held = [running(job(f"r{i}", cpu=1, mem=16, t=i), "a") for i in range(17)]
    result = schedule(cycle(["A"], [node("a"), node("b")], [job("j", cpu=1, mem=0, t=40)], held), config())
    assert preempted(result) == set()
    assert placed(result) == {"j": "b"}


def test_two_equal_queues_split_the_pool():
    jobs = [job(f"a{i}", "A", t=i) for i in range(32)] + [job(f"b{i}", "B", t=100 + i) for i in range(32)]
    result = schedule(cycle(["A", "B"], [node("n")], jobs), config())
    names = placed(result)
    assert sum(k.startswith("a") for k in names) == 16 and sum(k.startswith("b") for k in names) == 16
    assert all(u.reason == reasons.JOB_DOES_NOT_FIT for u in result.unscheduled)


def test_weights_divide_the_pool_proportionally():
    queues = [Queue("A", weight=1.0), Queue("B", weight=0.5)]
    jobs = [job(f"a{i}", "A", t=i) for i in range(64)] + [job(f"b{i}", "B", t=100 + i) for i in range(64)]
    result = schedule(cycle(queues, [node("n1"), node("n2")], jobs), config())
    names = placed(result)
    assert (sum(k.startswith("a") for k in names), sum(k.startswith("b") for k in names)) == (43, 21)


def test_within_a_queue_class_priority_then_job_priority_then_submit_time():
    jobs = [
        job("late-low", cpu=32, mem=256, t=0),
        job("prio-5", cpu=32, mem=256, t=2, priority=5),
        job("prio-1-late", cpu=32, mem=256, t=3, priority=1),
        job("prio-1", cpu=32, mem=256, t=1, priority=1),
    ]
    result = schedule(cycle(["A"], [node("n")], jobs), config())
    assert list(placed(result)) == ["prio-1"]
    high = schedule(cycle(["A"], [node("n")], jobs + [job("high", pc="mid", cpu=32, mem=256, t=9)]), config())
    assert list(placed(high)) == ["high"]


def test_prefer_large_ordering_tries_the_bigger_job_first_when_both_fit_the_budget():
    jobs = [job(f"a{i}", "A", cpu=16, mem=128, t=i) for i in range(4)] + [job(f"b{i}", "B", t=10 + i) for i in range(4)]
    one = LimiterState()
    cfg = dict(scheduling_rate=RateLimit(1.0, 1))
    assert list(
        placed(schedule(cycle(["A", "B"], [node("n")], jobs, limiters=one), config(enable_prefer_large_job_ordering=True, **cfg)))
    ) == ["a0"]
    assert list(
        placed(schedule(cycle(["A", "B"], [node("n")], jobs, limiters=one), config(enable_prefer_large_job_ordering=False, **cfg)))
    ) == ["b0"]


def test_taints_selectors_and_affinity_restrict_nodes():
    nodes = [node("plain"), node("tainted", taints=(Taint("gpu", "true"),), labels={"gpu": "true"}), node("zoned", labels={"zone": "z1"})]
    jobs = [
        job("intolerant", cpu=32, mem=256, t=0, node_selector={"gpu": "true"}),
        job("tolerant", cpu=32, mem=256, t=0.5, tolerations=(tolerate("gpu"),), node_selector={"gpu": "true"}),
        job("selective", cpu=1, t=1, node_selector={"zone": "z1"}),
        job("affine", cpu=1, t=2, affinity=((NodeSelectorRequirement("zone", "DoesNotExist"),),)),
    ]
    result = schedule(cycle(["A"], nodes, jobs), config())
    assert placed(result) == {"tolerant": "tainted", "selective": "zoned", "affine": "plain"}


def test_unschedulable_nodes_get_no_jobs():
    result = schedule(cycle(["A"], [node("n", unschedulable=True)], [job("j")]), config())
    assert not result.scheduled and unscheduled(result)["j"].reason == reasons.JOB_DOES_NOT_FIT


def test_an_unschedulable_node_no_job_runs_on_is_left_out_of_the_pool_totals():
    # Armada (scheduling_algo.go, populateNodeDb) does not put a cordoned node with no job on it into
    # the node db, "so the resource of the node is not counted for fairshare": the pool's total, of
    # which costs, fair shares and the per-queue and round limits are taken, is the other node's.
    nodes = [node("n"), node("c", unschedulable=True)]
    held = [running(job(f"r{i}", cpu=2, mem=16, t=i), "n") for i in range(8)]
    result = schedule(cycle(["A"], nodes, running_jobs=held), config())
    assert [(s.queue, s.actual_share) for s in result.shares] == [("A", 0.5)]
    assert result.capacity == {"cpu": 32 * CPU, "memory": 256 * GI}  # what the record and metrics show
    jobs = [job(f"j{i}", cpu=3, t=i) for i in range(10)]
    by_round = schedule(cycle(["A"], nodes, jobs), config(maximum_resource_fraction_to_schedule={"cpu": 0.25}))
    assert len(by_round.scheduled) == 3  # 9 cpus over a quarter of 32 stops it: of 64 it would take 6
    by_queue = schedule(cycle([Queue("A", resource_limits={"low": {"cpu": 0.25}})], nodes, jobs), config())
    assert len(by_queue.scheduled) == 2  # 9 cpus would exceed 8


def test_an_unschedulable_node_a_job_runs_on_still_counts_in_the_pool_totals():
    # Armada keeps it in the node db (its jobs may be evicted and go back), so in the total too.
    nodes = [node("n"), node("c", unschedulable=True)]
    held = [running(job(f"r{i}", cpu=2, mem=16, t=i), "n") for i in range(8)] + [running(job("rc", cpu=1, mem=4, t=9), "c")]
    shares = schedule(cycle(["A"], nodes, running_jobs=held), config()).shares
    assert [(s.queue, s.actual_share) for s in shares] == [("A", 17 / 64)]


def stranded(cpu: int, pc: str = "low") -> dict[str, dict[str, dict[str, int]]]:
    """Queue A's jobs on a stale executor's nodes: ``cpu`` cpus of class ``pc``, on no node of the cycle."""
    return {"A": {pc: {"cpu": cpu * CPU, "memory": cpu * 4 * GI}}}


def test_stranded_jobs_count_in_their_queues_cost():
    # Armada counts the jobs of stale executors in their queues' allocation: A, holding the pool's
    # worth of cpus there, lets B take every slot of the cycle's node (without them they share it 2:2).
    jobs = [job(f"{q}{i}", queue=q, cpu=8, t=i) for q in "AB" for i in range(4)]
    result = schedule(cycle(["A", "B"], [node("n")], jobs, stranded=stranded(32)), config())
    assert set(placed(result)) == {"B0", "B1", "B2", "B3"} and not result.preempted
    share = {s.queue: s for s in result.shares}["A"]
    assert share.share_before == 1.0 and share.allocation == {"cpu": 32 * CPU, "memory": 128 * GI}


def test_stranded_jobs_are_part_of_their_queues_demand():
    # A has no queued job, only 8 stranded cpus: its demand (a quarter of the pool) is its adjusted fair share.
    jobs = [job(f"B{i}", queue="B", cpu=8, t=i) for i in range(4)]
    result = schedule(cycle(["A", "B"], [node("n")], jobs, stranded=stranded(8)), config())
    assert {s.queue: s.adjusted_fair_share for s in result.shares} == {"A": 0.25, "B": 0.75}


def test_stranded_jobs_may_put_their_queue_above_its_protected_share_but_only_its_jobs_on_the_nodes_go():
    # A runs 16 cpus on the node, at its fair share; 16 more stranded put it at twice that, so its jobs
    # on the node are evicted and one of them loses its place to B (the stranded ones cannot be evicted).
    held = [running(job(f"a{i}", cpu=8, t=i), "n") for i in range(2)]
    jobs = [job(f"b{i}", queue="B", cpu=8, t=10 + i) for i in range(4)]
    protected = config(protected_fraction_of_fair_share=1.0)
    assert not preempted(schedule(cycle(["A", "B"], [node("n")], jobs, held), protected))
    result = schedule(cycle(["A", "B"], [node("n")], jobs, held, stranded=stranded(16)), protected)
    assert preempted(result) == {"a1"} and set(placed(result)) == {"b0", "b1", "b2"}


def test_stranded_jobs_of_a_class_not_configured_are_left_out_as_their_running_jobs_are():
    jobs = [job(f"B{i}", queue="B", cpu=8, t=i) for i in range(4)]
    result = schedule(cycle(["A", "B"], [node("n")], jobs, stranded=stranded(8, pc="gone")), config())
    assert {s.queue: s.share_before for s in result.shares} == {"A": 0.0, "B": 0.0} and len(result.scheduled) == 4


def test_stranded_jobs_count_against_their_queues_class_limit():
    limited = Queue("A", resource_limits={"low": {"cpu": 0.5}})
    queued = [job("j")]
    assert placed(schedule(cycle([limited], [node("n")], queued, stranded=stranded(17, pc="mid")), config())) == {"j": "n"}
    result = schedule(cycle([limited], [node("n")], queued, stranded=stranded(17)), config())
    assert unscheduled(result)["j"].reason == reasons.QUEUE_CLASS_LIMIT


def test_gang_is_all_or_nothing():
    gang = [job(f"g{i}", cpu=32, mem=256, t=i, gang=("g", 3)) for i in range(3)]
    result = schedule(cycle(["A"], [node("a"), node("b")], gang), config())
    assert not result.scheduled
    assert {u.reason for u in result.unscheduled} == {reasons.GANG_DOES_NOT_FIT}
    result = schedule(cycle(["A"], [node("a"), node("b"), node("c")], gang), config())
    assert set(placed(result).values()) == {"a", "b", "c"}


def test_incomplete_gang_waits_with_a_reason():
    result = schedule(cycle(["A"], [node("a")], [job("g0", gang=("g", 2))]), config())
    assert not result.scheduled
    assert "incomplete" in unscheduled(result)["g0"].reason and not unscheduled(result)["g0"].attempted


def test_gang_uniformity_label_keeps_members_on_one_label_value():
    nodes = [node("a1", cpu=8, labels={"zone": "a"}), node("b1", cpu=8, labels={"zone": "b"}), node("b2", cpu=8, labels={"zone": "b"})]
    gang = [
        job(f"g{i}", cpu=8, mem=8, t=i, gang=("g", 2), annotations={"armadaproject.io/gangNodeUniformityLabel": "zone"}) for i in range(2)
    ]
    assert set(placed(schedule(cycle(["A"], nodes, gang), config())).values()) == {"b1", "b2"}
    unindexed = schedule(cycle(["A"], nodes, gang), config(indexed_node_labels=()))
    assert unscheduled(unindexed)["g0"].reason == reasons.uniformity_not_indexed("zone")


def test_a_gang_without_a_uniformity_label_may_span_clusters():
    """As Armada (TestSchedule, "Schedule gang job over multiple executors"): the pool's nodes are one
    node db, whichever cluster each is in; a uniformity label is what keeps a gang in one."""
    split = [node("x1", cpu=8, executor="x"), node("y1", cpu=8, executor="y")]
    gang = [job(f"g{i}", cpu=8, mem=8, t=i, gang=("g", 2)) for i in range(2)]
    assert set(placed(schedule(cycle(["A"], split, gang), config())).values()) == {"x1", "y1"}
    bigger = [job(f"h{i}", cpu=8, mem=8, t=i, gang=("h", 3)) for i in range(3)]
    result = schedule(cycle(["A"], split, bigger), config())
    assert not result.scheduled and unscheduled(result)["h0"].reason == reasons.GANG_DOES_NOT_FIT


def test_a_uniformity_label_keeps_a_gang_on_nodes_sharing_one_value_across_clusters():
    zone = {"armadaproject.io/gangNodeUniformityLabel": "zone"}
    nodes = [
        node("x1", cpu=8, labels={"zone": "a"}, executor="x"),
        node("y1", cpu=8, labels={"zone": "b"}, executor="y"),
        node("y2", cpu=8, labels={"zone": "c"}, executor="y"),
    ]
    gang = [job(f"g{i}", cpu=8, mem=8, t=i, gang=("g", 2), annotations=zone) for i in range(2)]
    result = schedule(cycle(["A"], nodes, gang), config())
    assert not result.scheduled, "no zone has two nodes"
    nodes.append(node("z1", cpu=8, labels={"zone": "a"}, executor="z"))
    assert set(placed(schedule(cycle(["A"], nodes, gang), config())).values()) == {"x1", "z1"}


def test_fractional_job_priorities_order_jobs_within_a_queue():
    jobs = [job("two", priority=2.0, t=0), job("one-and-a-half", priority=1.5, t=1), job("one", priority=1.0, t=2)]
    result = schedule(cycle(["A"], [node("n", cpu=2)], jobs), config())
    assert set(placed(result)) == {"one", "one-and-a-half"}


def test_a_resource_multiplier_raises_its_share_in_the_cost():
    """A holds a quarter of the gpus, B half of the cpus: counted four times, A's gpus make it the costlier queue."""
    gpu_job = job("a-gpu", "A", cpu=1, mem=1)
    gpu_job = replace(gpu_job, requests={**gpu_job.requests, "nvidia.com/gpu": CPU})
    busy = [running(gpu_job, "n"), running(job("b-cpu", "B", cpu=16, mem=1), "n")]

    def shares(**overrides: object) -> dict[str, float]:
        result = schedule(
            cycle(["A", "B"], [node("n", cpu=32, gpu=4)], [], busy), config(protected_fraction_of_fair_share=1.0, **overrides)
        )
        return {s.queue: s.actual_share for s in result.shares}

    assert shares() == {"A": 0.25, "B": 0.5}
    assert shares(dominant_resource_fairness_multipliers={"nvidia.com/gpu": 4.0}) == {"A": 1.0, "B": 0.5}


def test_urgency_preemption_displaces_only_lower_priority_preemptible_jobs():
    nodes = [node("a"), node("b"), node("c")]
    busy = [
        running(job("low", cpu=32, mem=256), "a"),
        running(job("mid", pc="mid", cpu=32, mem=256), "b"),
        running(job("fixed", pc="fixed", cpu=32, mem=256), "c"),
    ]
    cfg = config(enable_fairshare_preemption=False)
    result = schedule(cycle(["A"], nodes, [job("new", pc="high", cpu=32, mem=256, t=1)], busy), cfg)
    assert placed(result) == {"new": "a"} and preempted(result) == {"low"}
    result = schedule(cycle(["A"], nodes, [job("peer", pc="low", cpu=32, mem=256, t=1)], busy), cfg)
    assert not result.scheduled and not result.preempted


def test_second_pass_does_not_overcommit_a_node():
    # A 4-cpu node holds f0 (A, low, 1 cpu) and f12 (B, high, 3 cpu); every job is evicted for
    # fair share. Queue A's mid jobs s3 and s4 take f0's level by urgency, f12 comes back above
    # them, and the oversubscription pass evicts f0, s3 and s4. The second pass offers f0 first
    # (running jobs lead their queue): it fits, so s3 no longer does, although at its own level
    # it would -- there is no later pass to displace f0. Found by test_no_node_is_over_capacity.
    f0, f12 = job("f0", "A", t=0), job("f12", "B", cpu=3, pc="high", t=12)
    queued = [job(f"s{i}", "A", t=100 + i) for i in range(3)] + [job(f"s{i}", "A", pc="mid", t=100 + i) for i in (3, 4)]
    busy = [running(f0, "n0"), running(f12, "n0")]
    result = schedule(
        cycle(["A", "B", "C"], [node("n0", cpu=4, mem=64)], queued, busy, now=1.0), config(enable_prefer_large_job_ordering=True)
    )
    assert not result.scheduled and not result.preempted
    left = unscheduled(result)
    assert [left[j].reason for j in ("s3", "s4")] == [reasons.JOB_DOES_NOT_FIT] * 2


def test_non_preemptible_job_is_never_displaced_even_by_higher_priority():
    busy = [running(job("fixed", pc="fixed", cpu=32, mem=256), "n")]
    result = schedule(cycle(["A"], [node("n")], [job("urgent", pc="home", cpu=1, t=1)], busy), config())
    assert not result.scheduled and not result.preempted


def test_fair_share_preemption_takes_the_most_recent_jobs_of_the_queue_over_its_share():
    busy = [running(job(f"a{i}", "A", t=i), "n") for i in range(32)]
    result = schedule(cycle(["A", "B"], [node("n")], [job(f"b{i}", "B", t=100 + i) for i in range(32)], busy), config())
    assert preempted(result) == {f"a{i}" for i in range(16, 32)}
    assert len(result.scheduled) == 16


def test_protected_fraction_shields_queues_at_or_below_it():
    busy = [running(job(f"a{i}", "A", t=i), "n") for i in range(16)] + [
        running(job(f"f{i}", "F", pc="fixed", t=50 + i), "n") for i in range(16)
    ]
    new = [job("c0", "C", t=100)]
    shielded = schedule(cycle(["A", "C", "F"], [node("n")], new, busy), config(protected_fraction_of_fair_share=2.0))
    assert not shielded.scheduled and not shielded.preempted
    exposed = schedule(cycle(["A", "C", "F"], [node("n")], new, busy), config(protected_fraction_of_fair_share=1.0))
    assert placed(exposed) == {"c0": "n"} and preempted(exposed) == {"a15"}


def test_evicted_jobs_only_return_to_their_own_node():
    busy = [running(job("a0", "A", cpu=16, mem=16), "x")]
    result = schedule(cycle(["A"], [node("x"), node("y")], [], busy), config())
    assert not result.preempted and not result.scheduled


def test_gang_members_are_preempted_together():
    gang = [running(job(f"g{i}", "G", t=i, gang=("g", 2)), n) for i, n in enumerate(["a", "b"])]
    fillers = [running(job(f"f{i}", "F", pc="fixed", t=10 + i), "a") for i in range(31)]
    result = schedule(
        cycle(["F", "G", "H"], [node("a"), node("b", cpu=1)], [job("h", "H", pc="mid", cpu=1, t=50)], gang + fillers),
        config(enable_fairshare_preemption=False),
    )
    assert preempted(result) == {"g0", "g1"}


def test_away_jobs_run_on_well_known_node_types_at_lower_priority_and_yield_to_home_jobs():
    gpu_node = node("g", cpu=8, gpu=8, taints=(Taint("gpu", "true"),))
    result = schedule(cycle(["A"], [gpu_node], [job("away", pc="away", cpu=8, mem=8)]), config())
    assert [(s.job_id, s.priority) for s in result.scheduled] == [("away", 29000)]
    busy = [running(job("away", pc="away", cpu=8, mem=8), "g", priority=29000)]
    home = job("home", "B", pc="home", cpu=8, mem=8, t=1, tolerations=(tolerate("gpu"),))
    result = schedule(cycle(["A", "B"], [gpu_node], [home], busy), config(enable_fairshare_preemption=False))
    assert placed(result) == {"home": "g"} and preempted(result) == {"away"}


def test_global_rate_limit_persists_between_cycles():
    cfg = config(scheduling_rate=RateLimit(2.0, 4))
    first = schedule(cycle(["A"], [node("n")], [job(f"a{i}", t=i) for i in range(10)], now=0.0), cfg)
    assert len(first.scheduled) == 4 and first.limiters.scheduling == TokenBucket(0.0, 0.0)
    second = schedule(cycle(["A"], [node("n")], [job(f"b{i}", t=i) for i in range(10)], now=1.0, limiters=first.limiters), cfg)
    assert len(second.scheduled) == 2
    never = [u for u in second.unscheduled if not u.attempted]
    assert never and all(reasons.GLOBAL_RATE_LIMIT in u.reason for u in never)


def test_per_queue_rate_limit_stops_only_that_queue():
    cfg = config(per_queue_scheduling_rate=RateLimit(1.0, 2))
    jobs = [job(f"a{i}", "A", t=i) for i in range(5)] + [job(f"b{i}", "B", t=10 + i) for i in range(5)]
    result = schedule(cycle(["A", "B"], [node("n")], jobs), cfg)
    assert sorted(placed(result)) == ["a0", "a1", "b0", "b1"]
    assert set(result.limiters.per_queue) == {"A", "B"}


def test_gang_larger_than_burst_is_never_schedulable():
    gang = [job(f"g{i}", t=i, gang=("g", 3)) for i in range(3)]
    result = schedule(cycle(["A"], [node("n")], gang), config(scheduling_rate=RateLimit(1.0, 2)))
    assert unscheduled(result)["g0"].reason == reasons.GANG_EXCEEDS_GLOBAL_BURST


def test_round_limit_lets_one_gang_overshoot_then_stops():
    jobs = [job(f"j{i}", cpu=3, t=i) for i in range(10)]
    result = schedule(cycle(["A"], [node("n")], jobs), config(maximum_resource_fraction_to_schedule={"cpu": 0.25}))
    assert len(result.scheduled) == 3
    assert not any(u.attempted for u in result.unscheduled)


def test_per_queue_priority_class_limit_counts_the_candidate_gang():
    queue = Queue("A", resource_limits={"low": {"cpu": 0.25}})
    result = schedule(cycle([queue], [node("n")], [job(f"j{i}", cpu=3, t=i) for i in range(5)]), config())
    assert len(result.scheduled) == 2
    assert {u.reason for u in result.unscheduled} == {reasons.QUEUE_CLASS_LIMIT}


def test_cordoned_queue_gets_no_new_jobs():
    result = schedule(cycle([Queue("A", cordoned=True)], [node("n")], [job("j")]), config())
    assert unscheduled(result)["j"].reason == reasons.QUEUE_CORDONED


def test_queue_lookback_limits_jobs_examined():
    jobs = [job(f"big{i}", cpu=64, t=i) for i in range(3)] + [job("small", t=9, node_selector={"x": "y"})]
    result = schedule(cycle(["A"], [node("n")], jobs), config(max_queue_lookback=2))
    assert unscheduled(result)["small"].attempted is False


def test_known_unschedulable_jobs_are_skipped_but_reported():
    jobs = [job(f"big{i}", cpu=64, t=i) for i in range(3)] + [job("small", t=9)]
    result = schedule(cycle(["A"], [node("n")], jobs), config())
    assert placed(result) == {"small": "n"}
    assert all(u.attempted and u.reason == reasons.JOB_DOES_NOT_FIT for u in result.unscheduled)


def test_capacity_held_by_foreign_pods_counts_below_its_priority_only():
    held = node("n", allocated=(NodeAllocation(0, {"cpu": 32 * CPU, "memory": 256 * GI}),))
    assert not schedule(cycle(["A"], [held], [job("low")]), config()).scheduled
    assert placed(schedule(cycle(["A"], [held], [job("mid", pc="mid")]), config())) == {"mid": "n"}


def test_node_eviction_probability_limits_fair_share_eviction_deterministically():
    busy = [running(job(f"a{i}", "A", t=i), f"n{i % 20}") for i in range(40)]
    new = [job(f"b{i}", "B", t=100 + i) for i in range(40)]
    nodes = [node(f"n{i}", cpu=2) for i in range(20)]
    cfg = config(node_eviction_probability=0.2)
    first = schedule(cycle(["A", "B"], nodes, new, busy, seed=7), cfg)
    again = schedule(cycle(["A", "B"], nodes, new, busy, seed=7), cfg)
    everything = schedule(cycle(["A", "B"], nodes, new, busy, seed=7), config())
    assert first == again
    assert 0 < len(first.preempted) < len(everything.preempted)


def test_fair_share_preemption_rate_limit_caps_displacements():
    busy = [running(job(f"a{i}", "A", t=i), "n") for i in range(32)]
    new = [job(f"b{i}", "B", t=100 + i) for i in range(32)]
    result = schedule(cycle(["A", "B"], [node("n")], new, busy), config(fairshare_preemption_rate=RateLimit(5.0, 5)))
    assert (len(result.scheduled), len(result.preempted)) == (5, 5)
    assert result.limiters.fairshare_preemption == TokenBucket(0.0, 0.0)


def test_jobs_a_rolled_back_gang_displaced_can_still_be_preempted_for_fair_share():
    # Queue A's jobs are all evicted. B's gang displaces a3 (alone on n1) and a2, then fails on
    # g2 and is rolled back. c0 fits only where a3 is: it must take a3's place by fair-share
    # preemption, spending the one token, so c1 cannot displace a2 as well. When the rollback
    # left a3 out of the preemption order, c0 got in by urgency uncharged and c1 preempted too.
    nodes = [node("n0", cpu=12, mem=64, labels={"zone": "a"}), node("n1", cpu=4, mem=64, labels={"zone": "b"})]
    busy = [running(job(f"a{i}", "A", cpu=4, t=i), "n0") for i in range(3)] + [running(job("a3", "A", cpu=4, t=3), "n1")]
    gang = [
        job("g0", "B", cpu=4, t=10, gang=("g", 3)),
        job("g1", "B", cpu=4, t=11, gang=("g", 3)),
        job("g2", "B", cpu=4, t=12, gang=("g", 3), node_selector={"zone": "nowhere"}),
    ]
    late = [job("c0", "C", cpu=4, t=20, node_selector={"zone": "b"}), job("c1", "C", cpu=4, t=21, node_selector={"zone": "a"})]
    queues: list[str | Queue] = [Queue("A", 0.1), "B", Queue("C", 0.3)]
    result = schedule(cycle(queues, nodes, gang + late, busy), config(fairshare_preemption_rate=RateLimit(1.0, 1)))
    assert placed(result) == {"c0": "n1"} and preempted(result) == {"a3"}
    assert unscheduled(result)["g0"].reason == reasons.GANG_DOES_NOT_FIT


def test_label_values_tried_and_rolled_back_spend_no_fair_share_preemption_tokens():
    # The gang is tried in zone a, then in zone b (each displacing one evicted job of A), and
    # placed in zone a: one preemption, one token -- not one for every trial as well.
    nodes = [node("n0", cpu=4, mem=64, labels={"zone": "a"}), node("n1", cpu=4, mem=64, labels={"zone": "b"})]
    busy = [running(job("a0", "A", cpu=4, t=0), "n0"), running(job("a1", "A", cpu=4, t=1), "n1")]
    uniform = {"armadaproject.io/gangNodeUniformityLabel": "zone"}
    gang = [job(f"g{i}", "B", cpu=2, t=10 + i, gang=("g", 2), annotations=uniform) for i in range(2)]
    result = schedule(cycle([Queue("A", 0.1), "B"], nodes, gang, busy), config(fairshare_preemption_rate=RateLimit(1.0, 5)))
    assert placed(result) == {"g0": "n0", "g1": "n0"} and preempted(result) == {"a0"}
    assert result.limiters.fairshare_preemption == TokenBucket(4.0, 0.0)


def test_every_job_left_queued_has_a_reason_and_output_is_sorted():
    jobs = [job(f"j{i}", cpu=5, t=i) for i in range(12)]
    result = schedule(cycle(["A"], [node("n")], jobs), config())
    assert all(u.reason for u in result.unscheduled)
    assert set(result.left_queued()) == {f"j{i}" for i in range(6, 12)}
    assert all(list(u.job_ids) == sorted(u.job_ids) for u in result.unscheduled)
