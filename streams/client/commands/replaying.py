"""What every command that reads the log back shares: where the log is, and progress on stderr.

The log is a running broker's (``--broker``, default $FLOTILLA_BROKER or the embedded default's
``tansu://127.0.0.1:9092``, and $FLOTILLA_TOPIC_PREFIX) or an archive directory's
(``--from-archive DIR``: no broker or worker needed). Long reads say how far they got on standard
error, at most a few times a second, so standard output stays the answer.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import cast

from streams.client.commands import CommandError
from streams.replay.source import LogSource, LogUnavailable

PROGRESS_EVERY_S = 0.5


def add_log_options(parser: argparse.ArgumentParser) -> None:
    where = parser.add_mutually_exclusive_group()
    where.add_argument(
        "--broker",
        help="read the log from this broker: kafka://host:port or tansu://host:port (default $FLOTILLA_BROKER, else tansu://127.0.0.1:9092)",
    )
    where.add_argument(
        "--from-archive",
        type=Path,
        metavar="DIR",
        help="read the log from this archive directory instead of a broker (e.g. .flotilla/log, which `flotilla up` keeps)",
    )


@contextmanager
def open_log(args: argparse.Namespace) -> Iterator[LogSource]:
    """The log the options name; a broker that cannot be reached, or a missing archive, is a CommandError."""
    archive: Path | None = getattr(args, "from_archive", None)
    if archive is not None:
        from streams.archive.source import ArchiveSource
        from streams.replay.source import ArchiveLog

        if not archive.is_dir():
            raise CommandError(f"no log archive at {archive} (give the directory with --from-archive, e.g. <state-dir>/log)")
        # ArchiveLog's description is a property where LogSource names an attribute: the same to a reader.
        yield cast(LogSource, ArchiveLog(ArchiveSource(archive)))
        return
    from streams.config import Settings
    from streams.replay.broker import BrokerLog

    try:
        log = BrokerLog(Settings.from_env(broker=getattr(args, "broker", None)))
    except LogUnavailable as exc:
        raise CommandError(str(exc)) from exc
    try:
        yield log
    finally:
        log.close()


class Progress:
    """Prints the latest of what it is told on standard error, at most every `PROGRESS_EVERY_S`,
    rewriting one line on a terminal; `done` ends the line."""

    def __init__(self, quiet: bool = False) -> None:
        self.quiet = quiet
        self.last = 0.0
        self.shown = False
        self.tty = sys.stderr.isatty()

    def __call__(self, message: str) -> None:
        now = time.monotonic()
        if self.quiet or now - self.last < PROGRESS_EVERY_S:
            return
        self.last = now
        self.shown = True
        if self.tty:
            print(f"\r\033[K{message}", end="", file=sys.stderr, flush=True)
        else:
            print(message, file=sys.stderr, flush=True)

    def done(self) -> None:
        if self.shown and self.tty:
            print(file=sys.stderr)
