import copy
from collections.abc import Callable
from typing import Any

import pytest

from streams.domain.jobs import RECENT_EVENT_IDS, apply_event
from streams.domain.states import TransitionRefused
from streams.domain.views import job_view
from tests.kit.jobs import ENVELOPE, Events, fold


@pytest.fixture
def ev() -> Events:
    return Events()


def running(ev: Events, run_id: str = "r1") -> list[tuple[str, dict[str, Any]]]:
    return [ev.submitted(), ev.leased(run_id), ev("JobRunPending", run_id=run_id), ev("JobRunRunning", run_id=run_id, node=None)]


def run_states(job: dict[str, Any]) -> list[tuple[str, str]]:
    return [(run["run_id"], run["state"]) for run in job["runs"]]


def test_submitted_creates_a_queued_job(ev: Events) -> None:
    kind, event = ev.submitted()
    job = apply_event(None, kind, event, ENVELOPE)
    assert job is not None
    assert job["job_id"] == "job-1" and job["queue"] == "team-a" and job["job_set_id"] == "set-1"
    assert job["state"] == "queued" and job["runs"] == [] and job["reason"] is None
    assert job["submitted"] == job["last_transition"] == 1000
    assert job["priority_class"] == "armada-default" and job["spec"] == event["payload"]
    # The job shares the payload (a fresh decode per event) instead of copying it: no handler writes into a spec.
    assert job["spec"] is event["payload"]
    assert job["recent_event_ids"] == ["job-1-e001"]


def test_namespaced_kinds_and_tagged_payloads_accepted(ev: Events) -> None:
    kind, event = ev.submitted()
    event = {**event, "payload": ("flotilla.JobSubmitted", event["payload"])}
    job = apply_event(None, "flotilla." + kind, event, ENVELOPE)
    assert job is not None
    assert job["state"] == "queued" and job["spec"]["priority_class"] == "armada-default"


def test_event_for_unknown_job_returns_none(ev: Events) -> None:
    ev.submitted()
    assert apply_event(None, *ev.leased("r1"), ENVELOPE) is None


def test_unknown_kind_refused(ev: Events) -> None:
    job = fold([ev.submitted()])
    with pytest.raises(TransitionRefused, match="unknown event kind 'JobExploded'"):
        apply_event(job, *ev("JobExploded"), ENVELOPE)


def test_lifecycle_to_succeeded(ev: Events) -> None:
    job = fold(running(ev, "r1"))
    assert job["state"] == "running" and run_states(job) == [("r1", "running")]
    assert job["runs"][0]["started_at"] == 4000 and job["runs"][0]["node"] == "node-1"
    assert job["runs"][0]["pool"] == "default", "the run keeps the pool it was leased in"
    job = fold([ev("JobRunSucceeded", run_id="r1")], job)
    assert job["state"] == "running" and run_states(job) == [("r1", "succeeded")]
    job = fold([ev("JobSucceeded", run_id="r1")], job)
    assert job["state"] == "succeeded" and job["last_transition"] == 6000
    assert job["runs"][0]["finished_at"] == 5000


def test_executor_may_skip_pending_and_report_node(ev: Events) -> None:
    job = fold([ev.submitted(), ev.leased("r1", node="n1"), ev("JobRunRunning", run_id="r1", node="n2")])
    assert job["state"] == "running" and job["runs"][0]["node"] == "n2"


def test_lifecycle_to_failed(ev: Events) -> None:
    job = fold(running(ev) + [ev.run_failed("r1", exit_code=137), ev("JobFailed", reason="Error", message="OOMKilled", exit_code=137)])
    assert job["state"] == "failed" and job["reason"] == "Error: OOMKilled"
    assert run_states(job) == [("r1", "failed")] and job["runs"][0]["exit_code"] == 137


def test_job_failed_closes_an_active_run(ev: Events) -> None:
    job = fold(running(ev) + [ev("JobFailed", reason="max runs exceeded", message="", exit_code=None)])
    assert job["state"] == "failed" and run_states(job) == [("r1", "failed")] and job["reason"] == "max runs exceeded"


def test_cancel_requested_then_cancelled(ev: Events) -> None:
    job = fold(running(ev) + [ev("JobCancelRequested", reason="user asked")])
    assert job["cancel_requested"] and job["state"] == "running" and job["reason"] == "user asked"
    job = fold([ev("JobCancelled", run_id="r1", reason="cancelled on request")], job)
    assert job["state"] == "cancelled" and run_states(job) == [("r1", "cancelled")]
    assert job["reason"] == "cancelled on request: user asked"


