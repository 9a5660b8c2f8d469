"""Node index transactions: a rollback leaves capacity, holds, indices and jobs as they were."""

import copy

from hypothesis import example, given, settings
from hypothesis import strategies as st

from streams.scheduler.algorithm.model import NodeAllocation
from streams.scheduler.algorithm.nodedb import NO_PREEMPTION, NodeDb, Placement, PoolNodes
from streams.scheduler.algorithm.state import JobState, Shape
from tests.scheduler.algorithm.builders import CLASSES, config, job, node

NAMES = ["cpu", "memory"]


def _state(job_id, cpu, pc="low"):
    j = job(job_id, cpu=cpu, pc=pc)
    shape = Shape(j, CLASSES[pc], (cpu * 1000, 4 * 2**30 * 1000))
    return JobState(j, shape, False, 0.0, None, CLASSES[pc].priority)


def _snapshot(db, states):
    indices = {lvl: (list(index.keys), list(index.key_of)) for lvl, index in db._indices.items()}
    fields = [(js.node, js.sched_priority, js.bound, js.evicted) for js in states]
    return copy.deepcopy(db.alloc), copy.deepcopy(db.held), indices, fields, copy.deepcopy(db.tops)


def test_rollback_restores_every_kind_of_change():
    db = NodeDb(PoolNodes([node("n0", cpu=8), node("n1", cpu=4)]), NAMES, [0, 1, 2, 3], config(), track_held=True)
    low, mid, fresh = _state("low", 2), _state("mid", 3, "mid"), _state("new", 1, "high")
    db.bind(low, Placement(0, 0, NO_PREEMPTION))
    db.bind(mid, Placement(1, 1, NO_PREEMPTION))
    db.evict(low)
    db.evict(mid)
    db.search(0, fresh, bytearray([1, 1]))  # builds the evicted-level index before the transaction
    before = _snapshot(db, [low, mid, fresh])

    db.begin()
    db.bind(low, Placement(0, 0, NO_PREEMPTION))  # put back
    db.unbind_evicted(mid)  # displaced
    db.bind(fresh, Placement(1, 2, NO_PREEMPTION))  # new
    db.search(1, fresh, bytearray([1, 1]))  # an index made mid-transaction must be rolled back too
    assert _snapshot(db, [low, mid, fresh]) != before
    db.rollback()

    after = _snapshot(db, [low, mid, fresh])
    assert after[:2] == before[:2] and after[3:] == before[3:]
    assert after[2][0] == before[2][0]
    fresh_index = db._index(1)
    assert fresh_index.keys == sorted(fresh_index._make(n) for n in range(2))


def test_put_back_in_the_last_pass_leaves_room_for_jobs_in_place_below_it():
    # A 4-cpu node: mid (3 cpu, priority 1) is evicted and low (2 cpu, priority 0) has been bound
    # since. At mid's own level low is displaceable, so mid fits while an oversubscription
    # eviction still follows; in the last pass nothing would displace low, so mid does not fit.
    db = NodeDb(PoolNodes([node("n0", cpu=4)]), NAMES, [0, 1, 2, 3], config(), track_held=False)
    mid, low = _state("mid", 3, "mid"), _state("low", 2)
    db.bind(mid, Placement(0, 1, NO_PREEMPTION))
    db.evict(mid)
    db.bind(low, Placement(0, 0, NO_PREEMPTION))
    assert db.select(mid, {}) == Placement(0, 1, NO_PREEMPTION)
    db.displacement_follows = False
    assert db.select(mid, {}) is None


def test_put_back_in_the_last_pass_may_still_displace_other_pods_below_it():
    # The same 2 cpu held by a pod the scheduler does not manage: Kubernetes preempts it.
    held = NodeAllocation(0, {"cpu": 2000, "memory": 0})
    db = NodeDb(PoolNodes([node("n0", cpu=4, allocated=(held,))]), NAMES, [0, 1, 2, 3], config(), track_held=False)
    mid = _state("mid", 3, "mid")
    db.bind(mid, Placement(0, 1, NO_PREEMPTION))
    db.evict(mid)
    db.displacement_follows = False
    assert db.select(mid, {}) == Placement(0, 1, NO_PREEMPTION)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.integers(1, 8), min_size=1, max_size=6),
    st.lists(st.tuples(st.sampled_from(["place", "evict", "unbind", "rollback"]), st.integers(0, 2), st.integers(0, 30)), max_size=60),
)
# Three 1-cpu jobs: two fill n0, the third goes to n1; the first is taken off n0, which is then the tighter fit again.
@example([2, 8], [("place", 0, 0), ("place", 0, 0), ("place", 0, 0), ("evict", 0, 0), ("unbind", 0, 0), ("place", 0, 0)])
def test_a_placement_at_the_evicted_level_is_the_tightest_fit_a_full_search_finds(cpus, steps):
    """The node db keeps a shape's last fit while only binds of that shape changed it (`NodeDb._last_fit`):
    every placement it makes is still the node a search over the whole level finds, whatever came between."""
    db = NodeDb(PoolNodes([node(f"n{i}", cpu=cpu) for i, cpu in enumerate(cpus)]), NAMES, [0, 1, 2, 3], config(), track_held=False)
    shapes = [_state(f"shape-{i}", cpu).pairs for i, cpu in enumerate((1, 2, 3))]
    placed: list[JobState] = []
    for n, (kind, which, pick) in enumerate(steps):
        if kind == "place":
            js = _state(f"j{n}", (1, 2, 3)[which])
            assert js.pairs == shapes[which]
            expected = db.search(0, js, db.mask(js, (), {}))
            placement = db.select(js, {})
            if expected is not None:
                assert placement is not None and (placement.node, placement.preempted_at) == (expected, NO_PREEMPTION)
                db.bind(js, placement)
                placed.append(js)
        elif kind == "evict" and placed and not placed[pick % len(placed)].evicted:
            db.evict(placed[pick % len(placed)])
        elif kind == "unbind" and placed and placed[pick % len(placed)].evicted and placed[pick % len(placed)].bound:
            db.unbind_evicted(placed[pick % len(placed)])
        elif kind == "rollback":
            db.begin()
            js = _state(f"t{n}", (1, 2, 3)[which])
            placement = db.select(js, {})
            if placement is not None:
                db.bind(js, placement)
            db.rollback()
