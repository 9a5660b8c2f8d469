"""Which worker answers for what: each partition's owner and the scheduling worker, from the group's assignment.

Faust's assignor hands every member the same map of the last rebalance: for each member's web
address, the table partitions it holds active. Every topic of the partition count P (submissions,
events, the jobs, job-index and client-ids tables) is assigned co-partitioned, so the owner of a
`jobs` partition is the owner of that partition of them all; the scheduler's one-partition index
goes with the scheduler feed to the worker that schedules. A worker that is asked about a partition
it turns out not to hold (the map moved on) says so, and the caller looks again.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import faust
from faust.types import TP


class NoOwner(Exception):
    """No member holds the partition now (a rebalance is under way)."""


@dataclass
class Owners:
    app: faust.App
    partitions: int
    # The changelog topics whose assignment names the owners: the jobs table's, and the scheduler index's.
    jobs_topic: str
    scheduler_topic: str
    me: str  # this worker's address, as the assignment names it

    def _distribution(self) -> dict[str, dict[str, list[int]]]:
        return dict(self.app.assignor.changelog_distribution)  # type: ignore[attr-defined]  # Faust's PartitionAssignor has it

    def _owner(self, topic: str, partition: int) -> str | None:
        for url, topics in self._distribution().items():
            if partition in topics.get(topic, ()):
                return url.rstrip("/")
        return None

    def owner(self, partition: int) -> str:
        """The address of the worker holding ``partition`` active; NoOwner while none does."""
        url = self._owner(self.jobs_topic, partition)
        if url is None:
            raise NoOwner(f"no worker holds partition {partition} now")
        return url

    def by_owner(self, partitions: Iterable[int]) -> dict[str, list[int]]:
        """``partitions`` grouped by the worker holding each, in order."""
        grouped: dict[str, list[int]] = {}
        for partition in sorted(set(partitions)):
            grouped.setdefault(self.owner(partition), []).append(partition)
        return grouped

    def scheduler(self) -> str | None:
        """The address of the worker that schedules (holds the scheduler feed); None while none does."""
        return self._owner(self.scheduler_topic, 0)

    def members(self) -> list[str]:
        """Every worker of the group's last assignment, this one included."""
        return sorted({url.rstrip("/") for url in self._distribution()} | {self.me})

    def local(self) -> list[int]:
        """The partitions this worker holds active now."""
        return sorted(tp.partition for tp in self.app.assignor.assigned_actives() if isinstance(tp, TP) and tp.topic == self.jobs_topic)
