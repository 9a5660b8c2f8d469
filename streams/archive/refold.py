"""After a restore: no scheduling until the log is refolded and the executors holding runs have reported again.

`flotilla up` re-produces the archive into an empty broker and the worker refolds every table from
`events`. A cycle run on a half-folded index would take a job whose lease is still further down the
log for queued and lease it again; one run before an executor reported would expire every lease it
holds. So the worker arms this gate with the offsets the fold must reach (the archive's ends), the
job-state agent tells it what each batch folded, the executor-report agent whom it heard from,
and the scheduler's timer ticks only once `may_schedule`: the fold has caught up and every
executor that holds an active run (as the folded deltas say) has reported since, or
`executor_grace_s` passed since the fold caught up (then their leases expire as usual and the
jobs are retried under their retry policy).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from streams.domain.states import ACTIVE, JOB_TERMINAL
from streams.scheduler import feed

log = logging.getLogger(__name__)


@dataclass
class RefoldGate:
    clock: Callable[[], float] = time.monotonic
    armed: bool = False
    targets: dict[int, int] = field(default_factory=dict)  # events partition -> the offset the fold must reach
    folded: dict[int, int] = field(default_factory=dict)  # events partition -> next offset folded
    # How long after the refold executors holding runs may take to report again. Short, not the
    # configured lease expiry (an hour by Armada's defaults): it only holds back scheduling.
    executor_grace_s: float = 10.0
    caught_up_at: float | None = None
    active: dict[str, str] = field(default_factory=dict)  # job id -> executor of its active run
    heard: set[str] = field(default_factory=set)

    def arm(self, targets: Mapping[int, int]) -> None:
        self.targets = {p: offset for p, offset in targets.items() if offset > 0}
        self.armed = bool(self.targets)
        if self.armed:
            log.info("refolding %d restored events before scheduling", self.total)

    @property
    def total(self) -> int:
        return sum(self.targets.values())

    @property
    def done(self) -> int:
        return sum(min(self.folded.get(p, 0), target) for p, target in self.targets.items())

    @property
    def caught_up(self) -> bool:
        return not self.armed or self.done >= self.total

    def progress(self) -> dict[str, int]:
        return {"folded": self.done, "total": self.total}

    def folded_batch(self, messages: Iterable[Any], forwarded: Iterable[feed.Change]) -> None:
        """A batch of `events` messages folded and its outputs acknowledged; ``forwarded``: the changes it
        sent the scheduler (each changed job as the batch left it, see `streams.scheduler.feed.Change`)."""
        if self.armed:
            self.folded_part(messages, active_runs(forwarded))

    def folded_part(self, messages: Iterable[Any], active: Iterable[tuple[str, str | None]]) -> None:
        """As `folded_batch`, with what the changes say of runs (`active_runs`): worked out where they were folded."""
        if not self.armed:
            return
        for message in messages:
            if message.offset + 1 > self.folded.get(message.partition, 0):
                self.folded[message.partition] = message.offset + 1
        for job_id, executor in active:
            if executor:
                self.active[job_id] = executor
            else:
                self.active.pop(job_id, None)
        if self.caught_up_at is None and self.caught_up:
            self.caught_up_at = self.clock()
            log.info("refolded %d events; %d runs were active, on executors %s", self.total, len(self.active), self.waiting_for() or "-")

    def heard_from(self, executors: Iterable[str]) -> None:
        """Executors whose full state reached the scheduler feed (acknowledged)."""
        if self.armed:
            self.heard.update(executors)

    def waiting_for(self) -> list[str]:
        return sorted(set(self.active.values()) - self.heard)

    def may_schedule(self) -> bool:
        if not self.armed:
            return True
        if self.caught_up_at is None:
            return False
        missing = self.waiting_for()
        if missing and self.clock() - self.caught_up_at < self.executor_grace_s:
            return False
        if missing:
            log.warning("executors %s did not report within %g s of the refold: leases expire", ", ".join(missing), self.executor_grace_s)
        log.info("log refolded: scheduling resumes")
        self.armed = False
        self.active.clear()
        return True


def active_runs(forwarded: Iterable[feed.Change]) -> list[tuple[str, str | None]]:
    """(job id, executor of its active run, or None once it has none or the job ended) of each job change forwarded, in order."""
    found: list[tuple[str, str | None]] = []
    for change in forwarded:
        if isinstance(change, dict):
            runs = change["runs"]
            executor = runs[-1]["executor"] if runs and runs[-1]["state"] in ACTIVE else None
            found.append((change["job_id"], executor if executor and change["state"] not in JOB_TERMINAL else None))
    return found
