"""`flotilla watch QUEUE JOBSET`: a job set's events, one line each, as they happen."""

from __future__ import annotations

import argparse
import json
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

from streams.client import Client
from streams.commands import CommandError

# Payload fields worth a glance, in the order shown; the rest is in --json.
DETAILS = (
    "run_id", "executor", "node", "exit_code", "category", "reason", "message",
    "new_priority", "preemptor_job_id", "priority", "priority_class", "client_id",
)


def register(commands: Any) -> None:
    watch = commands.add_parser("watch", help="print a job set's events as they happen (Ctrl-C to stop)")
    watch.add_argument("queue")
    watch.add_argument("job_set")
    watch.add_argument("--no-follow", dest="follow", action="store_false",
                       help="stop after the events so far instead of waiting for new ones")
    watch.add_argument("--json", action="store_true", help="one JSON object per line, as the server sends them")
    watch.add_argument("--url", help="REST API (default $FLOTILLA_URL or http://127.0.0.1:8080)")
    watch.set_defaults(func=_watch)


def _watch(args: argparse.Namespace) -> int:
    path = (
        f"/api/v1/queues/{quote(args.queue, safe='')}/jobsets/{quote(args.job_set, safe='')}/events"
        f"?watch={'true' if args.follow else 'false'}"
    )
    try:
        for event in Client.from_env(args.url).events(path):
            record = json.loads(event.data)
            print(json.dumps(record) if args.json else event_line(record), flush=True)
    except KeyboardInterrupt:
        return 0  # Ctrl-C is how a followed watch ends
    if args.follow:
        raise CommandError("the server ended the event stream (it is stopping?)")
    return 0


def event_line(record: dict[str, Any]) -> str:
    """`<UTC time>  <job id>  <kind>  key=value...` for one event of the stream."""
    created = datetime.fromtimestamp(record["created"] / 1000, tz=UTC).isoformat(timespec="milliseconds")
    payload = record.get("payload") or {}
    details = " ".join(
        f"{name}={_text(payload[name])}" for name in DETAILS if payload.get(name) not in (None, "")
    )
    return f"{created.replace('+00:00', 'Z')}  {record['job_id'] or '-':<26}  {record['kind']:<20}  {details}".rstrip()


def _text(value: Any) -> str:
    """Numbers as `3` not `3.0`; strings with spaces quoted so a line splits back into fields."""
    if isinstance(value, float):
        return f"{value:g}"
    text = str(value)
    return json.dumps(text) if (" " in text or not text) else text
