"""Scheduler-feed records: the JSON round trip, the scheduling view of a folded job, and garbage."""

from __future__ import annotations

import json
import math
from dataclasses import FrozenInstanceError, replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streams.domain.shared import shared
from streams.domain.validation import SubmitPolicy, validate_item
from streams.scheduler import feed
from streams.scheduler.feed import (
    Changes,
    Committed,
    Configuration,
    ExecutorSettings,
    ExecutorState,
    Heartbeat,
    JobDelta,
    JobSetAction,
    NodeState,
    QueueInfo,
    Tick,
    job_delta,
)
from tests.kit.jobs import Events, container, fold, item

# -- round trip ------------------------------------------------------------------------------

text = st.text(max_size=8)
names = st.text("abcxyz-/.0123456789", min_size=1, max_size=8)
amounts = st.dictionaries(names, st.integers(0, 2**62), max_size=3)
labels = st.dictionaries(names, text, max_size=3)
floats = st.floats(allow_nan=False, allow_infinity=False)
maybe_text = st.none() | text
toleration = st.fixed_dictionaries(
    {}, optional={"key": text, "operator": st.sampled_from(["Equal", "Exists"]), "value": text, "effect": text}
)
expression = st.fixed_dictionaries(
    {"key": names, "operator": st.sampled_from(["In", "NotIn", "Exists"]), "values": st.lists(text, max_size=2)}
)

job_deltas = st.builds(
    JobDelta,
    job_id=names,
    queue=names,
    job_set_id=names,
    state=st.sampled_from(["queued", "leased", "pending", "running", "succeeded"]),
    priority_class=names,
    priority=floats,
    submitted=st.integers(0, 2**48),
    requests=amounts,
    node_selector=labels,
    tolerations=st.lists(toleration, max_size=2).map(tuple),
    affinity=st.lists(st.lists(expression, max_size=2).map(tuple), max_size=2).map(tuple),
    gang=labels,
    runs=st.integers(0, 100),
    run_id=maybe_text,
    executor=maybe_text,
    node=maybe_text,
    run_state=st.none() | st.sampled_from(["leased", "running", "lease_returned", "lease_expired"]),
    leased_at=st.none() | st.integers(0, 2**48),
    avoid_nodes=st.lists(names, max_size=3).map(tuple),
    returned_runs=st.integers(0, 10),
    cancel_requested=st.booleans(),
    preempt_requested=st.booleans(),
    grace_period_s=st.integers(0, 3600),
)
nodes = st.builds(
    NodeState,
    name=names,
    resources=amounts,
    labels=labels,
    taints=st.lists(st.fixed_dictionaries({"key": names, "value": text, "effect": text}), max_size=2).map(tuple),
    unschedulable=st.booleans(),
    used=amounts,
)
executor_states = st.builds(
    ExecutorState,
    executor=names,
    pool=names,
    time=st.integers(0, 2**48),
    nodes=st.lists(nodes, max_size=3).map(tuple),
    runs=st.dictionaries(names, names, max_size=4),
    active=st.lists(names, max_size=4).map(tuple),
)
job_set_actions = st.builds(
    JobSetAction,
    queue=names,
    job_set_id=names,
    action=st.sampled_from(["cancel", "reprioritise"]),
    reason=text,
    new_priority=st.none() | floats,
    event_id=names,
    time=st.integers(0, 2**48),
)
limits = st.dictionaries(
    names, st.fixed_dictionaries({"maximum_resource_fraction": st.dictionaries(names, floats, max_size=2)}), max_size=2
)
ticks = st.builds(
    Tick,
    time=st.integers(0, 2**48),
    queues=st.lists(st.builds(QueueInfo, name=names, weight=floats, cordoned=st.booleans(), resource_limits=limits), max_size=3).map(tuple),
    owner=st.text("0123456789abcdef", max_size=32),
)
executor_settings = st.builds(
    ExecutorSettings, executor=names, cordoned=st.booleans(), reason=text, user=names, time=st.integers(0, 2**48), event_id=names
)
changes = st.builds(Changes, records=st.lists(job_deltas | job_set_actions | executor_settings, max_size=3).map(tuple))
heartbeats = st.builds(Heartbeat, executor=names, time=st.integers(0, 2**48))
messages = st.lists(st.tuples(st.binary(max_size=40), st.binary(max_size=200)), max_size=5).map(tuple)
committed = st.builds(Committed, tick=st.integers(0, 2**48), cycle_id=names, events=messages, commands=messages)
configurations = st.builds(
    Configuration,
    hash=st.text("0123456789abcdef", min_size=16, max_size=16),
    resolved=st.dictionaries(names, st.integers() | names | st.lists(floats, max_size=3), max_size=4),
)
records = st.one_of(job_deltas, executor_states, heartbeats, job_set_actions, executor_settings, changes, ticks, committed, configurations)


