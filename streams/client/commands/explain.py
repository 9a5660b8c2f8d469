"""`flotilla explain JOB_ID` and armadactl's `get job-report`, `get queue-report`, `get scheduling-report`.

All read the log (a broker's or an archive's, `streams.client.commands.replaying`), not the API:
they answer for any past cycle, and from an archive with nothing running. `explain` is the whole
story; `get job-report` is the same answer (Armada's name for it); the two reports take
``--cycle ID`` or ``--at TIME`` for an earlier cycle than the last.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from streams.client.commands import CommandError
from streams.client.commands.replays import add_log_options, log_source, time_option
from streams.client.progress import on_stderr


def register(commands: Any, get: Any) -> None:
    """``get``: the subcommands of `flotilla get` (queue, queues...), which the reports join."""
    explain = commands.add_parser(
        "explain", help="a job's story from the log: every event, why it waited each cycle, where it ran, why it was preempted"
    )
    _job_options(explain)
    explain.set_defaults(func=_explain)

    report = get.add_parser(
        "job-report", help="why a job is (not) scheduled, from the log (as armadactl get job-report; = flotilla explain)"
    )
    _job_options(report)
    report.set_defaults(func=_explain)

    queue = get.add_parser("queue-report", help="a queue's shares and jobs in a scheduling cycle (as armadactl get queue-report)")
    queue.add_argument("queue")
    _cycle_options(queue)
    queue.set_defaults(func=_queue_report)

    scheduling = get.add_parser(
        "scheduling-report", help="what a scheduling cycle did per pool and queue (as armadactl get scheduling-report)"
    )
    _cycle_options(scheduling)
    scheduling.set_defaults(func=_scheduling_report)


def _common(parser: argparse.ArgumentParser) -> None:
    add_log_options(parser)
    parser.add_argument("--json", action="store_true", help="print the answer as JSON")
    parser.add_argument("--quiet", "-q", action="store_true", help="no progress on standard error")


def _job_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("job_id")
    _common(parser)
    parser.add_argument(
        "--no-replay",
        action="store_true",
        help="tell only what the cycle records say (no replay of the scheduler feed for what they leave out)",
    )
    parser.add_argument(
        "--config",
        type=Path,
        action="append",
        default=[],
        help="a scheduler configuration file to repeat cycles with, for logs whose feed does not carry one (repeatable)",
    )


def _cycle_options(parser: argparse.ArgumentParser) -> None:
    _common(parser)
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--cycle", metavar="ID", help="this cycle (its id, as explain and the reports show it)")
    which.add_argument(
        "--at",
        type=time_option,
        metavar="TIME",
        help="the last cycle at or before TIME (ISO 8601, UTC unless it says otherwise, or epoch ms)",
    )


@contextmanager
def _answering(args: argparse.Namespace) -> Iterator[Any]:
    """The log, and the errors of reading it as CommandErrors."""
    from streams.archive.reader import ArchiveCorrupt
    from streams.replay.explain import NotFound
    from streams.replay.source import LogUnavailable

    try:
        with log_source(args) as log:
            yield log
    except (NotFound, LogUnavailable, ArchiveCorrupt) as exc:
        raise CommandError(str(exc)) from exc


def _print(args: argparse.Namespace, answer: dict[str, Any], text: Callable[[dict[str, Any]], str]) -> int:
    if args.json:
        print(json.dumps(answer, indent=2, default=str))
    else:
        print(text(answer), end="")
    return 0


def _explain(args: argparse.Namespace) -> int:
    from streams.replay.answers import explain_job
    from streams.replay.report_text import job_report_text
    from streams.scheduler.config_file import ConfigFileError, load

    try:
        configurations = [load(path) for path in args.config]
    except ConfigFileError as exc:
        raise CommandError(str(exc)) from exc
    with _answering(args) as log:
        report = explain_job(log, args.job_id, replay=not args.no_replay, configurations=configurations, progress=on_stderr(args.quiet))
    return _print(args, report, job_report_text)


def _scheduling_report(args: argparse.Namespace) -> int:
    from streams.replay.answers import scheduling
    from streams.replay.report_text import scheduling_report_text

    with _answering(args) as log:
        report = scheduling(log, args.cycle, args.at, on_stderr(args.quiet))
    return _print(args, report, scheduling_report_text)


def _queue_report(args: argparse.Namespace) -> int:
    from streams.replay.answers import queue
    from streams.replay.report_text import queue_report_text

    with _answering(args) as log:
        report = queue(log, args.queue, args.cycle, args.at, on_stderr(args.quiet))
    return _print(args, report, queue_report_text)
