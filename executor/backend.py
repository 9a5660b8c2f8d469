"""The one interface between the executor's runtime and the thing that runs jobs.

The runtime (commands in, events and reports out) is the same for every cluster; a backend
only knows how to start, stop and observe runs on its nodes: local processes, simulated runs,
or Kubernetes pods. Backends report what happens through the ``on_change`` callback given to
``start``; the runtime turns those changes into events on the log.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

# Run states a backend reports. ``returned`` means the run never started and may be retried
# elsewhere (Armada's "lease returned"); the others are the run's own outcome.
ACTIVE = frozenset({"pending", "running"})
ENDED = frozenset({"succeeded", "failed", "returned", "cancelled", "preempted"})


@dataclass(frozen=True)
class Lease:
    """A run the control plane leased to this executor, on one of its nodes."""

    job_id: str
    run_id: str
    queue: str
    job_set_id: str
    node: str
    # The job's JobSubmitted payload (schemas/job_submitted.avsc): pod spec, annotations, labels...
    spec: dict[str, Any]


@dataclass(frozen=True)
class RunStatus:
    """Where one run is. ``exit_code``, ``reason`` and ``message`` are set for ended runs."""

    run_id: str
    job_id: str
    queue: str
    job_set_id: str
    node: str
    state: str  # pending, running, or one of ENDED
    exit_code: int | None = None
    reason: str = ""
    message: str = ""


@dataclass(frozen=True)
class NodeInfo:
    """A node as the executor reports it; quantities are Kubernetes strings ("32", "256Gi")."""

    name: str
    allocatable: dict[str, str]
    labels: dict[str, str] = field(default_factory=dict)
    taints: tuple[dict[str, str | None], ...] = ()  # {key, value, effect}
    unschedulable: bool = False
    non_flotilla_usage: dict[str, str] = field(default_factory=dict)


OnChange = Callable[[RunStatus], None]


class Backend(Protocol):
    """What every backend implements. ``launch`` and ``kill`` are idempotent by run id."""

    pool: str

    async def start(self, on_change: OnChange) -> list[RunStatus]:
        """Start observing; returns the runs found already present whose state may not be on the log yet
        (for reconciliation after a restart)."""

    async def stop(self) -> None:
        """Stop observing. Runs keep going: an executor restart must not kill its jobs."""

    async def nodes(self) -> list[NodeInfo]: ...

    async def launch(self, lease: Lease) -> None:
        """Start the run. A run id already known (running or ended) is left alone."""

    async def kill(self, run_id: str, grace_period_s: float, outcome: str) -> None:
        """Stop the run: SIGTERM/delete, then force after the grace period. ``outcome`` is
        ``cancelled`` or ``preempted``, the state reported once it is gone. Unknown runs are ignored."""

    def runs(self) -> list[RunStatus]:
        """Every run held now, active or ended and not yet forgotten."""

    def reported(self, statuses: list[RunStatus]) -> None:
        """These states are on the log. A backend that keeps its runs across restarts notes them, so that
        ``start`` does not hand them back to be reported again (each would be a second event on the log)."""

    async def logs(self, run_id: str, limit_bytes: int) -> bytes | None:
        """The last ``limit_bytes`` of the run's output, or None when this backend keeps none for the run."""
