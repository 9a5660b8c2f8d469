"""Rate limits (token buckets that persist between cycles) and resource limits."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from streams.scheduler.algorithm.model import PriorityClass, Queue, RateLimit, TokenBucket


class Bucket:
    """A token bucket frozen at the cycle time: refills only between cycles, never mid-cycle."""

    __slots__ = ("burst", "tokens", "_limited")

    def __init__(self, limit: RateLimit, state: TokenBucket | None, now: float) -> None:
        self._limited = limit.rate is not None
        self.burst = limit.burst
        if not self._limited:
            self.tokens = math.inf
        elif state is None:
            self.tokens = float(limit.burst)
        else:
            elapsed = max(0.0, now - state.at)
            self.tokens = min(float(limit.burst), state.tokens + elapsed * float(limit.rate or 0.0))

    def reserve(self, n: int) -> None:
        self.tokens -= n

    def state(self, now: float) -> TokenBucket | None:
        return TokenBucket(tokens=self.tokens, at=now) if self._limited else None


def absolute_limits(totals: Mapping[str, int], fractions: Mapping[str, float]) -> dict[str, int]:
    """Fractions of the pool as milli-unit amounts, rounded to the nearest milli-unit."""
    return {name: int(round(totals.get(name, 0) * fraction)) for name, fraction in fractions.items()}


def exceeds(amounts: Sequence[int], limits: Sequence[tuple[int, int]]) -> bool:
    """True when any limited resource (index, limit) is strictly above its limit."""
    for index, limit in limits:  # checked for every gang, mostly against no limits at all
        if amounts[index] > limit:
            return True
    return False


def queue_class_limits(queue: Queue, priority_class: PriorityClass) -> dict[str, float]:
    """The class's per-queue fractions, overridden resource by resource by the queue's own."""
    merged = dict(priority_class.maximum_resource_fraction_per_queue)
    merged.update(queue.resource_limits.get(priority_class.name, {}))
    return merged