@settings(max_examples=150, deadline=None)
@given(records)
def test_every_record_kind_survives_the_round_trip(record: feed.FeedRecord) -> None:
    raw = feed.encode(record)
    back = feed.decode(raw)
    assert type(back) is type(record)
    assert back == record
    assert feed.encode(back) == raw


def test_each_kind_is_tagged_in_the_json() -> None:
    kinds = {
        json.loads(feed.encode(record))["k"]
        for record in (
            JobDelta("j", "q", "s", "queued", "pc", 0.0, 1, {}),
            ExecutorState("e", "p", 1),
            Heartbeat("e", 2),
            JobSetAction("q", "s", "cancel"),
            ExecutorSettings("e", True, "why"),
            Changes((JobSetAction("q", "s", "cancel"),)),
            Tick(1),
        )
    }
    assert kinds == {"job", "executor", "heartbeat", "job_set", "executor_settings", "changes", "tick"}


@pytest.mark.parametrize("cut", [1, 5, 30, -1])
def test_a_committed_cycle_cut_short_is_refused(cut: int) -> None:
    raw = feed.encode(Committed(7, "01CYCLE", events=((b"q/s", b"x" * 20),), commands=((b"ex", b"y"),)))
    with pytest.raises(ValueError):
        feed.decode(raw[:cut])


def test_changes_keep_their_records_in_order() -> None:
    first, second = JobDelta("j1", "q", "s", "queued", "pc", 0.0, 1, {"cpu": 1}), JobSetAction("q", "s", "cancel", reason="r")
    third = replace(first, state="leased", runs=1, run_id="r1")
    back = feed.decode(feed.encode(Changes((first, second, third))))
    assert back == Changes((first, second, third))


def test_a_batch_forwards_each_jobs_last_change_between_job_set_actions() -> None:
    queued: dict[str, Any] = {"job_id": "j1", "state": "queued"}
    leased = {**queued, "state": "leased"}
    other = {**queued, "job_id": "j2"}
    cancel = JobSetAction("q", "s", "cancel", reason="r")
    ended = {**leased, "state": "cancelled"}
    assert feed.latest_changes([queued, other, leased]) == [other, leased]
    # A job-set action sees the job as the changes before it left it: none moves across it.
    assert feed.latest_changes([queued, leased, cancel, other, ended]) == [leased, cancel, other, ended]
    assert feed.latest_changes([]) == []


# -- job_delta ---------------------------------------------------------------------------------

GANG = {"armadaproject.io/gangId": "g-1", "armadaproject.io/gangCardinality": "2", "armadaproject.io/gangNodeUniformityLabel": "zone"}


def realistic_job() -> tuple[dict, Events]:
    ev = Events("job-7")
    spec = item(
        annotations={**GANG, "team": "ml", "armadaproject.io/failFast": "true"},
        pod_spec__containers=[container("a", cpu="500m", memory="1Gi"), container("b", cpu="1.5", memory="512Mi")],
        pod_spec__init_containers=[container("init", cpu="3", memory="100Mi")],
        pod_spec__tolerations=[{"key": "gpu", "operator": "Equal", "value": "true", "effect": "NoSchedule", "toleration_seconds": 30}],
        pod_spec__affinity={
            "node_affinity": {
                "required": [
                    {"match_expressions": [{"key": "zone", "operator": "In", "values": ["a", "b"]}, {"key": "ssd", "operator": "Exists"}]},
                    {"match_expressions": [{"key": "arch", "operator": "NotIn", "values": ["arm"]}]},
                ]
            }
        },
        pod_spec__node_selector={"pool": "batch"},
        pod_spec__termination_grace_period_seconds=7,
        priority=3.0,
    )
    payload, reason = validate_item(spec, SubmitPolicy())
    assert reason is None
    job = fold(
        [
            ev.submitted(payload),
            ev.leased("run-1", node="node-1"),
            ev.run_failed("run-1", category="lease_returned"),
            ev("JobRequeued", run_id="run-1", reason="returned", avoid_nodes=[]),
            ev.leased("run-2", node="node-2"),
            ev.run_failed("run-2", category="lease_expired"),
            ev("JobRequeued", run_id="run-2", reason="expired", avoid_nodes=[]),
            ev.leased("run-3", node="node-3"),
            ev("JobRunRunning", run_id="run-3", node="node-3"),
        ]
    )
    assert job is not None
    return job, ev


