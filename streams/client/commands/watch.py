"""`flotilla watch QUEUE JOBSET`: a job set's events as they happen, with how many of its jobs are in each state.

On a terminal the events scroll by above a table of counts that is redrawn in place; otherwise
(a pipe, a file) each event is one line that starts with the counts after it, so the output stays
easy to read with a script; `--json` prints the server's events unchanged.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any, Protocol, TextIO
from urllib.parse import quote, urlencode

from streams.client.commands import CommandError
from streams.client.commands.connection import add_connection_options, client_for
from streams.client.commands.job_set_counts import JobSetCounts
from streams.client.rest import Client
from streams.domain.states import JOB_STATE_ORDER

# Payload fields worth a glance, in the order shown; the rest is in --json.
DETAILS = (
    "run_id",
    "executor",
    "node",
    "exit_code",
    "category",
    "reason",
    "message",
    "new_priority",
    "preemptor_job_id",
    "priority",
    "priority_class",
    "client_id",
)
# ANSI: move the cursor to the start of the line n lines up; clear from the cursor to the end of the screen.
UP = "\x1b[{}F"
CLEAR_BELOW = "\x1b[J"


def register(commands: Any) -> None:
    watch = commands.add_parser("watch", help="follow a job set: its events and how many jobs are in each state (Ctrl-C to stop)")
    watch.add_argument("queue")
    watch.add_argument("job_set")
    watch.add_argument(
        "--no-follow", dest="follow", action="store_false", help="stop after the events so far instead of waiting for new ones"
    )
    watch.add_argument(
        "--exit-on-done", action="store_true", help="stop once every job of the job set has finished (judged after the events so far)"
    )
    watch.add_argument("--json", action="store_true", help="the events as JSON lines, as the server sends them")
    add_connection_options(watch)
    watch.set_defaults(func=_watch)


class View(Protocol):
    def start(self, counts: JobSetCounts) -> None: ...

    def event(self, record: dict[str, Any], counts: JobSetCounts) -> None: ...


def _watch(args: argparse.Namespace) -> int:
    client, counts = client_for(args), JobSetCounts()
    view = _view(args, sys.stdout)
    view.start(counts)
    try:
        if args.follow and not args.exit_on_done:
            _show(client, _path(args, follow=True), counts, view, stop_when_done=False)
        else:
            # Done is judged only once the replay reached the present, not at a moment of the job set's past.
            last = _show(client, _path(args, follow=False), counts, view, stop_when_done=False)
            if not args.follow or counts.done:
                return 0
            _show(client, _path(args, follow=True, after=last), counts, view, stop_when_done=True)
            if counts.done:
                return 0
    except KeyboardInterrupt:
        return 0  # Ctrl-C is how a followed watch ends
    raise CommandError("the server ended the event stream (it is stopping?)")


def _path(args: argparse.Namespace, *, follow: bool, after: str | None = None) -> str:
    query = {"watch": "true" if follow else "false", **({"from": after} if after else {})}
    return f"/api/v1/queues/{quote(args.queue, safe='')}/jobsets/{quote(args.job_set, safe='')}/events?{urlencode(query)}"


def _show(client: Client, path: str, counts: JobSetCounts, view: View, *, stop_when_done: bool) -> str | None:
    """Fold and show the stream's events; returns the last event id (or None if there was none)."""
    last = None
    for event_id, record in _records(client, path):
        last = event_id or last
        counts.apply(record)
        view.event(record, counts)
        if stop_when_done and counts.done:
            break
    return last


def _records(client: Client, path: str) -> Iterator[tuple[str | None, dict[str, Any]]]:
    for event in client.events(path):
        yield event.id, json.loads(event.data)


def _view(args: argparse.Namespace, out: TextIO) -> View:
    if args.json:
        return JsonLines(out)
    if out.isatty() and os.environ.get("TERM") != "dumb":  # a dumb terminal cannot move its cursor
        return LiveTable(out, f"job set {args.job_set} in queue {args.queue}")
    return CountLines(out)


class JsonLines:
    def __init__(self, out: TextIO) -> None:
        self.out = out

    def start(self, counts: JobSetCounts) -> None:
        pass

    def event(self, record: dict[str, Any], counts: JobSetCounts) -> None:
        print(json.dumps(record), file=self.out, flush=True)


class CountLines:
    def __init__(self, out: TextIO) -> None:
        self.out = out

    def start(self, counts: JobSetCounts) -> None:
        pass

    def event(self, record: dict[str, Any], counts: JobSetCounts) -> None:
        print(f"{counts_line(counts)} | {event_line(record)}", file=self.out, flush=True)


class LiveTable:
    """Events scroll by; the table of counts stays under them, redrawn in place with ANSI cursor moves."""

    def __init__(self, out: TextIO, title: str, width: int | None = None) -> None:
        self.out, self.title, self.width = out, title, width
        self._drawn = 0  # lines of the table now on the screen, just above the cursor

    def start(self, counts: JobSetCounts) -> None:
        self._draw(counts, "")

    def event(self, record: dict[str, Any], counts: JobSetCounts) -> None:
        self._draw(counts, event_line(record) + "\n")

    def _draw(self, counts: JobSetCounts, above: str) -> None:
        # Lines wider than the terminal would wrap and take two rows, and the next redraw would move up too few.
        width = self.width or shutil.get_terminal_size().columns
        table = [line[:width] for line in counts_table(counts, self.title)]
        erase = UP.format(self._drawn) + CLEAR_BELOW if self._drawn else ""
        self.out.write(erase + above + "\n".join(table) + "\n")
        self.out.flush()
        self._drawn = len(table)


def counts_line(counts: JobSetCounts) -> str:
    """`queued=0 leased=1 ... preempted=0`, every state always present so a script can split it."""
    return " ".join(f"{state}={count}" for state, count in counts.counts().items())


def counts_table(counts: JobSetCounts, title: str) -> list[str]:
    found = counts.counts()
    widths = [max(len(state), 5) for state in JOB_STATE_ORDER]
    total = len(counts.states)
    return [
        f"{title}: {total} job{'' if total == 1 else 's'}{', all finished' if counts.done else ''}",
        "  ".join(state.upper().rjust(width) for state, width in zip(JOB_STATE_ORDER, widths, strict=True)),
        "  ".join(str(found[state]).rjust(width) for state, width in zip(JOB_STATE_ORDER, widths, strict=True)),
    ]


def event_line(record: dict[str, Any]) -> str:
    """`<UTC time>  <job id>  <kind>  key=value...` for one event of the stream."""
    created = datetime.fromtimestamp(record["created"] / 1000, tz=UTC).isoformat(timespec="milliseconds")
    payload = record.get("payload") or {}
    details = " ".join(f"{name}={_text(payload[name])}" for name in DETAILS if payload.get(name) not in (None, ""))
    return f"{created.replace('+00:00', 'Z')}  {record['job_id'] or '-':<26}  {record['kind']:<20}  {details}".rstrip()


def _text(value: Any) -> str:
    """Numbers as `3` not `3.0`; strings with spaces quoted so a line splits back into fields."""
    if isinstance(value, float):
        return f"{value:g}"
    text = str(value)
    return json.dumps(text) if (" " in text or not text) else text
