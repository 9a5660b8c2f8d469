"""The replay commands: `flotilla audit`, `flotilla rebuild --into DIR`, and the time-travel reads
(`flotilla job status JOB --at TIME`, `flotilla get queues --at TIME`).

Each reads the log itself: a running broker's (``--broker``, by default the embedded one, or
``$FLOTILLA_BROKER``) or an archive's (``--from-archive DIR``), through `streams.replay`. The
time-travel reads ask the worker's API (``GET /api/v1/jobs/{id}?at=``, ``/api/v1/queues?at=``),
which folds its broker's log, unless given an archive. Long replays show their progress on
standard error; what they found goes to standard output (``--json`` for scripts).

Exit codes: 0 when the log and its replay agree, 1 when they differ (audit: a divergence; rebuild:
a job whose state differs), 2 when the command cannot read the log.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from streams.client.commands import CommandError
from streams.client.commands.columns import aligned
from streams.client.commands.connection import client_for
from streams.client.progress import Progress
from streams.config import Settings
from streams.gc_tuning import tune_for_long_lived_state
from streams.replay.times import parse_time, show_time

if TYPE_CHECKING:
    from streams.replay.source import LogSource

DIVERGED, UNREADABLE = 1, 2


def add_log_options(parser: argparse.ArgumentParser, *, broker: bool = True) -> None:
    parser.add_argument(
        "--from-archive", type=Path, metavar="DIR", help="read the log from this archive (e.g. .flotilla/log) instead of a broker"
    )
    if broker:
        parser.add_argument(
            "--broker",
            help="the broker whose log to read: kafka://host:port or tansu://host:port (default $FLOTILLA_BROKER, else the embedded"
            " broker at 127.0.0.1:9092); topic names carry $FLOTILLA_TOPIC_PREFIX (default flotilla.)",
        )


def time_option(text: str) -> int:
    try:
        return parse_time(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


@contextmanager
def log_source(args: argparse.Namespace) -> Iterator[LogSource]:
    """The log the command reads; CommandError when it cannot be opened."""
    from streams.archive.source import ArchiveSource
    from streams.replay.source import ArchiveLog, LogUnavailable

    if args.from_archive is not None:
        root: Path = args.from_archive
        if not root.is_dir():
            raise CommandError(f"no log archive at {root} (give the directory with --from-archive, e.g. <state-dir>/log)")
        yield ArchiveLog(ArchiveSource(root))
        return
    from streams.replay.broker import BrokerLog

    try:
        log = BrokerLog(broker_settings(args))
    except LogUnavailable as exc:
        raise CommandError(str(exc)) from exc
    with log:
        yield log


def broker_settings(args: argparse.Namespace) -> Settings:
    """The broker to read and how to reach it: ``--broker``, then FLOTILLA_* variables and the settings file."""
    try:
        return Settings.from_env(broker=getattr(args, "broker", None))
    except ValueError as exc:
        raise CommandError(str(exc)) from exc


def register(commands: Any) -> None:
    audit = commands.add_parser(
        "audit",
        help="repeat every recorded scheduling cycle from the log and compare its decisions with what was recorded",
        description="Replays the scheduler feed from its start, repeats every cycle with the configuration it was decided with, and"
        " compares each decision with the cycle the scheduler committed and with its records on `events`. Exit code 1 on any"
        " divergence, 2 when the log cannot be read.",
    )
    audit.add_argument("--since", type=time_option, metavar="TIME", help="compare only cycles at or after TIME (ISO 8601 or epoch ms)")
    audit.add_argument("--until", type=time_option, metavar="TIME", help="compare only cycles at or before TIME")
    audit.add_argument(
        "--config",
        type=Path,
        action="append",
        default=[],
        metavar="FILE",
        help="a scheduler configuration cycles may have been decided with, for logs whose feed does not carry it (repeatable)",
    )
    audit.add_argument("--json", action="store_true", help="print the report as JSON")
    add_log_options(audit)
    audit.set_defaults(func=_audit)

    rebuild = commands.add_parser(
        "rebuild",
        help="recovery drill: refold `events` from offset 0 into fresh tables under DIR and compare them with the live ones",
        description="Refolds the whole `events` log with the worker's own fold into DIR/jobs and DIR/scheduler-index, and compares"
        " them with the live job-states and scheduler index (read from the broker): counts, and every job whose state differs."
        " Exit code 1 when any differs, 2 when the log cannot be read.",
    )
    rebuild.add_argument("--into", type=Path, required=True, metavar="DIR", help="an empty or new directory for the rebuilt tables")
    rebuild.add_argument("--json", action="store_true", help="print the report as JSON")
    add_log_options(rebuild)
    rebuild.set_defaults(func=_rebuild)


def answer(args: argparse.Namespace, report: dict[str, Any], took: float, lines: Callable[[dict[str, Any], float], list[str]]) -> int:
    """The report as JSON or as ``lines`` say; the exit status: 0 when the log and its replay agree."""
    if args.json:
        print(json.dumps({**report, "seconds": round(took, 3)}, indent=2))
    else:
        print("\n".join(lines(report, took)))
    return 0 if report["ok"] else DIVERGED


# -- audit ---------------------------------------------------------------------------------------


def _audit(args: argparse.Namespace) -> int:
    from streams.archive.reader import ArchiveCorrupt
    from streams.replay.audit import audit
    from streams.replay.cycles import Configurations
    from streams.replay.source import LogUnavailable
    from streams.scheduler.config_file import ConfigFileError, load

    try:
        given = [load(path) for path in args.config]
    except ConfigFileError as exc:
        raise CommandError(str(exc)) from exc
    # A replay holds an index and folds the log as a worker does: it collects garbage as one (streams.gc_tuning).
    tune_for_long_lived_state()
    started = time.monotonic()
    try:
        with log_source(args) as source:
            progress = Progress("replayed", "feed records", out=sys.stderr)
            print(f"auditing the scheduler's cycles from {source.description}", file=sys.stderr, flush=True)
            report = audit(source, Configurations(given), since_ms=args.since, until_ms=args.until, progress=progress.show)
    except (CommandError, LogUnavailable, ArchiveCorrupt) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return UNREADABLE
    return answer(args, report.to_json(), time.monotonic() - started, audit_lines)


def audit_lines(report: dict[str, Any], took: float | None = None) -> list[str]:
    """The audit report for a person: what was checked and matched, then the first divergence in full."""
    rate = f" in {took:.1f} s ({report['feed_records'] / took:,.0f} feed records/s)" if took else ""
    window = "" if report["checked"] == report["cycles"] else f", {report['checked']:,} of them in the window compared"
    lines = [
        f"audit of {report['source']}: {report['feed_records']:,} feed records in {len(report['generations'])} generation(s){rate}",
        f"  cycles repeated       {report['cycles']:,}{window}",
        f"  cycles deciding       {report['deciding']:,}, {report['committed_matched']:,} matching what the scheduler committed",
        f"  decisions             {report['decisions_matched']:,} matched on events",
        f"  scheduler records     {report['events_matched']:,} matched on events ({report['events_read']:,} records of events read)",
    ]
    if report["republished"]:
        lines.append(f"  published again       {report['republished']:,} records, the same (a worker taking over publishes again)")
    if report["in_flight"]:
        lines.append(f"  in flight             {report['in_flight']:,} cycle(s) at the log's end, not yet all published")
    if report["skipped"]:
        lines.append(
            f"  skipped               {report['skipped']:,} feed records that are not feed records (the scheduler skipped them too)"
        )
    for configuration in report["unknown_configurations"]:
        lines.append(f"  note: cycles name configuration {configuration}, which neither the feed nor --config gave")
    first = report["first_divergence"]
    if first is None:
        lines.append("OK: every repeated cycle decided what was recorded")
        return lines
    lines.append(f"DIVERGED: {report['divergences']:,} divergence(s); the first:")
    lines.append(f"  {first['what']}")
    if first["cycle_id"]:
        lines.append(
            f"  cycle {first['cycle_id']} of the tick at {first['generation']}@{first['tick_offset']} ({show_time(first['cycle_time'])})"
        )
    if first["where"]:
        lines.append(f"  where: {first['where']}")
    if first["inputs"]:
        lines.append("  input records:")
        lines += [f"    {line}" for line in first["inputs"]]
    if first["differences"]:
        lines.append("  difference:")
        lines += [f"    {line}" for line in first["differences"]]
    return lines


# -- rebuild -------------------------------------------------------------------------------------


def _rebuild(args: argparse.Namespace) -> int:
    from streams.archive.reader import ArchiveCorrupt
    from streams.replay.rebuild import rebuild
    from streams.replay.source import LogUnavailable

    into: Path = args.into
    if into.exists() and (not into.is_dir() or any(into.iterdir())):
        raise CommandError(f"{into} is not an empty directory: give a new or empty one for the rebuilt tables")
    tune_for_long_lived_state()  # as the audit's
    started = time.monotonic()
    progress = Progress("refolded", "records of events", out=sys.stderr)
    try:
        with log_source(args) as source, live_tables(args, source) as live:
            print(f"rebuilding the jobs table and the scheduler index from {source.description} into {into}", file=sys.stderr, flush=True)
            report = rebuild(source, into, live, progress=lambda done: progress.show(done, None))
    except (CommandError, LogUnavailable, ArchiveCorrupt) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return UNREADABLE
    return answer(args, report.to_json(), time.monotonic() - started, rebuild_lines)


@contextmanager
def live_tables(args: argparse.Namespace, source: LogSource) -> Iterator[Any]:
    """The live job-states and scheduler index changelog: of the broker read, or of the one given beside an
    archive; None (with a warning) when there are none to compare with."""
    from streams.replay.broker import BrokerLog
    from streams.replay.rebuild import LiveTables
    from streams.replay.source import LogUnavailable

    if args.from_archive is not None and args.broker is None:
        print("  no live tables to compare with (give --broker to compare with a running worker's)", file=sys.stderr)
        yield None
        return
    log = source if isinstance(source, BrokerLog) else BrokerLog(broker_settings(args))
    try:
        tables = ("job-states", "scheduler-index-changelog")
        try:
            for table in tables:
                log.partitions(table)
        except LogUnavailable as exc:
            print(f"  warning: {exc}: nothing to compare with", file=sys.stderr)
            yield None
            return
        yield LiveTables(f"{log.description} (job-states and the scheduler index's changelog)", *(log.keyed(table) for table in tables))
    finally:
        if log is not source:
            log.close()


def rebuild_lines(report: dict[str, Any], took: float | None = None) -> list[str]:
    rate = f" in {took:.1f} s ({report['events'] / took:,.0f} events/s)" if took else ""
    states = ", ".join(f"{count:,} {state}" for state, count in report["by_state"].items()) or "none"
    lines = [
        f"rebuilt {report['into']} from {report['events']:,} events{rate}",
        f"  jobs            {report['jobs']:,} ({states})",
        f"  scheduler index {report['index_jobs']:,} unfinished jobs",
    ]
    refused = {k: v for k, v in report["outcomes"].items() if k in ("refused", "unknown_job")}
    if refused:
        lines.append("  the fold refused " + ", ".join(f"{v:,} {k.replace('_', ' ')}" for k, v in refused.items()) + " (as the worker did)")
    if report["live"] is None:
        lines.append("  not compared: no live tables")
        return lines
    lines += [
        f"compared with {report['live']}:",
        f"  jobs            {report['live_jobs']:,} live, {report['same']:,} the same, {len(report['jobs_differing']):,} differing",
        f"  scheduler index {report['live_index_jobs']:,} live unfinished jobs, {len(report['index_differing']):,} differing",
    ]
    for title, key in (("jobs whose state differs", "jobs_differing"), ("scheduler index entries that differ", "index_differing")):
        if report[key]:
            lines.append(f"{title}:")
            rows = [[d["job_id"], d["live"] or "-", d["rebuilt"] or "-", "; ".join(d["differences"])] for d in report[key]]
            lines += [f"  {line}" for line in aligned([["JOB", "LIVE", "REBUILT", "DIFFERENCE"], *rows])]
    lines.append("OK: the rebuilt tables equal the live ones" if report["ok"] else "DIFFERENT: see above")
    return lines


# -- time travel ---------------------------------------------------------------------------------


def job_status_at(args: argparse.Namespace) -> dict[str, Any]:
    """The job as the log said at ``--at`` (now when not given): from an archive, or the worker's API."""
    at: int | None = args.at
    if args.from_archive is None:
        query = f"?at={at}" if at is not None else ""
        return dict(client_for(args).call("GET", f"/api/v1/jobs/{quote(args.job_id, safe='')}{query}"))
    from streams.domain.views import job_view
    from streams.replay.jobs import job_at

    with log_source(args) as source:
        job = job_at(source, args.job_id, at)
    if job is None:
        raise CommandError(f"job {args.job_id!r} not found in {source.description}" + (f" as of {show_time(at)}" if at is not None else ""))
    return {**job_view(job), "as_of": at}


