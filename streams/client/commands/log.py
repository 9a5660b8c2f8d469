"""`flotilla log verify` and `flotilla log export`: the log archive read directly, with no broker or worker running.

Both read an archive directory (``--from-archive``, by default the one `flotilla up` keeps under
``.flotilla/log``) and may run while Flotilla runs: they only read, and a block being written
when they read is left for the next look.
"""

from __future__ import annotations

import argparse
import base64
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from streams.client.commands import CommandError
from streams.replay.times import parse_time as moment
from streams.replay.times import show_time

if TYPE_CHECKING:
    from streams.archive.segments import Record
    from streams.archive.source import ArchiveSource

DEFAULT_ARCHIVE = Path(".flotilla/log")
VALUE_SCHEMAS = {"events": "event_sequence", "queues": "queue"}


def add_archive_option(parser: argparse.ArgumentParser) -> None:
    """``--from-archive DIR``: the log archive a command reads instead of a broker."""
    parser.add_argument(
        "--from-archive",
        type=Path,
        default=DEFAULT_ARCHIVE,
        metavar="DIR",
        help=f"the log archive to read (default {DEFAULT_ARCHIVE}: the one `flotilla up` keeps under its state directory)",
    )


def archive_source(args: argparse.Namespace) -> ArchiveSource:
    from streams.archive.source import ArchiveSource

    root: Path = args.from_archive
    if not root.is_dir():
        raise CommandError(f"no log archive at {root} (give the directory with --from-archive, e.g. <state-dir>/log)")
    return ArchiveSource(root)


def register(commands: Any) -> None:
    log = commands.add_parser("log", help="check or export the log archive (the embedded default's durable copy of the log)")
    actions = log.add_subparsers(dest="action", required=True, metavar="ACTION")

    check = actions.add_parser("verify", help="read every segment: per partition the records, first and last offset and time")
    add_archive_option(check)
    check.add_argument("--json", action="store_true", help="print the report as JSON")
    check.set_defaults(func=_verify)

    export = actions.add_parser("export", help="write the archived records of a time window as JSON lines or an Avro file")
    add_archive_option(export)
    export.add_argument("--since", help="records at or after this time (ISO 8601, UTC unless it says otherwise, or epoch ms)")
    export.add_argument("--until", help="records at or before this time (same forms)")
    export.add_argument("--format", choices=("jsonl", "avro"), default="jsonl", help="jsonl (values decoded) or avro (the envelope)")
    export.add_argument("--topic", action="append", help="only this topic (events, queues; repeatable; default every archived topic)")
    export.add_argument("--output", "-o", type=Path, help="write here instead of to standard output")
    export.set_defaults(func=_export)


def _verify(args: argparse.Namespace) -> int:
    from streams.archive.reader import verify

    source = archive_source(args)
    reports = verify(source.root)
    if args.json:
        print(json.dumps({"archive": str(source.root), "partitions": [vars(report) for report in reports]}, indent=2))
    else:
        print(f"log archive {source.root}:")
        if not reports:
            print("  empty")
        for r in reports:
            span = (
                f"offsets {r.first_offset}-{r.last_offset}, {show_time(r.first_time)} to {show_time(r.last_time)}"
                if r.records
                else "no records"
            )
            print(f"  {r.topic}[{r.partition}]: {r.records:,} records in {r.segments} segment(s), {span}")
            for problem in r.problems:
                print(f"    problem: {problem}")
    problems = sum(len(r.problems) for r in reports)
    if problems:
        print(f"error: {problems} problem(s) found", file=sys.stderr)
        return 1
    return 0


def _export(args: argparse.Namespace) -> int:
    from streams.archive.reader import ArchiveCorrupt

    source = archive_source(args)
    try:
        topics = [source.topic(name) for name in args.topic] if args.topic else source.topics()
    except KeyError as exc:
        raise CommandError(str(exc.args[0])) from exc
    records = source.merged(topics, since_ms=parse_time(args.since), until_ms=parse_time(args.until))
    if args.format == "avro" and args.output is None and sys.stdout.isatty():
        raise CommandError("an Avro file is binary: give --output FILE, or redirect standard output")
    try:
        if args.output is None:
            count = _write(records, args.format, sys.stdout.buffer)
        else:
            with open(args.output, "wb") as out:
                count = _write(records, args.format, out)
    except ArchiveCorrupt as exc:
        raise CommandError(str(exc)) from exc
    print(f"exported {count:,} records", file=sys.stderr)
    return 0


def _write(records: Iterator[Record], form: str, out: IO[bytes]) -> int:
    count = 0

    def counted() -> Iterator[Record]:
        nonlocal count
        for record in records:
            count += 1
            yield record

    if form == "avro":
        from fastavro import writer as avro_writer

        from streams.archive.segments import PARSED_ENVELOPE, to_envelope

        avro_writer(out, PARSED_ENVELOPE, (to_envelope(r) for r in counted()), codec="deflate")
    else:
        for record in counted():
            out.write(json.dumps(as_json(record), default=_bytes_as_base64).encode() + b"\n")
    out.flush()
    return count


def as_json(record: Record) -> dict[str, Any]:
    """A record with its value decoded by its topic's schema (base64 with the reason when it does not decode)."""
    from schemas.codec import SchemaError, decode

    line: dict[str, Any] = {
        "topic": record.topic,
        "partition": record.partition,
        "offset": record.offset,
        "timestamp": record.timestamp,
        "time": show_time(record.timestamp),
        "key": _text(record.key),
        "headers": {k: _text(v) for k, v in record.headers},
    }
    schema = VALUE_SCHEMAS.get(record.topic.rsplit(".", 1)[-1])
    if record.value is None:
        line["value"] = None
    elif schema is None:
        line["value_base64"] = base64.b64encode(record.value).decode()
    else:
        try:
            line["value"] = decode(schema, record.value)
        except SchemaError as exc:
            line["value_base64"], line["value_error"] = base64.b64encode(record.value).decode(), str(exc)
    return line


def _text(raw: bytes | None) -> str | None:
    if raw is None:
        return None
    try:
        return raw.decode()
    except UnicodeDecodeError:
        return "base64:" + base64.b64encode(raw).decode()


def _bytes_as_base64(value: Any) -> Any:
    if isinstance(value, bytes | bytearray):
        return base64.b64encode(value).decode()
    raise TypeError(f"{type(value).__name__} is not JSON")


def parse_time(text: str | None) -> int | None:
    """Epoch milliseconds of ``text`` (see `streams.replay.times.parse_time`); None for none."""
    if text is None:
        return None
    try:
        return moment(text)
    except ValueError as exc:
        raise CommandError(str(exc)) from exc
