"""What the job-state fold forwards: feed deltas to the scheduler and commands to executors."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from hypothesis import given, settings

from schemas import codec
from streams.domain.jobs import apply_event
from streams.domain.states import ACTIVE
from streams.scheduler.commands import executor_command
from streams.scheduler.feed import Changes, JobDelta, JobSetAction, changed, decode, encode, encode_changes, feed_change, job_delta
from tests.domain.test_idempotency import accepted_sequence, actions
from tests.kit.jobs import ENVELOPE, Events, fold


def steps(*events: tuple[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """The job's state after each event (the first submits it)."""
    states: list[dict[str, Any]] = []
    job = None
    for event in events:
        job = fold([event], job)
        states.append(job)
    return states


def test_submission_is_forwarded_and_commands_nothing() -> None:
    ev = Events("job-1")
    [submitted] = steps(ev.submitted())
    assert feed_change(None, submitted) == job_delta(submitted)
    assert executor_command(None, submitted, "c1", 5) is None


def test_a_new_lease_forwards_a_delta_and_commands_a_lease_with_spec_and_node() -> None:
    ev = Events("job-1")
    queued, leased = steps(ev.submitted(), ev.leased("run-1", node="node-3"))

    delta = feed_change(queued, leased)
    assert delta is not None
    assert (delta.state, delta.runs, delta.run_id, delta.executor, delta.node) == ("leased", 1, "run-1", "cluster-1", "node-3")

    command = executor_command(queued, leased, "cmd-1", 2_500)
    assert command is not None
    assert command["kind"] == "lease"
    assert (command["command_id"], command["executor"], command["job_id"], command["run_id"]) == ("cmd-1", "cluster-1", "job-1", "run-1")
    assert (command["queue"], command["job_set_id"], command["node"], command["created"]) == ("team-a", "set-1", "node-3", 2_500)
    assert command["spec"] == leased["spec"] and command["spec"]["pod_spec"]["containers"]
    assert command["grace_period_seconds"] >= 1
    raw = codec.encode("executor_command", command)
    assert codec.decode("executor_command", raw)["spec"]["pod_spec"] == leased["spec"]["pod_spec"]


def test_run_progress_is_not_forwarded_nor_commanded() -> None:
    ev = Events("job-1")
    _, leased, pending, running = steps(
        ev.submitted(),
        ev.leased("run-1"),
        ev("JobRunPending", run_id="run-1", node="node-1"),
        ev("JobRunRunning", run_id="run-1", node="node-1"),
    )
    assert running["state"] == "running"
    assert feed_change(leased, pending) is None
    assert feed_change(pending, running) is None
    assert feed_change(leased, running) is None
    assert executor_command(leased, pending, "c", 1) is None
    assert executor_command(pending, running, "c", 1) is None


def test_a_run_moved_to_another_node_is_forwarded() -> None:
    ev = Events("job-1")
    _, leased, pending = steps(ev.submitted(), ev.leased("run-1", node="node-1"), ev("JobRunPending", run_id="run-1", node="node-2"))
    delta = feed_change(leased, pending)
    assert delta is not None and delta.node == "node-2"


def test_cancelling_a_running_job_cancels_its_run_on_its_executor() -> None:
    ev = Events("job-1")
    *_, running, cancelled = steps(
        ev.submitted(),
        ev.leased("run-1", node="node-1"),
        ev("JobRunRunning", run_id="run-1", node="node-1"),
        ev("JobCancelled", run_id="run-1", reason="user asked"),
    )
    delta = feed_change(running, cancelled)
    assert delta is not None and delta.terminal
    command = executor_command(running, cancelled, "cmd-9", 9_000)
    assert command is not None
    assert (command["kind"], command["executor"], command["run_id"], command["job_id"]) == ("cancel_run", "cluster-1", "run-1", "job-1")
    assert command["spec"] is None and command["reason"] == "user asked"
    codec.encode("executor_command", command)


