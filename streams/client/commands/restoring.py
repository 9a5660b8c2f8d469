"""`flotilla up` and its log: one `up` per state directory, and the archive put back into the fresh broker.

The embedded broker starts empty every time; the log archive under ``<state-dir>/log`` is the log.
Before the worker starts, `restore_log` repairs the archive (a torn tail is cut, with a warning),
creates the topics and re-produces every archived record at its own offset, showing its progress;
the worker then refolds the log, and `Progress.from_health` shows that too, from its /health answer.
"""

from __future__ import annotations

import asyncio
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from streams.archive.lock import DirLock
from streams.archive.restore import archived_count, restore
from streams.archive.writer import ArchiveWriter
from streams.config import Settings
from streams.kafka import kafka_clients
from streams.topics import ensure_topics


def lock_state_dir(state: Path) -> DirLock:
    """Held for as long as `flotilla up` runs; Locked (naming the other's pid) when another one uses the directory."""
    return DirLock(state, "flotilla up").acquire()


def restore_log(settings: Settings) -> int:
    """Repair the archive, create the topics, re-produce the archive into the broker; returns the records restored.

    Raises Locked, ArchiveCorrupt or RestoreError with the reason."""
    archive = Path(settings.archive_dir)
    writer = ArchiveWriter(archive, codec=settings.archive_codec)
    try:
        cuts = writer.open()
    finally:
        writer.close()
    for cut in cuts:
        print(f"warning: {cut}", file=sys.stderr, flush=True)
    asyncio.run(ensure_topics(settings))
    total = archived_count(archive)
    if total == 0:
        return 0
    print(f"restoring the log from {archive} ({total:,} records) into the embedded broker", flush=True)
    line = Progress("restored", "records")
    line.first = (time.monotonic(), 0)
    result = asyncio.run(restore(archive, kafka_clients(settings), lambda p: line.show(p.done, p.total, p.finished)))
    return result.done


@dataclass
class Progress:
    """'<what> N of M <unit> (R <unit>/s, about T s left)', at most once a second, and once more when done.

    The rate counts from the first progress seen, so a start-up before any progress does not lower it."""

    what: str
    unit: str
    every_s: float = 1.0
    shown_at: float = 0.0
    last_done: int = -1
    total: int = 0
    first: tuple[float, int] | None = None  # (time, done) of the first progress

    def show(self, done: int, total: int, finished: bool = False) -> None:
        now = time.monotonic()
        if self.first is None:
            self.first = (now, 0) if finished else (now, done)
        if not finished and (now - self.shown_at < self.every_s or done == self.last_done):
            return
        self.shown_at, self.last_done = now, done
        since, done_then = self.first
        rate = (done - done_then) / (now - since) if now > since else 0.0
        if finished:
            took = f" in {now - since:.1f} s ({rate:,.0f} {self.unit}/s)" if rate else ""
            print(f"  {self.what} {done:,} {self.unit}{took}", flush=True)
            return
        left = f", about {(total - done) / rate:.0f} s left" if rate > 0 and total >= done else ""
        pace = f" ({rate:,.0f} {self.unit}/s{left})" if rate else ""
        print(f"  {self.what} {done:,} of {total:,} {self.unit}{pace}", flush=True)

    def from_health(self, health: dict[str, Any]) -> None:
        """A worker's /health answer while it refolds: {"status": "refolding", "folded", "total"}."""
        if health.get("status") == "refolding":
            self.total = int(health.get("total", 0))
            folded = int(health.get("folded", 0))
            if folded or self.first is not None:
                self.show(folded, self.total)

    def finish(self) -> None:
        """The worker is healthy: what it refolded, if it was seen refolding."""
        if self.total:
            self.show(self.total, self.total, finished=True)
