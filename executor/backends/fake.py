"""The fake backend: simulated nodes and simulated runs, for demos and load tests.

Nodes come from a cluster spec (see ``executor.cluster``) or from ``--nodes/--node-cpu/
--node-memory``. A lease is pending at once, running ``startup_s`` later, and ends after its run
time. Job annotations steer a run:

    flotilla.io/fake-runtime-seconds: "2.5"   run time (default: drawn from the spec's runtime
                                              distribution, seeded by the run id: reproducible)
    flotilla.io/fake-exit-code: "3"           non-zero fails the run with that exit code (default 0)
    flotilla.io/fake-outcome: returned        the lease is returned and the run never starts

``active_deadline_seconds`` is honoured: a run longer than its deadline fails at the deadline.
All runs share one timer heap and one loop, so 100,000 runs on 1,000 nodes cost no more than
their heap entries. Nothing persists: after a restart the backend holds no runs, and the control
plane treats the runs of the previous process as lost.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import random
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import TypeVar

from executor.backend import ENDED, Lease, NodeInfo, OnChange, RunStatus
from executor.backends.ledger import RETENTION_S, RunLedger
from executor.cluster import ClusterSpec, RuntimeDistribution

RUNTIME_ANNOTATION = "flotilla.io/fake-runtime-seconds"
EXIT_CODE_ANNOTATION = "flotilla.io/fake-exit-code"
OUTCOME_ANNOTATION = "flotilla.io/fake-outcome"


@dataclass(frozen=True)
class _Plan:
    runtime_s: float
    exit_code: int
    deadline_s: float | None
    returned: bool


class FakeBackend:
    def __init__(
        self,
        nodes: Iterable[NodeInfo],
        runtime: RuntimeDistribution = RuntimeDistribution(),
        pool: str = "default",
        clock: Callable[[], float] = time.monotonic,
        tick_s: float = 0.02,
        retention_s: float = RETENTION_S,
    ) -> None:
        self.pool = pool
        self.runtime = runtime
        self.clock = clock
        self.tick_s = tick_s
        self._nodes = tuple(nodes)
        self._node_names = frozenset(node.name for node in self._nodes)
        self._ledger = RunLedger(clock, retention_s)
        self._plans: dict[str, _Plan] = {}
        self._timers: list[tuple[float, str]] = []  # (due, run id): the run's next step
        self._seen: set[str] = set()  # every run id launched, so a replayed lease starts nothing
        self._loop: asyncio.Task[None] | None = None

    @classmethod
    def from_spec(cls, spec: ClusterSpec, pool: str | None = None) -> FakeBackend:
        """``pool`` (from the command line) wins over the spec's."""
        return cls(spec.nodes, spec.runtime, pool=pool or spec.pool or "default")

    # ------------------------------------------------------------------ Backend

    async def start(self, on_change: OnChange) -> list[RunStatus]:
        self._ledger.on_change = on_change
        self._loop = asyncio.create_task(self._run_timers(), name="fake-backend-timers")
        return []

    async def stop(self) -> None:
        if self._loop is not None:
            self._loop.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._loop
            self._loop = None

    async def nodes(self) -> list[NodeInfo]:
        return list(self._nodes)

    def runs(self) -> list[RunStatus]:
        return self._ledger.runs()

    def reported(self, statuses: list[RunStatus]) -> None:
        """Simulated runs end with the process: a restart finds none to report again."""

    async def logs(self, run_id: str, limit_bytes: int) -> bytes | None:
        """Simulated runs print nothing."""
        return None

    async def launch(self, lease: Lease) -> None:
        if lease.run_id in self._seen:
            return
        self._seen.add(lease.run_id)
        pending = RunStatus(lease.run_id, lease.job_id, lease.queue, lease.job_set_id, lease.node, "pending")
        if lease.node not in self._node_names:
            message = f"node {lease.node!r} is not one of this executor's nodes"
            self._ledger.record(replace(pending, state="returned", reason="unknown_node", message=message))
            return
        try:
            plan = self._plan(lease)
        except ValueError as exc:
            self._ledger.record(replace(pending, state="failed", reason="invalid_annotation", message=str(exc)))
            return
        self._ledger.record(pending)
        self._plans[lease.run_id] = plan
        heapq.heappush(self._timers, (self.clock() + self.runtime.startup_s, lease.run_id))

    async def kill(self, run_id: str, grace_period_s: float, outcome: str) -> None:
        status = self._ledger.get(run_id)
        if status is None or status.state in ENDED:
            return
        del self._plans[run_id]  # its timer finds no plan and is dropped
        self._ledger.record(replace(status, state=outcome, reason=outcome, message=f"stopped by the executor: {outcome}"))

    # ------------------------------------------------------------------ simulation

    def _plan(self, lease: Lease) -> _Plan:
        annotations = lease.spec.get("annotations") or {}
        raw_runtime = annotations.get(RUNTIME_ANNOTATION)
        if raw_runtime is None:
            rng = random.Random(f"{self.runtime.seed}/{lease.run_id}")
            runtime_s = rng.uniform(self.runtime.min_s, self.runtime.max_s)
        else:
            runtime_s = _number(RUNTIME_ANNOTATION, raw_runtime, float)
            if runtime_s < 0:
                raise ValueError(f"annotation {RUNTIME_ANNOTATION} is negative: {raw_runtime!r}")
        exit_code = _number(EXIT_CODE_ANNOTATION, annotations.get(EXIT_CODE_ANNOTATION, "0"), int)
        outcome = annotations.get(OUTCOME_ANNOTATION)
        if outcome not in (None, "returned"):
            raise ValueError(f"annotation {OUTCOME_ANNOTATION} must be 'returned', got {outcome!r}")
        deadline = (lease.spec.get("pod_spec") or {}).get("active_deadline_seconds")
        return _Plan(runtime_s, exit_code, float(deadline) if deadline else None, outcome == "returned")

    async def _run_timers(self) -> None:
        while True:
            self.advance()
            await asyncio.sleep(self.tick_s)

    def advance(self) -> None:
        """Take every step that is due by now: starts, ends, returns, and forgetting."""
        now = self.clock()
        timers = self._timers
        while timers and timers[0][0] <= now:
            due, run_id = heapq.heappop(timers)
            plan, status = self._plans.get(run_id), self._ledger.get(run_id)
            if plan is None or status is None:
                continue
            if status.state == "pending" and plan.returned:
                del self._plans[run_id]
                message = f"returned as annotation {OUTCOME_ANNOTATION} asked"
                self._ledger.record(replace(status, state="returned", reason="lease_returned", message=message))
            elif status.state == "pending":
                self._ledger.record(replace(status, state="running"))
                limit = plan.runtime_s if plan.deadline_s is None else min(plan.runtime_s, plan.deadline_s)
                heapq.heappush(timers, (due + limit, run_id))
            else:
                del self._plans[run_id]
                self._ledger.record(_end(status, plan))
        self._ledger.forget_expired()


def _end(status: RunStatus, plan: _Plan) -> RunStatus:
    if plan.deadline_s is not None and plan.runtime_s > plan.deadline_s:
        message = f"active deadline of {plan.deadline_s:g} s exceeded; the run was killed"
        return replace(status, state="failed", exit_code=137, reason="deadline_exceeded", message=message)
    if plan.exit_code == 0:
        return replace(status, state="succeeded", exit_code=0)
    detail = f"exit code {plan.exit_code}"
    return replace(status, state="failed", exit_code=plan.exit_code, reason=detail, message=detail)


_Number = TypeVar("_Number", int, float)


def _number(annotation: str, raw: str, kind: type[_Number]) -> _Number:
    try:
        return kind(raw)
    except (TypeError, ValueError):
        raise ValueError(f"annotation {annotation} is not a number: {raw!r}") from None