def test_a_cancel_without_a_reason_leaves_no_earlier_reason_behind(ev: Events) -> None:
    job = fold(running(ev) + [ev("JobCancelRequested", reason=""), ev("JobCancelled", run_id="r1", reason="cancelled on request")])
    assert job["reason"] == "cancelled on request"


def test_a_preempt_request_for_a_queued_job_is_dropped_and_remembered(ev: Events) -> None:
    job = fold([ev.submitted()])
    request = ev("JobPreemptRequested", reason="too early")
    job = fold([request], job)
    assert not job["preempt_requested"] and job["state"] == "queued" and job["reason"] is None
    job = fold([ev.leased("r1")], job)
    assert apply_event(job, *request, ENVELOPE) is job  # a re-delivery does not preempt the leased job
    assert not job["preempt_requested"]


def test_queued_job_cancelled(ev: Events) -> None:
    job = fold([ev.submitted(), ev("JobCancelled", run_id=None, reason="by user")])
    assert job["state"] == "cancelled" and job["runs"] == []


def test_preemption(ev: Events) -> None:
    job = fold(running(ev) + [ev("JobPreemptRequested", reason="manual")])
    assert job["preempt_requested"] and job["state"] == "running"
    job = fold([ev("JobRunPreempted", run_id="r1", reason="preempted by job-2", preemptor_job_id="job-2")], job)
    assert run_states(job) == [("r1", "preempted")] and job["reason"] == "preempted by job-2"
    job = fold([ev("JobPreempted", run_id="r1", reason="preempted by job-2")], job)
    assert job["state"] == "preempted"


def test_requeued_and_leased_again(ev: Events) -> None:
    job = fold(
        running(ev)
        + [
            ev.run_failed("r1", category="lease_returned", exit_code=None),
            ev("JobRequeued", run_id="r1", reason="lease returned", avoid_nodes=["node-1"]),
        ]
    )
    assert job["state"] == "queued" and run_states(job) == [("r1", "lease_returned")]
    job = fold([ev.leased("r2", node="node-2"), ev("JobRunRunning", run_id="r2", node=None), ev("JobSucceeded", run_id="r2")], job)
    assert job["state"] == "succeeded" and run_states(job) == [("r1", "lease_returned"), ("r2", "succeeded")]
    assert job["reason"] is None  # the returned run's reason explained the requeue, not the success
    assert job["runs"][0]["reason"] == "Error: exit code 1"  # the run keeps its own


def test_the_reason_is_the_current_states(ev: Events) -> None:
    job = fold(
        running(ev) + [ev.run_failed("r1", category="lease_returned", exit_code=None), ev("JobRequeued", run_id="r1", reason="taken back")]
    )
    assert job["reason"] == "taken back"
    job = fold([ev.leased("r2", node="node-2")], job)
    assert job["state"] == "leased" and job["reason"] is None
    job = fold([ev("JobCancelRequested", reason="user asked"), ev("JobSucceeded", run_id="r2")], job)
    assert job["state"] == "succeeded" and job["reason"] is None


def test_requeue_without_run_report_returns_the_lease(ev: Events) -> None:
    job = fold([ev.submitted(), ev.leased("r1"), ev("JobRequeued", run_id="r1", reason="executor lost", avoid_nodes=[])])
    assert job["state"] == "queued" and run_states(job) == [("r1", "lease_returned")]


@pytest.mark.parametrize(
    ("category", "state"),
    [("lease_expired", "lease_expired"), ("preempted", "preempted"), ("cancelled", "cancelled"), ("deadline_exceeded", "failed")],
)
def test_run_failure_category_names_the_run_state(ev: Events, category: str, state: str) -> None:
    job = fold(running(ev) + [ev.run_failed("r1", category=category)])
    assert run_states(job) == [("r1", state)] and job["reason"] == "Error: exit code 1"


def test_run_failure_without_run_only_records_the_reason(ev: Events) -> None:
    job = fold([ev.submitted(), ev.run_failed(None, category="gang_unschedulable")])
    assert job["state"] == "queued" and job["reason"] == "Error: exit code 1"


def test_reprioritised(ev: Events) -> None:
    job = fold([ev.submitted(), ev("JobReprioritised", new_priority=7.0)])
    assert job["priority"] == 7.0 and job["spec"]["priority"] == 0.0 and job["last_transition"] == 1000


