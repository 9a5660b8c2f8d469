"""Which gang to try next: each queue's own order, and the choice between queues.

Each queue offers one gang at a time (a gang is offered once its last member has been seen
in queue order). Between queues the next gang comes from the queue that stays furthest
below its fair share with that gang included ("progressive filling").
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Iterator, Sequence

from streams.scheduler.algorithm.fairness import DrfCost
from streams.scheduler.algorithm.state import JobState


def _gangs(items: Iterable[JobState], lookback: int, skip: Callable[[JobState], bool]) -> Iterator[list[JobState]]:
    """Gangs in queue order; stops after `lookback` new jobs (0 = no limit)."""
    partial: dict[str, list[JobState]] = {}
    seen_new = 0
    for js in items:
        if not js.evicted:
            seen_new += 1
            if lookback and seen_new > lookback:
                return
            if skip(js):
                continue
        gang_id = js.gang_id
        if not gang_id:
            yield [js]
            continue
        members = partial.setdefault(gang_id, [])
        members.append(js)
        if len(members) == js.gang_size:
            del partial[gang_id]
            yield members


class QueueCursor:
    """A queue's next gang together with the costs that rank it against other queues.

    The costs are made when the cursor is first compared, not when it advances: a queue alone in the
    pass (the common case) is never compared, and a queue's allocation changes only while its gang is
    being tried, outside the heap, so they are what `advance` would have found."""

    __slots__ = ("name", "weight", "budget", "gang", "all_evicted", "_costs", "class_priority", "_gangs", "_shared")

    def __init__(self, name: str, weight: float, budget: float, gangs: Iterator[list[JobState]], shared: _Ranking) -> None:
        self.name = name
        self.weight = weight
        self.budget = budget
        self._gangs = gangs
        self._shared = shared
        self.gang: list[JobState] | None = None
        self.advance()

    def advance(self) -> None:
        self.gang = gang = next(self._gangs, None)
        if gang is None:
            return
        self._costs: tuple[float, float, float] | None = None
        if len(gang) == 1:  # most gangs: the job's own priority
            js = gang[0]
            self.all_evicted = js.evicted
            self.class_priority = js.sched_priority if js.bound or js.evicted else js.pc.priority
        else:
            self.all_evicted = all(js.evicted for js in gang)
            # A gang whose members were placed at different priorities ranks by the lowest.
            self.class_priority = min(js.sched_priority if js.bound or js.evicted else js.pc.priority for js in gang)

    def costs(self) -> tuple[float, float, float]:
        """(current, proposed, size): the queue's weighted cost now and with its gang, and the gang's."""
        costs = self._costs
        if costs is None:
            gang, shared = self.gang, self._shared
            assert gang is not None
            allocation = shared.allocation[self.name]
            if len(gang) == 1:
                request: Sequence[int] = gang[0].req
            else:
                request = [0] * len(allocation)
                for js in gang:
                    for i, amount in js.pairs:
                        request[i] += amount
            proposed = [a + r for a, r in zip(allocation, request, strict=True)]
            cost = shared.cost
            current, size = cost.weighted(allocation, self.weight), cost.unweighted(request) * self.weight
            costs = self._costs = (current, cost.weighted(proposed, self.weight), size)
        return costs

    def __lt__(self, other: QueueCursor) -> bool:
        shared = self._shared
        if shared.consider_priority and self.class_priority != other.class_priority:
            return self.class_priority > other.class_priority
        (current, proposed, size), (other_current, other_proposed, other_size) = self.costs(), other.costs()
        if shared.prefer_large:
            mine, theirs = proposed <= self.budget, other_proposed <= other.budget
            if mine and theirs:
                if current == other_current and size != other_size:
                    return size > other_size
                if current != other_current:
                    return current < other_current
            elif not mine and not theirs:
                if proposed != other_proposed:
                    return proposed < other_proposed
            else:
                return mine
        elif proposed != other_proposed:
            return proposed < other_proposed
        return self.name < other.name


class _Ranking:
    __slots__ = ("allocation", "cost", "consider_priority", "prefer_large")

    def __init__(self, allocation: dict[str, list[int]], cost: DrfCost, consider_priority: bool, prefer_large: bool) -> None:
        self.allocation = allocation
        self.cost = cost
        self.consider_priority = consider_priority
        self.prefer_large = prefer_large


class CandidateGangs:
    """The queues ordered by who should go next; call `pop`, try the gang, then `done`."""

    def __init__(
        self,
        queues: Sequence[tuple[str, float, float, Iterable[JobState]]],
        allocation: dict[str, list[int]],
        cost: DrfCost,
        *,
        consider_priority: bool,
        prefer_large: bool,
        lookback: int = 0,
        skip: Callable[[JobState], bool] = lambda js: False,
    ) -> None:
        self._ranking = _Ranking(allocation, cost, consider_priority, prefer_large)
        self._heap: list[QueueCursor] = []
        self._only_evicted = False
        self._only_evicted_queues: set[str] = set()
        for name, weight, budget, items in queues:
            cursor = QueueCursor(name, weight, budget, _gangs(items, lookback, skip), self._ranking)
            if cursor.gang is not None:
                self._heap.append(cursor)
        heapq.heapify(self._heap)

    def pop(self) -> QueueCursor | None:
        while self._heap:
            cursor = heapq.heappop(self._heap)
            if cursor.all_evicted or not (self._only_evicted or cursor.name in self._only_evicted_queues):
                return cursor
        return None

    def done(self, cursor: QueueCursor) -> None:
        """Move the queue on to its next gang, re-ranked with its new allocation."""
        cursor.advance()
        if cursor.gang is not None:
            heapq.heappush(self._heap, cursor)

    def only_evicted(self, queue: str | None = None) -> None:
        """From now on offer only gangs being put back, for every queue or for one queue."""
        if queue is None:
            self._only_evicted = True
        else:
            self._only_evicted_queues.add(queue)


def rescheduling_order(
    queues: Sequence[tuple[str, float, float, Sequence[JobState]]], allocation: dict[str, list[int]], cost: DrfCost, prefer_large: bool
) -> list[JobState]:
    """The order evicted jobs would be put back in if nothing new competed with them.

    Fair-share preemption displaces evicted jobs from the end of this order first, so the
    jobs that would be re-placed last (furthest over their queue's share) go first.
    """
    simulated = {name: list(values) for name, values in allocation.items()}
    candidates = CandidateGangs(queues, simulated, cost, consider_priority=False, prefer_large=prefer_large)
    order: list[JobState] = []
    while (cursor := candidates.pop()) is not None:
        gang = cursor.gang
        assert gang is not None
        order.extend(gang)
        totals = simulated[cursor.name]
        for js in gang:
            for i, amount in js.pairs:
                totals[i] += amount
        candidates.done(cursor)
    return order
