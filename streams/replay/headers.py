"""The first fields of an event sequence, read without decoding the rest of it.

An audit looks at every record of `events` but compares only the scheduler's: reading a
sequence's queue, job set, user and first event id from the front of its Avro body costs a few
microseconds, decoding a submission with its pod spec a hundred times that. Avro writes a record's
fields in schema order, and every release of `event_sequence` starts queue, job_set_id, user,
groups, events (of Events starting with event_id); `head` checks that of the writer schema, once
per schema, and says so when a release ever changes it.
"""

from __future__ import annotations

from dataclasses import dataclass

from schemas.codec import SchemaError, writer_of
from streams.archive.segments import read_long

_LEADING_FIELDS = ["queue", "job_set_id", "user", "groups", "events"]
_checked: dict[int, bool] = {}


@dataclass(frozen=True, slots=True)
class Head:
    queue: str
    job_set_id: str
    user: str
    first_event_id: str | None  # None for a sequence without events


def head(value: bytes) -> Head:
    """The sequence's leading fields; raises SchemaError for a message that is not an event sequence."""
    writer, at = writer_of("event_sequence", value)
    laid_out = _checked.get(id(writer.parsed))
    if laid_out is None:
        fields = writer.parsed["fields"]
        laid_out = _checked[id(writer.parsed)] = [f["name"] for f in fields[:5]] == _LEADING_FIELDS and fields[4]["type"]["items"][
            "fields"
        ][0]["name"] == "event_id"
    if not laid_out:
        raise SchemaError(f"event_sequence ({writer.origin}) does not start {', '.join(_LEADING_FIELDS)}: read it whole")
    try:
        queue, at = _string(value, at)
        job_set_id, at = _string(value, at)
        user, at = _string(value, at)
        at = _skip_strings(value, at)
        count, at = read_long(value, at)
        if count < 0:
            _, at = read_long(value, at)  # the block's size in bytes
        first = _string(value, at)[0] if count else None
    except (IndexError, UnicodeDecodeError) as exc:
        raise SchemaError(f"cannot read the head of an event sequence: truncated or corrupt ({exc})") from exc
    return Head(queue, job_set_id, user, first)


def _string(data: bytes, at: int) -> tuple[str, int]:
    length, at = read_long(data, at)
    end = at + length
    if length < 0 or end > len(data):
        raise IndexError(f"a string of {length} bytes at byte {at} of {len(data)}")
    return data[at:end].decode(), end


def _skip_strings(data: bytes, at: int) -> int:
    """Past an array of strings."""
    while True:
        count, at = read_long(data, at)
        if count == 0:
            return at
        if count < 0:
            size, at = read_long(data, at)
            at += size
            continue
        for _ in range(count):
            _, at = _string(data, at)
