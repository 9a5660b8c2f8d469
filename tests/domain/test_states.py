import pytest

from streams.domain.states import (
    ACTIVE,
    JOB_STATE_ORDER,
    JOB_STATES,
    JOB_TERMINAL,
    JOB_TRANSITIONS,
    RUN_STATES,
    RUN_TERMINAL,
    RUN_TRANSITIONS,
    UNFINISHED,
    TransitionRefused,
    job_transition,
    run_transition,
)

JOB_ALLOWED = sorted((a, b) for a, targets in JOB_TRANSITIONS.items() for b in targets)
RUN_ALLOWED = sorted((a, b) for a, targets in RUN_TRANSITIONS.items() for b in targets)


def test_the_order_shown_names_every_job_state_once_progress_first():
    assert sorted(JOB_STATE_ORDER) == sorted(JOB_STATES)
    assert UNFINISHED == ("queued", "leased", "pending", "running") and set(UNFINISHED) == {"queued"} | ACTIVE
    assert set(JOB_STATE_ORDER[len(UNFINISHED) :]) == JOB_TERMINAL


def test_tables_cover_exactly_the_documented_states():
    assert set(JOB_TRANSITIONS) == JOB_STATES == {"queued", "leased", "pending", "running", "succeeded", "failed", "cancelled", "preempted"}
    assert (
        set(RUN_TRANSITIONS)
        == RUN_STATES
        == {"leased", "pending", "running", "succeeded", "failed", "preempted", "cancelled", "lease_expired", "lease_returned"}
    )
    assert all(not JOB_TRANSITIONS[s] for s in JOB_TERMINAL)
    assert all(not RUN_TRANSITIONS[s] for s in RUN_TERMINAL)


def test_job_table_is_the_agreed_one():
    assert JOB_ALLOWED == sorted(
        [("queued", t) for t in ("leased", "cancelled", "failed")]
        + [(s, t) for s in ("leased", "pending", "running") for t in ("queued", "succeeded", "failed", "cancelled", "preempted")]
        + [("leased", "pending"), ("leased", "running"), ("pending", "running")]
    )


@pytest.mark.parametrize(("current", "target"), JOB_ALLOWED)
def test_every_allowed_job_transition_moves(current, target):
    assert job_transition("j", current, target) is True


@pytest.mark.parametrize(("current", "target"), RUN_ALLOWED)
def test_every_allowed_run_transition_moves(current, target):
    assert run_transition("r", current, target) is True


@pytest.mark.parametrize("state", sorted(JOB_STATES))
def test_job_restating_its_state_is_a_no_op(state):
    assert job_transition("j", state, state) is False


@pytest.mark.parametrize(("current", "target"), [("pending", "leased"), ("running", "leased"), ("running", "pending")])
def test_job_report_of_a_passed_state_is_a_no_op(current, target):
    assert job_transition("j", current, target) is False


@pytest.mark.parametrize(
    ("current", "target"),
    [
        ("queued", "succeeded"),
        ("queued", "preempted"),
        ("queued", "running"),
        ("succeeded", "failed"),
        ("cancelled", "queued"),
        ("failed", "leased"),
        ("preempted", "running"),
    ],
)
def test_forbidden_job_transitions_are_refused(current, target):
    with pytest.raises(TransitionRefused, match=f"job j: cannot go from {current} to {target}"):
        job_transition("j", current, target)


@pytest.mark.parametrize(
    ("current", "target"),
    [("running", "pending"), ("running", "leased"), ("succeeded", "running"), ("lease_returned", "pending"), ("failed", "failed")],
)
def test_run_report_of_a_passed_state_is_a_no_op(current, target):
    assert run_transition("r", current, target) is False


@pytest.mark.parametrize(
    ("current", "target"),
    [("succeeded", "failed"), ("failed", "succeeded"), ("lease_returned", "preempted"), ("cancelled", "succeeded")],
)
def test_contradictory_run_endings_are_refused(current, target):
    with pytest.raises(TransitionRefused, match=f"run r: cannot go from {current} to {target}"):
        run_transition("r", current, target)
