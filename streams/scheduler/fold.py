"""The job-state fold of one event sequence, and what the fold forwards.

Folding `events` into job states is what the job-state agent does for the `jobs` table, what a
restore refolds, and what the replay commands (`flotilla rebuild`, `--at` reads) repeat from the
log alone: one function, `apply_sequence`, serves all of them. Beside each job's new state it
returns what the change means downstream: a job delta or job-set action for `scheduler-feed`
(`streams.scheduler.feed`) and a command for `executor-commands` (`streams.scheduler.commands`).

The store is anything with the jobs table's `latest` and `put` (`streams.tables.jobs.JobStore`
over the Faust table, a dict or a RocksDB database); the fold imports no table code.
"""

from __future__ import annotations

import logging
import random
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Protocol

from streams.domain.executor_settings import SETTINGS_KIND
from streams.domain.ids import RANDOM_BITS, ulid
from streams.domain.jobs import apply_event, event_kind
from streams.domain.states import TransitionRefused
from streams.scheduler import feed
from streams.scheduler.commands import executor_command
from streams.scheduler.feed import Changes

log = logging.getLogger(__name__)

# Deltas per feed record: about 300 bytes each, so a record stays far below the message size limit.
MAX_CHANGES_PER_RECORD = 2_000


class JobsStore(Protocol):
    def latest(self, job_id: str) -> dict[str, Any] | None:
        """The job as the fold left it, or None when it was never submitted."""
        ...

    def put(self, job: dict[str, Any], partition: int) -> None:
        """Keep the job's new state."""
        ...


# What the fold forwards to the scheduler, as the feed carries it.
Forwarded = feed.JobDelta | feed.JobSetAction | feed.ExecutorSettings


def deltas(changes: list[feed.Change]) -> list[Forwarded]:
    """The changes as the feed carries them: each changed job as its delta."""
    return [feed.job_delta(change) if isinstance(change, dict) else change for change in changes]


@dataclass
class Folded:
    """A fold of one sequence or a batch: how many events were applied, unchanged, refused...; what to
    forward (``changes``: each job whose scheduling view changed, as the change left it, and each
    job-set action; `feed` gives them as deltas) and the executor commands; and which known jobs it
    has events of (applied or not) and whether it has job-set requests (the job index keeps where
    each job's events are, for its page)."""

    outcomes: Counter[str] = field(default_factory=Counter)
    changes: list[feed.Change] = field(default_factory=list)
    named: dict[str, None] = field(default_factory=dict)
    requests: bool = False
    commands: list[dict[str, Any]] = field(default_factory=list)

    @property
    def feed(self) -> list[Forwarded]:
        return deltas(self.changes)


def apply_sequence(
    jobs: JobsStore,
    sequence: dict[str, Any],
    rng: random.Random,
    partition: int = 0,
    *,
    forward: bool = True,
    views: feed.Views | None = None,
) -> Folded:
    """Fold every job event of the sequence, read from ``partition``. ``rng`` (seeded from the
    message's position) makes command ids the same when a message is folded again after a crash:
    each applied event draws one id's random bits from it, whether it makes a command or not.
    Without ``forward``, only the job states are folded: no job's change for the scheduler and no
    command is worked out (a refold of the log for the recovery drill or a ``--at`` read sends none).
    ``views``: the jobs' scheduling views as their last change left them, kept across the sequences of a
    part (`feed.changed`)."""
    folded = Folded()
    outcomes, named, changes, commands = folded.outcomes, folded.named, folded.changes, folded.commands
    latest, put = jobs.latest, jobs.put  # looked up once: this loop runs for every event of the log
    applied = 0
    envelope = {key: sequence[key] for key in ("queue", "job_set_id", "user", "groups")}
    for event in sequence["events"]:
        job_id = event["job_id"]
        if job_id is None:  # a job-set action, an executor's settings, or a cycle record (which describes decisions only)
            settings = executor_settings(envelope, event)
            if settings is not None:
                changes.append(settings)
                outcomes["executor_settings"] += 1
                continue
            action = job_set_action(envelope, event)
            if action is not None:
                folded.requests = True
                changes.append(action)
                outcomes["job_set_action"] += 1
            continue
        kind = event["payload"][0]
        before = latest(job_id)
        try:
            after = apply_event(before, kind, event, envelope)
        except TransitionRefused as exc:
            named[job_id] = None
            outcomes["refused"] += 1
            log.warning("event %s (%s) refused for job %s: %s", event["event_id"], kind, job_id, exc, extra=_about(envelope, job_id))
            continue
        if after is None:
            outcomes["unknown_job"] += 1
            log.warning("event %s (%s) for unknown job %s ignored", event["event_id"], kind, job_id, extra=_about(envelope, job_id))
            continue
        named[job_id] = None
        if after is before:
            outcomes["unchanged"] += 1
            continue
        put(after, partition)
        applied += 1
        if not forward:
            continue
        if feed.changed(before, after, views):
            changes.append(after)
        bits = rng.getrandbits(RANDOM_BITS)
        command = executor_command(before, after, "", event["created"])
        if command is not None:
            command["command_id"] = ulid(event["created"], bits)  # a new dict: its id set in place, not copied
            commands.append(command)
    if applied:
        outcomes["applied"] += applied
    return folded


def message_rng(topic: str, partition: int, offset: int) -> random.Random:
    """The generator a message's fold draws command ids from: seeded from its place on the log, so a
    message folded again (after a crash, or by a replay) gives its commands the same ids."""
    return random.Random(f"{topic}/{partition}/{offset}")


def feed_records(forwarded: list[Forwarded]) -> list[Changes]:
    """The deltas and actions in order, as `Changes` records of at most `MAX_CHANGES_PER_RECORD`."""
    return [Changes(tuple(forwarded[start : start + MAX_CHANGES_PER_RECORD])) for start in range(0, len(forwarded), MAX_CHANGES_PER_RECORD)]


def _about(envelope: dict[str, Any], job_id: str) -> dict[str, str]:
    """The fields of a JSON log line (`streams.logs`) about a job."""
    return {"job_id": job_id, "queue": envelope["queue"], "job_set": envelope["job_set_id"]}


def executor_settings(envelope: dict[str, Any], event: dict[str, Any]) -> feed.ExecutorSettings | None:
    """An administrator's setting of an executor's cordon (`streams.domain.executor_settings`), for the scheduler."""
    kind, payload = event["payload"]
    if event_kind(kind) != SETTINGS_KIND:
        return None
    return feed.ExecutorSettings(
        executor=payload["executor"],
        cordoned=payload["cordoned"],
        reason=payload["cordon_reason"],
        user=envelope["user"],
        time=event["created"],
        event_id=event["event_id"],
    )


def job_set_action(envelope: dict[str, Any], event: dict[str, Any]) -> feed.JobSetAction | None:
    """An event without a job id asks something of every unfinished job of the job set."""
    kind, payload = event["payload"]
    common = {"queue": envelope["queue"], "job_set_id": envelope["job_set_id"], "event_id": event["event_id"], "time": event["created"]}
    if event_kind(kind) == "JobCancelRequested":
        return feed.JobSetAction(action="cancel", reason=payload.get("reason") or "", **common)
    if event_kind(kind) == "JobReprioritised":
        return feed.JobSetAction(action="reprioritise", new_priority=payload["new_priority"], **common)
    return None
