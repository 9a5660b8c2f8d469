"""A log folded in parts, each job's events of a part folded together and what they derive written once
(`streams.agents.job_state.fold_batch`: a job's state, its index row and its scheduler delta once per part,
`REFOLD_PART_MAX_EVENTS` while a restored log is refolded), ends where a fold that writes after every single
event ends: the same job states and specs, the same executor commands with the same ids (less the leases of
runs that ended within the part that leased them: `job_state.ended_lease`), the same events on each job's
page, and a feed that leaves the scheduler the same view of every job at every job-set action.

The logs are hypothesis-made lives of a few jobs interleaved (leases, reports, failures, requeues, cancels,
preemptions, reprioritisations, re-deliveries, refused events, job-set actions), in messages of one to
four events."""

from __future__ import annotations

from collections import Counter
from typing import Any

from faust.types import Message
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from schemas.codec import encode
from streams.agents.job_state import encoded_command, fold_batch
from streams.domain.job_index import Position, row_of
from streams.domain.states import RUN_TERMINAL
from streams.scheduler import feed
from streams.scheduler.fold import apply_sequence, message_rng
from streams.tables.jobs import JobStore, read_sequence
from tests.agents.test_job_state import message, sequence
from tests.kit.jobs import Events
from tests.kit.stores import dict_jobs, settle

Event = tuple[str, dict[str, Any]]
# What a fold of a log ends with: the store, what it forwarded, its commands, each job's events' positions, its outcomes.
Ended = tuple[JobStore, list[feed.Change], list[dict[str, Any]], dict[str, set[Position]], Counter[str]]

RUN_EVENTS = ("pending", "running", "run_succeeded", "run_failed", "returned", "expired", "preempted")
JOB_EVENTS = ("succeeded", "failed", "cancelled", "requeued", "cancel_requested", "preempt_requested", "reprioritised", "job_preempted")


def event_of(ev: Events, choice: str, run: str) -> Event:
    """One event of a job's life; ``run``: its latest run's id (a later run may not exist: refused)."""
    made = {
        "pending": lambda: ev("JobRunPending", run_id=run, node="node-2"),
        "running": lambda: ev("JobRunRunning", run_id=run, node="node-2"),
        "run_succeeded": lambda: ev("JobRunSucceeded", run_id=run),
        "run_failed": lambda: ev.run_failed(run),
        "returned": lambda: ev.run_failed(run, category="lease_returned", exit_code=None),
        "expired": lambda: ev.run_failed(run, category="lease_expired", exit_code=None),
        "preempted": lambda: ev("JobRunPreempted", run_id=run, reason="preempted by a cycle"),
        "succeeded": lambda: ev("JobSucceeded", run_id=run),
        "failed": lambda: ev("JobFailed", run_id=run, reason="Error", message="exit code 1"),
        "cancelled": lambda: ev("JobCancelled", run_id=run, reason="by user"),
        "requeued": lambda: ev("JobRequeued", run_id=run, reason="lease returned"),
        "cancel_requested": lambda: ev("JobCancelRequested", reason="stop it"),
        "preempt_requested": lambda: ev("JobPreemptRequested", reason="make room"),
        "reprioritised": lambda: ev("JobReprioritised", new_priority=float(len(run))),
        "job_preempted": lambda: ev("JobPreempted", run_id=run, reason="preempted"),
    }
    return made[choice]()


@st.composite
def lives(draw: st.DrawFn, job_id: str) -> list[Event]:
    """A job's events in the order it sends them: submitted, then runs leased and reported, job events and
    re-deliveries of earlier events, in any order the strategy picks (many are refused or change nothing)."""
    ev = Events(job_id)
    events, runs = [ev.submitted()], 0
    for _ in range(draw(st.integers(0, 9))):
        kind = draw(st.sampled_from(("lease", "lease", "run", "run", "run", "job", "again")))
        if kind == "lease":
            runs += 1
            events.append(ev.leased(f"{job_id}-run-{runs}", node=f"node-{runs}"))
        elif kind == "again":
            events.append(draw(st.sampled_from(events)))  # at-least-once: a re-delivery
        else:
            choice = draw(st.sampled_from(RUN_EVENTS if kind == "run" else JOB_EVENTS))
            events.append(event_of(ev, choice, f"{job_id}-run-{max(runs, 1)}"))
    return events


def job_set_action(n: int, cancel: bool) -> Event:
    payload = {"reason": "all of them"} if cancel else {"new_priority": float(n)}
    return ("JobCancelRequested" if cancel else "JobReprioritised"), {
        "event_id": f"set-{n}",
        "created": 50_000 + n,
        "job_id": None,
        "payload": payload,
    }


@st.composite
def logs(draw: st.DrawFn) -> list[Message]:
    """The lives of a few jobs interleaved with a job-set action or two, in messages of 1-4 events."""
    queues = [list(reversed(draw(lives(f"job-{n}")))) for n in range(draw(st.integers(1, 5)))]
    merged: list[Event] = []
    while any(queues):
        if draw(st.integers(0, 24)) == 0:
            merged.append(job_set_action(len(merged), draw(st.booleans())))
        merged.append(draw(st.sampled_from([queue for queue in queues if queue])).pop())
    messages: list[Message] = []
    at = 0
    while at < len(merged):
        size = draw(st.integers(1, 4))
        messages.append(message(0, len(messages), encode("event_sequence", sequence(*merged[at : at + size]))))
        at += size
    return messages