def test_terminal_job_ignores_further_events(ev: Events) -> None:
    job = fold([ev.submitted(), ev("JobCancelled", run_id=None, reason="x")])
    for kind, event in (ev.leased("r1"), ev("JobReprioritised", new_priority=3.0), ev("JobFailed", reason="y", message="", exit_code=None)):
        assert apply_event(job, kind, event, ENVELOPE) is job


def test_stale_reports_about_an_old_run_change_nothing(ev: Events) -> None:
    job = fold([ev.submitted(), ev.leased("r1"), ev("JobRequeued", run_id="r1", reason="lost", avoid_nodes=[]), ev.leased("r2")])
    for kind, event in (
        ev("JobRunRunning", run_id="r1", node=None),
        ev("JobRequeued", run_id="r1", reason="lost", avoid_nodes=[]),
        ev("JobRunPending", run_id="r1"),
    ):
        assert apply_event(job, kind, event, ENVELOPE) is job


@pytest.mark.parametrize(
    ("tail", "message"),
    [
        (lambda ev: ev("JobSucceeded", run_id=None), "job job-1: cannot go from queued to succeeded"),
        (lambda ev: ev("JobPreempted", run_id=None, reason="x"), "job job-1: cannot go from queued to preempted"),
        (lambda ev: ev("JobRunRunning", run_id="r9", node=None), "job job-1: no run r9"),
    ],
)
def test_contradictions_are_refused_and_leave_the_job_unchanged(
    ev: Events, tail: Callable[[Events], tuple[str, dict[str, Any]]], message: str
) -> None:
    job = fold([ev.submitted()])
    before = copy.deepcopy(job)
    with pytest.raises(TransitionRefused, match=message):
        apply_event(job, *tail(ev), ENVELOPE)
    assert job == before


def test_second_lease_while_active_refused(ev: Events) -> None:
    job = fold([ev.submitted(), ev.leased("r1")])
    with pytest.raises(TransitionRefused, match="job job-1: new run r2 leased while leased"):
        apply_event(job, *ev.leased("r2"), ENVELOPE)


def test_contradictory_run_ending_refused(ev: Events) -> None:
    job = fold(running(ev) + [ev("JobRunSucceeded", run_id="r1")])
    with pytest.raises(TransitionRefused, match="run r1: cannot go from succeeded to failed"):
        apply_event(job, *ev.run_failed("r1"), ENVELOPE)


def test_input_is_never_mutated(ev: Events) -> None:
    events = running(ev) + [ev.run_failed("r1"), ev("JobFailed", reason="x", message="", exit_code=1)]
    job = None
    for kind, event in events:
        before = copy.deepcopy(job)
        new = apply_event(job, kind, event, ENVELOPE)
        assert job == before
        assert new is not job
        job = new


def test_recent_event_ids_bounded(ev: Events) -> None:
    job = fold([ev.submitted()] + [ev("JobReprioritised", new_priority=float(p)) for p in range(1, 40)])
    assert len(job["recent_event_ids"]) == RECENT_EVENT_IDS
    assert job["recent_event_ids"][-1] == "job-1-e040" and job["recent_event_ids"][0] == "job-1-e009"


def test_same_event_twice_returns_the_same_object(ev: Events) -> None:
    submitted, leased = ev.submitted(), ev.leased("r1")
    job = fold([submitted, leased])
    assert apply_event(job, *leased, ENVELOPE) is job
    assert apply_event(job, *submitted, ENVELOPE) is job


def test_job_view(ev: Events) -> None:
    job = fold(running(ev) + [ev.run_failed("r1", exit_code=2), ev("JobFailed", reason="Error", message="bad", exit_code=2)])
    assert job_view(job) == {
        "job_id": "job-1",
        "queue": "team-a",
        "job_set": "set-1",
        "client_id": None,
        "state": "failed",
        "priority": 0.0,
        "priority_class": "armada-default",
        "submitted": 1000,
        "last_transition": 6000,
        "cancel_requested": False,
        "preempt_requested": False,
        "reason": "Error: bad",
        "runs": [
            {
                "run_id": "r1",
                "executor": "cluster-1",
                "node": "node-1",
                "state": "failed",
                "exit_code": 2,
                "reason": "Error: exit code 1",
                "leased_at": 2000,
                "started_at": 4000,
                "finished_at": 5000,
            }
        ],
    }


def test_reprioritisation_to_the_current_value_is_remembered(ev: Events) -> None:
    same = ev("JobReprioritised", new_priority=0.0)
    job = fold([ev.submitted(), same, ev("JobReprioritised", new_priority=4.0)])
    assert "job-1-e002" in job["recent_event_ids"]
    assert apply_event(job, *same, ENVELOPE) is job