def queues_at(args: argparse.Namespace) -> list[dict[str, Any]]:
    """The queues with their jobs' counts and usage as the log said at ``--at``: from an archive, or the worker's API."""
    if args.from_archive is None:
        return list(client_for(args).call("GET", f"/api/v1/queues?at={args.at}")["queues"])
    from streams.replay.jobs import fold_queues

    with log_source(args) as source:
        progress = Progress("folded", "records of events", out=sys.stderr)
        return fold_queues(source, args.at, lambda done: progress.show(done, None))


def queues_at_table(queues: list[dict[str, Any]], at: int | None) -> list[str]:
    header = ["NAME", "PRIORITY FACTOR", "CORDONED", "QUEUED", "RUNNING", "USAGE"]
    rows = [
        [
            q["name"] + ("" if q["defined"] else " (deleted)"),
            "-" if q["priority_factor"] is None else f"{q['priority_factor']:g}",
            "-" if q["cordoned"] is None else ("yes" if q["cordoned"] else "no"),
            f"{q['queued']:,}",
            f"{q['running']:,}",
            ", ".join(f"{name} {amount:g}" for name, amount in q["usage"].items()) or "-",
        ]
        for q in queues
    ]
    return [f"queues as of {show_time(at)}:", *aligned([header, *rows])]