def test_job_delta_of_a_folded_job() -> None:
    job, _ = realistic_job()
    d = job_delta(job)

    assert (d.job_id, d.queue, d.job_set_id, d.state, d.priority_class, d.priority) == (
        "job-7",
        "team-a",
        "set-1",
        "running",
        "armada-default",
        3.0,
    )
    assert d.submitted == 1_000
    # containers summed (0.5 + 1.5 cpu), raised to the larger init container (3 cpu); memory 1Gi + 512Mi
    assert d.requests == {"cpu": 3_000, "memory": (2**30 + 2**29) * 1000}
    assert d.node_selector == {"pool": "batch"}
    assert d.tolerations == ({"key": "gpu", "operator": "Equal", "value": "true", "effect": "NoSchedule"},)
    assert d.affinity == (
        ({"key": "zone", "operator": "In", "values": ["a", "b"]}, {"key": "ssd", "operator": "Exists", "values": []}),
        ({"key": "arch", "operator": "NotIn", "values": ["arm"]},),
    )
    assert d.gang == GANG  # gang annotations only: not "team", not failFast
    # latest run
    assert (d.runs, d.run_id, d.executor, d.node, d.run_state, d.leased_at) == (3, "run-3", "cluster-1", "node-3", "running", 8_000)
    # node-1's run was returned by its executor and is avoided; node-2's lease merely expired
    assert d.avoid_nodes == ("cluster-1/node-1",)
    assert d.returned_runs == 2
    assert d.grace_period_s == 7
    assert not d.cancel_requested and not d.preempt_requested
    assert d.run_active and not d.run_returned and not d.terminal


def test_job_delta_of_a_job_never_leased_and_flags() -> None:
    ev = Events("job-8")
    job = fold([ev.submitted(), ev("JobCancelRequested", reason="x"), ev("JobPreemptRequested", reason="y")])
    d = job_delta(job)
    assert (d.runs, d.run_id, d.executor, d.node, d.run_state, d.leased_at) == (0, None, None, None, None, None)
    assert d.avoid_nodes == () and d.returned_runs == 0 and d.gang == {}
    assert d.requests == {"cpu": 1_000, "memory": 2**30 * 1000}
    assert d.cancel_requested and not d.preempt_requested  # nothing to preempt yet: dropped
    assert not d.run_active and not d.run_returned


def test_a_returned_run_of_an_unfinished_job_waits_to_be_requeued() -> None:
    ev = Events("job-9")
    job = fold([ev.submitted(), ev.leased("run-1", node="node-4"), ev.run_failed("run-1", category="lease_returned")])
    d = job_delta(job)
    assert d.state == "leased" and d.run_state == "lease_returned"
    assert d.run_returned and not d.run_active
    assert d.avoid_nodes == ("cluster-1/node-4",) and d.returned_runs == 1


def test_job_delta_survives_the_round_trip() -> None:
    job, _ = realistic_job()
    d = job_delta(job)
    assert feed.decode(feed.encode(d)) == d


def test_a_decoded_job_delta_is_a_whole_frozen_job_delta() -> None:
    """Rows are read into deltas without JobDelta's __init__ (feed._make_delta, streams.domain.frozen): the result must
    still compare, print, copy and refuse changes as one made by it."""
    job, _ = realistic_job()
    d = job_delta(job)
    back = feed.decode(feed.encode(d))
    assert type(back) is feed.JobDelta
    assert back == d and repr(back) == repr(d)
    assert replace(back, runs=back.runs + 1) == replace(d, runs=d.runs + 1)
    with pytest.raises(FrozenInstanceError):
        back.runs = 3  # type: ignore[misc]


