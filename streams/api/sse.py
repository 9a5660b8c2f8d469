"""A job set's events as server-sent events: request options, one message per event, resuming.

Pure, so the wire format a client parses and the resume rule are tested without a broker.
Each message is `id: <event id>`, `event: <kind>`, `data: <one-line JSON>`; the id is what a
client passes back as `from` to resume after it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from ulid import ULID

from streams.api.http import ApiError
from streams.domain.jobs import event_kind

CONTENT_TYPE = "text/event-stream"
# A comment line: clients ignore it, proxies and idle timeouts see traffic.
HEARTBEAT = b": heartbeat\n\n"

Item = TypeVar("Item")


@dataclass(frozen=True)
class StreamOptions:
    after: str | None  # resume after this event id; None: from the job set's first event
    watch: bool  # keep streaming live events; False: end once the events present at the call are sent


def stream_options(query: Mapping[str, str]) -> StreamOptions:
    """`?from=<event id>&watch=true|false`; anything else is refused, so a misspelt option is not ignored."""
    unknown = sorted(set(query) - {"from", "watch"})
    if unknown:
        raise ApiError(400, f"unknown query parameter(s) {', '.join(map(repr, unknown))}; expected 'from' and 'watch'")
    after = query.get("from")
    if after is not None:
        try:
            ULID.from_str(after)
        except ValueError as exc:
            raise ApiError(400, f"from must be an event id (a ULID), not {after!r}") from exc
    watch = query.get("watch", "true").lower()
    if watch not in ("true", "false"):
        raise ApiError(400, f"watch must be true or false, not {query['watch']!r}")
    return StreamOptions(after=after, watch=watch == "true")


def event_records(sequence: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The events of a decoded `event_sequence`, each as the JSON object a client receives."""
    records = []
    for event in sequence["events"]:
        kind, payload = event["payload"]
        records.append(
            {
                "event_id": event["event_id"],
                "created": event["created"],
                "job_id": event["job_id"],
                "queue": sequence["queue"],
                "job_set": sequence["job_set_id"],
                "kind": event_kind(kind),
                "payload": payload,
            }
        )
    return records


def sse_message(record: Mapping[str, Any]) -> bytes:
    data = json.dumps(record, separators=(",", ":"))  # one line: JSON escapes newlines inside strings
    return f"id: {record['event_id']}\nevent: {record['kind']}\ndata: {data}\n\n".encode()


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
