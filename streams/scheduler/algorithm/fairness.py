"""Dominant resource fairness: the cost of an allocation and each queue's fair share."""

from __future__ import annotations

from collections.abc import Sequence

MAX_FAIR_SHARE_ITERATIONS = 10
UNALLOCATED_TOLERANCE = 0.01


class DrfCost:
    """Cost = the largest fraction of the pool any considered resource takes (before weighting)."""

    __slots__ = ("_terms",)

    def __init__(self, totals: Sequence[int], indices: Sequence[int], multipliers: Sequence[float] | None = None) -> None:
        """``multipliers``, one per index: how many times a resource's share counts (Armada's DRF multiplier)."""
        factors = multipliers or [1.0] * len(indices)
        # Resources the pool has none of cannot be shared out, so they cost nothing. A share
        # multiplied is the allocation over a total divided by the multiplier.
        self._terms = tuple((i, float(totals[i]) / factor) for i, factor in zip(indices, factors, strict=True) if totals[i] > 0)

    def unweighted(self, allocation: Sequence[int]) -> float:
        cost = 0.0
        for i, total in self._terms:
            share = allocation[i] / total
            if share > cost:
                cost = share
        return cost

    def weighted(self, allocation: Sequence[int], weight: float) -> float:
        return self.unweighted(allocation) / weight


def fair_shares(weights: Sequence[float], capped_demand_shares: Sequence[float]) -> tuple[list[float], list[float]]:
    """Raw fair share w/Σw and the demand-capped adjusted share found by water-filling.

    Capacity a queue cannot use (its demand is below its share) is handed to the queues whose
    demand is not yet met, in proportion to their weights, until less than 1% is left over.
    """
    total_weight = sum(weights)
    raw = [w / total_weight if total_weight > 0 else 0.0 for w in weights]
    adjusted = [0.0] * len(weights)
    active = list(weights)
    unallocated = 1.0
    for _ in range(MAX_FAIR_SHARE_ITERATIONS):
        if unallocated <= UNALLOCATED_TOLERANCE:
            break
        active_weight = sum(active)
        if active_weight <= 0:
            break
        for i, w in enumerate(active):
            if w > 0:
                adjusted[i] += (w / active_weight) * unallocated
        unallocated = 0.0
        for i, cap in enumerate(capped_demand_shares):
            excess = adjusted[i] - cap
            if excess > 0:
                adjusted[i] = cap
                unallocated += excess
                active[i] = 0.0
    return raw, adjusted