def test_an_updated_job_delta_is_what_replace_makes() -> None:
    """feed.updated stands for dataclasses.replace on the cycle's hot path: same fields, still frozen."""
    job, _ = realistic_job()
    d = job_delta(job)
    changes: dict[str, Any] = {
        "state": "leased",
        "runs": d.runs + 1,
        "run_id": "r1",
        "executor": "e",
        "node": "n",
        "leased_at": 5,
        "cancel_requested": True,
    }
    made = feed.updated(d, **changes)
    assert made == replace(d, **changes) and repr(made) == repr(replace(d, **changes))
    assert feed.updated(d) == d and d.state != "leased"
    with pytest.raises(FrozenInstanceError):
        made.runs = 3  # type: ignore[misc]


def test_queue_info_weight_is_the_inverse_priority_factor() -> None:
    queue = {"name": "q", "priority_factor": 4.0, "cordoned": True, "resource_limits_by_priority_class_name": {}}
    assert feed.queue_info(queue) == QueueInfo("q", 0.25, True, {})


# -- garbage -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "raw",
    [
        b"",
        b"\xff\xfe\x00garbage",
        b"not json",
        b"[1, 2]",
        b"42",
        b"null",
        b"{}",
        b'{"k": "spaceship"}',
        b'{"k": "job", "job_id": "j"}',
        b'{"k": "job", "job_id": "j", "unknown_field": 1}',
        b'{"k": "executor", "executor": "e", "pool": "p", "time": 1, "nodes": [1]}',
        b'{"k": "executor", "executor": "e", "pool": "p", "time": 1, "nodes": [{"name": "n"}]}',
        b'{"k": "tick"}',
        b'{"k": "tick", "time": 1, "queues": [{"name": "q"}]}',
        b'{"k": "job_set", "queue": "q"}',
        b'{"k": "heartbeat", "executor": "e"}',
        b'{"k": "heartbeat", "executor": "e", "time": 1, "nodes": []}',
        b'{"k": "changes"}',
        b'{"k": "changes", "records": 3}',
        b'{"k": "changes", "records": [1]}',
        b'{"k": "changes", "records": [{"k": "tick", "time": 1}]}',
        b'{"k": "changes", "records": [{"k": "heartbeat", "executor": "e", "time": 1}]}',
        b'{"k": "changes", "records": [{"k": "changes", "records": []}]}',
        b'{"k": "changes", "records": [{"k": "job", "job_id": "j"}]}',
    ],
)
def test_decode_rejects_garbage_with_value_error(raw: bytes) -> None:
    with pytest.raises(ValueError):
        feed.decode(raw)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | floats | text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(text, inner, max_size=3),
    max_leaves=10,
)


@settings(max_examples=200, deadline=None)
@given(
    st.one_of(
        st.binary(max_size=40),
        json_values.map(lambda v: json.dumps(v).encode()),
        st.dictionaries(
            st.sampled_from(["k", "time", "queues", "nodes", "job_id", "executor", "pool", "queue", "records"]),
            st.sampled_from(["job", "executor", "heartbeat", "job_set", "changes", "tick"]) | json_values,
            max_size=5,
        ).map(lambda v: json.dumps(v).encode()),
    )
)
def test_decode_raises_nothing_but_value_error(raw: bytes) -> None:
    try:
        record = feed.decode(raw)
    except ValueError:
        return
    assert isinstance(record, (JobDelta, ExecutorState, Heartbeat, JobSetAction, Changes, Tick))


def test_a_delta_read_from_a_row_is_written_back_as_that_row_and_a_changed_shape_afresh() -> None:
    row = feed.delta_row(JobDelta("j1", "q", "s", "queued", "pc", 0.0, 1, {"cpu": 1_000}, node_selector={"zone": "a"}))
    read = feed.delta_from_row(json.loads(json.dumps(row)))
    assert feed.delta_row(read) == row
    assert feed.delta_row(replace(read, state="leased"))[-1] == row[-1]  # the text remembered for its shape
    bigger = replace(read, requests={"cpu": 2_000})
    assert feed.delta_from_row(json.loads(json.dumps(feed.delta_row(bigger)))) == bigger


