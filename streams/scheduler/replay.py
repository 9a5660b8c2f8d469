"""Replaying the scheduler feed repeats every cycle: the audit behind each lease and preemption.

A cycle depends only on the index (folded from the feed up to its tick) and the tick itself,
so folding the same records into a fresh index and running a cycle at each tick gives the same
decisions, ids included. Comparing them with the `SchedulingCycle` records on `events` checks
that what the scheduler did is what its recorded inputs imply.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from streams.scheduler import feed
from streams.scheduler.config import CycleConfig
from streams.scheduler.cycle import CycleOutcome, run_cycle
from streams.scheduler.index import SchedulerIndex


def replay(records: Iterable[tuple[int, bytes]], config: CycleConfig) -> Iterator[CycleOutcome]:
    """The outcome of every cycle of a feed given as ``(offset, value)`` pairs in offset order.

    Records that are not feed records are skipped, as the agent skips them.
    """
    index = SchedulerIndex()
    for offset, value in records:
        try:
            record = feed.decode(value)
        except ValueError:
            continue
        if isinstance(record, feed.Tick):
            yield run_cycle(index, record, offset, config)
        elif not isinstance(record, feed.Committed):  # what a cycle published: the cycle itself is run at its tick
            index.apply(record)


def decisions(outcome: CycleOutcome) -> list[dict[str, object]]:
    """The decisions a cycle recorded, across all its records (empty when it decided nothing)."""
    return [decision for record in outcome.records for event in record["events"] for decision in event["payload"][1]["decisions"]]