def test_preempting_a_running_job_preempts_its_run() -> None:
    ev = Events("job-1")
    *_, running, preempted = steps(
        ev.submitted(),
        ev.leased("run-1"),
        ev("JobRunRunning", run_id="run-1", node="node-1"),
        ev("JobPreempted", run_id="run-1", reason="fair share"),
    )
    command = executor_command(running, preempted, "cmd-2", 1)
    assert command is not None
    assert (command["kind"], command["executor"], command["run_id"]) == ("preempt_run", "cluster-1", "run-1")
    codec.encode("executor_command", command)


def test_cancelling_a_queued_job_commands_nothing() -> None:
    ev = Events("job-1")
    queued, cancelled = steps(ev.submitted(), ev("JobCancelled", run_id=None, reason="x"))
    assert feed_change(queued, cancelled) is not None
    assert executor_command(queued, cancelled, "c", 1) is None


def test_a_requeue_after_a_returned_run_commands_nothing_and_forwards_the_queued_job() -> None:
    ev = Events("job-1")
    *_, returned, requeued = steps(
        ev.submitted(),
        ev.leased("run-1"),
        ev.run_failed("run-1", category="lease_returned", exit_code=None),
        ev("JobRequeued", run_id="run-1", reason="returned", avoid_nodes=["cluster-1/node-1"]),
    )
    delta = feed_change(returned, requeued)
    assert delta is not None and delta.state == "queued" and delta.avoid_nodes == ("cluster-1/node-1",)
    assert executor_command(returned, requeued, "c", 1) is None


def test_a_replayed_event_yields_nothing() -> None:
    ev = Events("job-1")
    cancel = ev("JobCancelled", run_id="run-1", reason="x")
    *_, running, cancelled = steps(ev.submitted(), ev.leased("run-1"), ev("JobRunRunning", run_id="run-1", node="node-1"), cancel)
    again = fold([cancel], cancelled)
    assert again is cancelled
    assert feed_change(cancelled, again) is None
    assert executor_command(cancelled, again, "c", 1) is None
    # an equal but distinct state (e.g. read back from the table) is not a change either
    copy = {**running, "runs": [dict(r) for r in running["runs"]]}
    assert feed_change(running, copy) is None
    assert executor_command(running, copy, "c", 1) is None


def _significant(delta: JobDelta) -> JobDelta:
    """A delta as the scheduler compares it: a leased, pending or running run and its job are all "active"."""
    if delta.run_state not in ACTIVE:
        return delta
    return replace(delta, run_state="active", state="active" if delta.state in ACTIVE else delta.state)


@settings(max_examples=300, deadline=None)
@given(actions)
def test_a_change_is_forwarded_exactly_when_the_scheduler_would_see_a_different_job(steps: list[Any]) -> None:
    """`changed` compares a cheap view of the job; it must agree with comparing the deltas themselves."""
    history = accepted_sequence(steps)
    job = apply_event(None, *history[0], ENVELOPE)
    assert job is not None
    for kind, event in history[1:]:
        after = apply_event(job, kind, event, ENVELOPE)
        assert after is not None
        assert changed(job, after) == (_significant(job_delta(job)) != _significant(job_delta(after))), (kind, job, after)
        job = after


@settings(max_examples=200, deadline=None)
@given(actions)
def test_the_folds_feed_record_is_what_encoding_the_deltas_writes(steps: list[Any]) -> None:
    """`encode_changes` writes each job straight as its row: byte for byte the deltas' record."""
    history = accepted_sequence(steps)
    job = apply_event(None, *history[0], ENVELOPE)
    assert job is not None
    changes: list[Any] = [job]
    for number, (kind, event) in enumerate(history[1:]):
        job = apply_event(job, kind, event, ENVELOPE)
        assert job is not None
        changes.append(job if number % 3 else JobSetAction("team-a", "set-1", "cancel", reason="r", event_id=f"e{number}", time=number))
    deltas = tuple(job_delta(c) if isinstance(c, dict) else c for c in changes)
    assert encode_changes(changes) == encode(Changes(deltas))
    assert decode(encode_changes(changes)) == Changes(deltas)