quantity = st.sampled_from(["1", "2", "500m", "1Gi", 1, 1.0, 2])
requests = st.dictionaries(st.sampled_from(["cpu", "memory", "nvidia.com/gpu"]), quantity, max_size=3)
containers = st.lists(requests.map(lambda r: {"resources": {"requests": r, "limits": r}}), max_size=2)
specs = st.builds(
    lambda main, init, selector, grace, annotations, tolerations, affinity: {
        "annotations": annotations,
        "pod_spec": {
            "containers": main,
            "init_containers": init,
            "node_selector": selector,
            "termination_grace_period_seconds": grace,
            "tolerations": tolerations,
            "affinity": affinity,
        },
    },
    containers,
    containers,
    st.dictionaries(st.sampled_from(["zone", "disk"]), st.sampled_from(["a", "b"]), max_size=2),
    st.sampled_from([None, 0, 1, 30, 30.0]),
    st.dictionaries(
        st.sampled_from(["armadaproject.io/gangId", "armadaproject.io/gangCardinality", "armadaproject.io/failFast", "team"]),
        st.sampled_from(["true", "g1", "2", "x"]),
        max_size=3,
    ),
    st.sampled_from([[], [{"key": "gpu", "operator": "Exists", "value": None, "effect": None, "toleration_seconds": None}]]),
    st.sampled_from(
        [
            None,
            {"node_affinity": None},
            {"node_affinity": {"required": [{"match_expressions": [{"key": "z", "operator": "In", "values": ["a"]}]}]}},
        ]
    ),
)


@settings(max_examples=300)
@given(st.lists(specs, min_size=1, max_size=6))
def test_a_shapes_text_remembered_for_its_parts_is_the_text_of_its_fields(batch: list[dict[str, Any]]) -> None:
    """`shape_text` answers from what it remembers for specs made of the same parts: always the text made afresh."""
    for spec in batch + batch:
        assert feed.shape_text(spec) == feed.compact_json(tuple(feed.spec_fields(spec).values()))


@given(job_deltas)
def test_a_delta_made_again_from_its_part_is_the_delta_and_is_written_as_the_same_row(delta: JobDelta) -> None:
    again = feed.delta_of(delta.job_id, delta.submitted, *feed.part_of(delta))
    assert again == delta and type(again) is JobDelta
    assert feed.compact_json(feed.delta_row(again)) == feed.compact_json(feed.delta_row(delta))


def test_jobs_of_one_queue_job_set_and_shape_share_one_part_and_values_of_another_type_do_not() -> None:
    first = feed.delta_from_row(feed.job_row(_queued_job("j1", priority=1.0)))
    second = feed.delta_from_row(feed.job_row(_queued_job("j2", priority=1.0)))
    assert feed.part_of(first) is feed.part_of(second)
    as_int = replace(first, priority=1)
    assert feed.part_of(as_int) is not feed.part_of(first)
    made = feed.delta_of("j3", 5, *feed.part_of(as_int))
    assert type(made.priority) is int and type(feed.delta_row(made)[5]) is int


def test_rows_share_one_object_per_priority_and_keep_zero_s_sign() -> None:
    """A row's priority is read as `shared` gives it (a float keyed by its exact text)."""
    read = [_read_back(_queued_job(f"j{i}", priority=p)) for i, p in enumerate((0.0, -0.0, 0.0, -0.0, 2.5, 2.5))]
    priorities = [d.priority for d in read]
    assert [math.copysign(1.0, p) for p in priorities[:4]] == [1.0, -1.0, 1.0, -1.0]
    assert priorities[0] is priorities[2] and priorities[1] is priorities[3] and priorities[4] is priorities[5]
    assert priorities[4] is shared(2.5)


def _read_back(job: dict[str, Any]) -> JobDelta:
    return feed.delta_from_row(json.loads(feed.compact_json(feed.job_row(job))))


def _queued_job(job_id: str, priority: float) -> dict[str, Any]:
    return {
        "job_id": job_id,
        "queue": "q",
        "job_set_id": "s",
        "state": "queued",
        "priority_class": "armada-default",
        "priority": priority,
        "submitted": 1_000,
        "runs": [],
        "cancel_requested": False,
        "preempt_requested": False,
        "spec": {"pod_spec": {"containers": [{"resources": {"requests": {"cpu": "1"}}}]}},
    }
