"""`flotilla what-if --config OTHER.yaml`: the recorded workload under another scheduler configuration.

Reads the log (a broker's or an archive's), replays its submissions, cancellations and cluster
capacity through the scheduler with the other configuration (`streams.replay.whatif`), and prints
what happened and what would have side by side: a table, or CSV or JSON for scripts; ``--plot``
writes each queue's share over time as an SVG.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from streams.client.commands import CommandError
from streams.client.commands.replays import add_log_options, log_source, time_option
from streams.client.progress import Progress


def register(commands: Any) -> None:
    parser = commands.add_parser(
        "what-if", help="replay the recorded workload with another scheduler configuration and compare with what happened"
    )
    parser.add_argument("--config", type=Path, required=True, help="the other scheduler configuration (YAML, as `flotilla up --config`)")
    parser.add_argument(
        "--from",
        dest="since",
        type=time_option,
        metavar="TIME",
        help="report on jobs submitted and cycles from TIME (ISO 8601 or epoch ms)",
    )
    parser.add_argument("--to", dest="until", type=time_option, metavar="TIME", help="simulate and report up to TIME")
    parser.add_argument(
        "--priority-factor",
        action="append",
        default=[],
        metavar="QUEUE=FACTOR",
        help="give QUEUE this priority factor (weight 1/FACTOR) in the what-if; repeatable",
    )
    parser.add_argument("--format", choices=("table", "csv", "json"), default="table", help="table (default), csv or json")
    parser.add_argument("--plot", type=Path, metavar="FILE.svg", help="write each queue's share over time, both sides, as an SVG")
    parser.add_argument("--top", type=int, default=10, help="jobs whose start moved most to show (default 10)")
    parser.add_argument("--quiet", "-q", action="store_true", help="no progress on standard error")
    add_log_options(parser)
    parser.set_defaults(func=_what_if)


def _weights(pairs: list[str]) -> dict[str, float]:
    weights = {}
    for pair in pairs:
        queue, _, factor = pair.partition("=")
        try:
            value = float(factor)
        except ValueError:
            value = 0.0
        if not queue or value <= 0:
            raise CommandError(f"--priority-factor {pair!r}: give QUEUE=FACTOR with a factor above 0, e.g. team-a=0.5")
        weights[queue] = 1.0 / value
    return weights


def _what_if(args: argparse.Namespace) -> int:
    from streams.archive.reader import ArchiveCorrupt
    from streams.replay import whatif
    from streams.replay.source import LogUnavailable, event_sequences, feed_records
    from streams.replay.whatif_output import csv_text, svg, table
    from streams.scheduler import feed
    from streams.scheduler.config_file import ConfigFileError, load

    try:
        configuration = load(args.config)
    except ConfigFileError as exc:
        raise CommandError(str(exc)) from exc
    weights = _weights(args.priority_factor)
    since, until = args.since, args.until
    if since is not None and until is not None and until < since:
        raise CommandError("--to is before --from")
    reading = Progress("read", "event sequences", out=sys.stderr, quiet=args.quiet)
    workload = whatif.Workload()
    recorded: list[str] = []
    try:
        with log_source(args) as log:
            sequences = 0
            for _, sequence in event_sequences(log, until_ms=until):
                sequences += 1
                if sequences % 10_000 == 0:
                    reading.show(sequences, None)
                workload.read_events([sequence])
            for generation in log.feed_generations():
                feed_read = Progress("read", f"records of the scheduler feed {generation.name}", out=sys.stderr, quiet=args.quiet)
                for placed, record in feed_records(generation):
                    if placed.offset % 10_000 == 0:
                        feed_read.show(placed.offset, generation.end)
                    if isinstance(record, feed.Configuration) and record.hash not in recorded:
                        recorded.append(record.hash)
                    if not isinstance(record, feed.Tick) or until is None or record.time <= until:
                        workload.read_feed([record])
    except (LogUnavailable, ArchiveCorrupt) as exc:
        raise CommandError(str(exc)) from exc
    if not workload.ticks:
        raise CommandError(
            f"{log.description} holds no scheduling cycle (no tick on the scheduler feed) up to the end of the window:"
            " what-if replays the recorded cycles"
        )
    if not workload.jobs:
        raise CommandError(f"{log.description} holds no submitted job up to the end of the window")

    simulating = Progress("simulated", "cycles", out=sys.stderr, quiet=args.quiet)
    simulated = whatif.simulate(workload, configuration.cycle, weights=weights, until_ms=until, progress=simulating.show)
    report = whatif.measure(workload, simulated, configuration.cycle, since_ms=since, until_ms=until, moved_shown=args.top)
    report["recorded_configs"] = recorded
    report["what_if_config"] = configuration.hash
    report["weights"] = weights
    if args.plot is not None:
        try:
            args.plot.write_text(svg(report))
        except OSError as exc:
            raise CommandError(f"cannot write the plot to {args.plot}: {exc.strerror or exc}") from exc
        print(f"wrote {args.plot}", file=sys.stderr)
    if args.format == "json":
        print(json.dumps(report, indent=2))
    elif args.format == "csv":
        print(csv_text(report), end="")
    else:
        print(table(report), end="")
    return 0
