"""Leases an executor refuses at once, whatever its backend: those that cannot be right.

A run id names one run of one job: the executor, the pod and every report hang on it. So a lease
naming a run id this executor already holds for another job cannot be launched (the backend
would take it for a replay of the first and stay silent), and a job whose end this executor has
already reported cannot be run again. Left to the backend, such a lease was ignored, and the
control plane found out only when its lease check gave up on the run more than a minute later.

A refusal is reported at once as the lease returned: a run that never started, which Armada's
executor reports the same way. That is a ``JobRunFailed`` of category ``lease_returned``,
retryable, its reason naming the refusal. The control plane's fold takes it as the run's end
(``lease_returned``), and the scheduler requeues the job, avoiding this node, until
``max_attempts`` runs came back, then fails it. A job whose end was reported is terminal in the
fold by then (its end was produced earlier on the same partition), so there the refusal is a
no-op; should the fold not have taken that end, the lease-returned rules still bound what
follows. A category naming no returned run (``executor_error``, say) would strand the job: the
fold marks such a run ``failed`` without ending the job, and the scheduler neither requeues nor
fails a job in that state. ``lease_expired`` is the scheduler's own word for a silent executor.

What the executor held and finished is remembered for its last ``MEMORY`` runs and jobs, from
the leases it launched, the runs its backend found at start and every change the backend
reported: enough for replays and races, which are recent, without growing forever.
"""

from __future__ import annotations

import logging
from collections import OrderedDict

from executor.backend import Backend, Lease, NodeInfo, OnChange, RunStatus

log = logging.getLogger(__name__)

MEMORY = 100_000
# Run states whose report carries the job's end too (see ``executor.events.run_payloads``).
ENDS_THE_JOB = frozenset({"succeeded", "failed"})
RUN_ID_IN_USE = "run_id_in_use"
JOB_FINISHED = "job_already_finished"


def _ignore(status: RunStatus) -> None:
    """The callback until the runtime starts the backend."""


def _remember(book: OrderedDict[str, str], key: str, value: str, memory: int) -> None:
    book[key] = value
    book.move_to_end(key)
    if len(book) > memory:
        book.popitem(last=False)


class RefusingBackend:
    """``inner`` behind a check of every lease: a lease that cannot be right is reported as a
    returned run through ``on_change`` and never reaches ``inner``. Everything else is
    ``inner``'s."""

    def __init__(self, inner: Backend, memory: int = MEMORY) -> None:
        self.inner = inner
        self.pool = inner.pool
        self.memory = memory
        self._on_change: OnChange = _ignore
        self._owners: OrderedDict[str, str] = OrderedDict()  # run id -> its job id
        self._finished: OrderedDict[str, str] = OrderedDict()  # job id -> the run that ended it

    async def start(self, on_change: OnChange) -> list[RunStatus]:
        self._on_change = on_change
        found = await self.inner.start(self._observed)
        for status in found:
            self._note(status)
        return found

    async def stop(self) -> None:
        await self.inner.stop()

    async def nodes(self) -> list[NodeInfo]:
        return await self.inner.nodes()

    def runs(self) -> list[RunStatus]:
        return self.inner.runs()

    def reported(self, statuses: list[RunStatus]) -> None:
        self.inner.reported(statuses)

    async def logs(self, run_id: str, limit_bytes: int) -> bytes | None:
        return await self.inner.logs(run_id, limit_bytes)

    async def kill(self, run_id: str, grace_period_s: float, outcome: str) -> None:
        await self.inner.kill(run_id, grace_period_s, outcome)

    async def launch(self, lease: Lease) -> None:
        refusal = self.refusal(lease)
        if refusal is None:
            _remember(self._owners, lease.run_id, lease.job_id, self.memory)
            await self.inner.launch(lease)
            return
        log.error(
            "refusing the lease of run %s to job %s on node %s: %s",
            lease.run_id,
            lease.job_id,
            lease.node,
            refusal.message,
            extra={"job_id": lease.job_id, "run_id": lease.run_id, "queue": lease.queue, "job_set": lease.job_set_id},
        )
        self._on_change(refusal)

    def refusal(self, lease: Lease) -> RunStatus | None:
        """``lease`` returned with the reason it cannot be right, or None when it may be launched.
        A repeat of a lease already launched is no refusal: the backend ignores it."""
        owner = self._owners.get(lease.run_id)
        if owner is not None and owner != lease.job_id:
            return _returned(lease, RUN_ID_IN_USE, f"this executor already holds run {lease.run_id} for job {owner}")
        ended_by = self._finished.get(lease.job_id)
        if ended_by is not None and ended_by != lease.run_id:
            return _returned(lease, JOB_FINISHED, f"this executor already reported job {lease.job_id} finished, by run {ended_by}")
        return None

    def _observed(self, status: RunStatus) -> None:
        self._note(status)
        self._on_change(status)

    def _note(self, status: RunStatus) -> None:
        _remember(self._owners, status.run_id, status.job_id, self.memory)
        if status.state in ENDS_THE_JOB:
            _remember(self._finished, status.job_id, status.run_id, self.memory)


def _returned(lease: Lease, reason: str, message: str) -> RunStatus:
    return RunStatus(lease.run_id, lease.job_id, lease.queue, lease.job_set_id, lease.node, "returned", reason=reason, message=message)
