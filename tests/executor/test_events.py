"""Run states to Armada run events, and their batching into event sequences."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import pytest

from executor.backend import RunStatus
from executor.events import Change, event_sequences, run_payloads
from schemas.codec import decode, encode
from streams.domain.events import MAX_EVENTS_PER_SEQUENCE


def status(state: str, run_id: str = "run-1", **fields: Any) -> RunStatus:
    base = {"job_id": "job-1", "queue": "q", "job_set_id": "set", "node": "node-3"}
    return RunStatus(run_id=run_id, state=state, **{**base, **fields})


def kinds(state: str, **fields: Any) -> list[str]:
    return [name.rsplit(".", 1)[-1] for name, _ in run_payloads(status(state, **fields))]


def test_each_state_maps_to_its_events() -> None:
    assert kinds("pending") == ["JobRunPending"]
    assert kinds("running") == ["JobRunRunning"]
    assert kinds("succeeded", exit_code=0) == ["JobRunSucceeded", "JobSucceeded"]
    assert kinds("failed", exit_code=3, reason="exit code 3") == ["JobRunFailed", "JobFailed"]
    assert kinds("returned") == ["JobRunFailed"]
    assert kinds("preempted") == ["JobRunPreempted"]
    assert kinds("cancelled") == ["JobRunFailed"]


def test_running_names_the_node_and_success_names_the_run() -> None:
    assert run_payloads(status("running")) == [("flotilla.JobRunRunning", {"run_id": "run-1", "node": "node-3"})]
    assert run_payloads(status("succeeded"))[1] == ("flotilla.JobSucceeded", {"run_id": "run-1"})


def test_a_failed_container_fails_the_job_with_its_exit_code() -> None:
    run_failed, job_failed = run_payloads(status("failed", exit_code=3, reason="exit code 3", message="exit code 3; last output: boom"))
    assert run_failed == (
        "flotilla.JobRunFailed",
        {
            "run_id": "run-1",
            "reason": "exit code 3",
            "message": "exit code 3; last output: boom",
            "exit_code": 3,
            "category": "container_error",
            "retryable": False,
        },
    )
    assert job_failed == ("flotilla.JobFailed", {"reason": "exit code 3", "message": "exit code 3; last output: boom", "exit_code": 3})


@pytest.mark.parametrize("reason", ["deadline_exceeded", "DeadlineExceeded"])
def test_a_deadline_kill_is_its_own_category(reason: str) -> None:
    (_, run_failed), _ = run_payloads(status("failed", exit_code=143, reason=reason))
    assert run_failed["category"] == "deadline_exceeded"
    assert run_failed["retryable"] is False


def test_a_returned_lease_is_retryable_and_leaves_the_job_to_the_control_plane() -> None:
    [(name, payload)] = run_payloads(status("returned", reason="unknown_node", message="node x is not ours"))
    assert name == "flotilla.JobRunFailed"
    assert payload["category"] == "lease_returned"
    assert payload["retryable"] is True
    assert payload["reason"] == "unknown_node"


def test_cancelled_and_preempted_runs() -> None:
    [(_, cancelled)] = run_payloads(status("cancelled", exit_code=143, reason="cancelled"))
    assert (cancelled["category"], cancelled["retryable"], cancelled["reason"]) == ("cancelled", False, "cancelled")
    [(name, preempted)] = run_payloads(status("preempted", reason="preempted"))
    assert name == "flotilla.JobRunPreempted"
    assert preempted == {"run_id": "run-1", "reason": "preempted", "preemptor_job_id": None}


def test_an_unknown_state_is_an_error() -> None:
    with pytest.raises(ValueError, match="unknown run state"):
        run_payloads(status("exploded"))


def _ids() -> Callable[[int], str]:
    counter = itertools.count()
    return lambda ms: f"01HZ{ms:013d}{next(counter):09d}"


def test_changes_are_grouped_per_job_set_in_order_and_encode_valid_avro() -> None:
    changes = [
        Change(status("pending", run_id="r1"), 1000),
        Change(status("pending", run_id="r2", job_set_id="other"), 1001),
        Change(status("running", run_id="r1"), 1002),
        Change(status("succeeded", run_id="r1", exit_code=0), 1003),
    ]
    sequences = event_sequences(changes, "exec-1", _ids())
    assert [key for key, _ in sequences] == ["q/set", "q/other"]
    key, first = sequences[0]
    decoded = decode("event_sequence", encode("event_sequence", first))  # validated against the schema
    assert decoded["user"] == "executor:exec-1"
    assert decoded["groups"] == []
    assert [e["payload"][0].rsplit(".", 1)[-1] for e in decoded["events"]] == [
        "JobRunPending",
        "JobRunRunning",
        "JobRunSucceeded",
        "JobSucceeded",
    ]
    assert [e["created"] for e in decoded["events"]] == [1000, 1002, 1003, 1003]
    assert all(e["job_id"] == "job-1" for e in decoded["events"])
    assert len({e["event_id"] for e in decoded["events"]}) == 4


def test_every_run_state_encodes() -> None:
    states = ["pending", "running", "succeeded", "failed", "returned", "preempted", "cancelled"]
    changes = [Change(status(state, run_id=f"r-{state}", exit_code=1 if state == "failed" else None), 5) for state in states]
    [(_, sequence)] = event_sequences(changes, "exec-1", _ids())
    assert len(decode("event_sequence", encode("event_sequence", sequence))["events"]) == 9


def test_a_large_burst_is_split_into_bounded_sequences() -> None:
    changes = [Change(status("pending", run_id=f"r{i}"), 7) for i in range(MAX_EVENTS_PER_SEQUENCE + 1)]
    sequences = event_sequences(changes, "exec-1", _ids())
    assert [len(s["events"]) for _, s in sequences] == [MAX_EVENTS_PER_SEQUENCE, 1]
    assert {key for key, _ in sequences} == {"q/set"}