def by_action(
    forwarded: list[feed.Change],
) -> list[tuple[dict[str, feed.JobDelta], feed.JobSetAction | feed.ExecutorSettings | None]]:
    """The feed as the scheduler's index takes it: between two actions (on a job set, or an executor's
    settings), each job's last delta (a delta states the whole job), then the action (which acts on the
    jobs the index holds then)."""
    found: list[tuple[dict[str, feed.JobDelta], feed.JobSetAction | feed.ExecutorSettings | None]] = []
    last: dict[str, feed.JobDelta] = {}
    for change in feed_deltas(forwarded):
        if isinstance(change, feed.JobDelta):
            last[change.job_id] = change
        else:
            found.append((last, change))
            last = {}
    return [*found, (last, None)]


def feed_deltas(changes: list[feed.Change]) -> list[feed.JobDelta | feed.JobSetAction | feed.ExecutorSettings]:
    return [feed.job_delta(change) if isinstance(change, dict) else change for change in changes]


def ended(jobs: JobStore, command: dict[str, Any]) -> bool:
    """Whether the command's run ended, as the job's stored state says."""
    job = jobs.get(command["job_id"]) or {"runs": []}
    return any(run["run_id"] == command["run_id"] and run["state"] in RUN_TERMINAL for run in job["runs"])


def fold_each_event(log: list[Message]) -> Ended:
    """Every event folded on its own and its job's state written at once (each message's generator shared by its events)."""
    jobs, changes, commands, pages, outcomes = dict_jobs(), [], [], {}, Counter()  # type: ignore[var-annotated]
    for each in log:
        whole = read_sequence(each.value)
        rng = message_rng(each.topic, each.partition, each.offset)
        for event in whole["events"]:
            folded = apply_sequence(jobs, {**whole, "events": [event]}, rng, each.partition)
            settle(jobs)
            changes += folded.changes
            commands += folded.commands
            outcomes += folded.outcomes
            for job_id in folded.named:
                pages.setdefault(job_id, set()).add((each.partition, each.offset))
    return jobs, changes, commands, pages, outcomes


def fold_in_parts(log: list[Message], part_max: int) -> Ended:
    """The agent's fold: parts of about ``part_max`` job events, each part's jobs written once when it is given."""
    jobs, changes, commands, pages, outcomes = dict_jobs(), [], [], {}, Counter()  # type: ignore[var-annotated]
    for part in fold_batch(jobs, log, part_max):
        settle(jobs)
        # each job forwarded at most once between two job-set actions
        assert len(part.changes) == sum(len(last) + (action is not None) for last, action in by_action(part.changes))
        changes += part.changes
        commands += part.commands
        outcomes += part.outcomes
        for job_id, positions in part.events.items():
            pages.setdefault(job_id, set()).update(positions)
    return jobs, changes, commands, pages, outcomes


@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(log=logs(), part_max=st.integers(1, 60))
def test_a_log_folded_in_parts_ends_where_a_fold_of_each_event_ends(log: list[Message], part_max: int) -> None:
    each_jobs, each_changes, each_commands, each_pages, each_outcomes = fold_each_event(log)
    jobs, changes, commands, pages, outcomes = fold_in_parts(log, part_max)

    assert jobs.table == each_jobs.table  # job states, byte for byte
    assert jobs.specs == each_jobs.specs
    # the same commands with the same ids, in order, but the leases of runs that ended in the part that leased them
    sent = [encoded_command(command) for command in commands]
    dropped = [command for command in each_commands if encoded_command(command) not in sent]
    assert sent == [encoded_command(command) for command in each_commands if command not in dropped]
    assert all(command["kind"] == "lease" and ended(each_jobs, command) for command in dropped)
    assert pages == each_pages
    assert outcomes == each_outcomes
    rows = {job_id: row_of(jobs.get(job_id) or {}, tuple(sorted(pages.get(job_id, ())))) for job_id in jobs.table}
    assert rows == {job_id: row_of(each_jobs.get(job_id) or {}, tuple(sorted(each_pages.get(job_id, ())))) for job_id in each_jobs.table}
    assert by_action(changes) == by_action(each_changes)


def test_a_part_holding_a_jobs_whole_life_writes_its_state_once_forwards_it_once_and_sends_no_lease() -> None:
    """What the parts save: five events of one job, one state written, one delta forwarded, no command."""
    ev = Events("job-1")
    life = [ev.submitted(), ev.leased("run-1"), ev("JobRunPending", run_id="run-1", node="node-1")]
    life += [ev("JobRunRunning", run_id="run-1", node="node-1"), ev("JobSucceeded", run_id="run-1")]
    log = [message(0, n, encode("event_sequence", sequence(event))) for n, event in enumerate(life)]
    jobs = dict_jobs()

    [part] = fold_batch(jobs, log, 10)

    assert [job_id for _, job_id, _ in jobs.encoded()] == ["job-1"]
    [delta] = feed_deltas(part.changes)
    assert isinstance(delta, feed.JobDelta) and (delta.job_id, delta.state) == ("job-1", "succeeded")
    assert part.commands == []  # its executor ran it: the lease would start it again or do nothing
