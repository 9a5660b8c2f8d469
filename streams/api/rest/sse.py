"""A job set's events as server-sent events: request options, one message per event, resuming.

Pure, so the wire format a client parses is tested without a broker.
Each message is `id: <event id>`, `event: <kind>`, `data: <one-line JSON>`; the id is what a
client passes back as `from` to resume after it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ulid import ULID

from streams.api.errors import ApiError
from streams.domain.jobs import event_kind

CONTENT_TYPE = "text/event-stream"
# A comment line: clients ignore it, proxies and idle timeouts see traffic.
HEARTBEAT = b": heartbeat\n\n"


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
