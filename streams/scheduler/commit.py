"""A cycle's outcome as the one feed record that commits it (`streams.scheduler.feed.Committed`).

The messages are encoded here once, in the order they are published: the cycle's event
sequences, then its cycle records, on `events`; its commands on `executor-commands`. The same
bytes go into the committed record and out to the topics, so a worker that publishes a committed
cycle again after a take-over sends exactly what the first owner sent, and the readers (the
job-state fold, executors) recognise the repeat.
"""

from __future__ import annotations

from typing import Any

from schemas.codec import encode
from streams.domain import events
from streams.scheduler.cycle import CycleOutcome
from streams.scheduler.feed import Committed


def committed(tick_offset: int, outcome: CycleOutcome) -> Committed | None:
    """The record committing ``outcome``, the cycle of the tick at ``tick_offset``; None when the
    cycle has nothing to publish."""
    if not (outcome.sequences or outcome.records or outcome.commands):
        return None
    sequences = (*outcome.sequences, *outcome.records)
    return Committed(
        tick=tick_offset,
        cycle_id=outcome.cycle_id,
        events=tuple((_key(s), encode("event_sequence", s, validate_record=False)) for s in sequences),
        commands=tuple((c["executor"].encode(), encode("executor_command", c, validate_record=False)) for c in outcome.commands),
    )


def _key(sequence: dict[str, Any]) -> bytes:
    return events.sequence_key(sequence["queue"], sequence["job_set_id"]).encode()
