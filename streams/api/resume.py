"""Resuming an event stream after a given event, by position on the log; shared by the REST and gRPC streams."""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

Item = TypeVar("Item")


def _own_event_id(record: Mapping[str, Any]) -> tuple[str]:
    return (record["event_id"],)


@dataclass
class ResumeAfter(Generic[Item]):
    """Drops items up to and including the one that answers to ``event_id``, then lets everything through.

    By position, not by comparing ids: ULIDs from different writers (API, ingest, executors) are
    not in log order, so "after" means after that event on the log. An item answers to the ids
    ``answers_to`` gives: a REST record to its event id; a gRPC message, one of several made from one
    event, to its own message id and, if it is the event's last, to the event id as well.
    """

    event_id: str | None
    answers_to: Callable[[Item], Collection[str]] = _own_event_id  # type: ignore[assignment]

    @property
    def waiting(self) -> bool:
        return self.event_id is not None

    def admit(self, items: list[Item]) -> list[Item]:
        if self.event_id is None:
            return items
        for index, item in enumerate(items):
            if self.event_id in self.answers_to(item):
                self.event_id = None
                return items[index + 1 :]
        return []
