"""The one progress line of the command line's long work: a restore, a worker's refold, the replays.

'<what> N of M <unit> (R <unit>/s, about T s left)', or '<what> N <unit> (R <unit>/s)' when the
total is not known beforehand (a log read to its end), at most once a second, and once more when done.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TextIO


@dataclass
class Progress:
    """The rate counts from the first progress seen, so a start-up before any progress does not lower it."""

    what: str
    unit: str
    every_s: float = 1.0
    shown_at: float = 0.0
    last_done: int = -1
    total: int = 0
    first: tuple[float, int] | None = None  # (time, done) of the first progress
    out: TextIO | None = None  # standard output unless given (the replay commands show it on standard error)
    quiet: bool = False

    def show(self, done: int, total: int | None, finished: bool = False) -> None:
        now = time.monotonic()
        if self.first is None:
            self.first = (now, 0) if finished else (now, done)
        if self.quiet or (not finished and (now - self.shown_at < self.every_s or done == self.last_done)):
            return
        self.shown_at, self.last_done = now, done
        since, done_then = self.first
        rate = (done - done_then) / (now - since) if now > since else 0.0
        if finished:
            took = f" in {now - since:.1f} s ({rate:,.0f} {self.unit}/s)" if rate else ""
            print(f"  {self.what} {done:,} {self.unit}{took}", file=self.out or sys.stdout, flush=True)
            return
        known = total is not None and total >= done
        left = f", about {(total - done) / rate:.0f} s left" if rate > 0 and total is not None and known else ""
        pace = f" ({rate:,.0f} {self.unit}/s{left})" if rate else ""
        of = f" of {total:,}" if total is not None and known else ""
        print(f"  {self.what} {done:,}{of} {self.unit}{pace}", file=self.out or sys.stdout, flush=True)

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


def on_stderr(quiet: bool = False) -> Callable[[str, str], Callable[[int, int | None], None]]:
    """For long pure work in phases (`streams.replay.answers.Phases`): each phase, named by what it does
    and what it counts ("read", "event sequences"), gets its own line on standard error (the replay
    commands' answer is on standard output)."""
    return lambda what, unit: Progress(what, unit, out=sys.stderr, quiet=quiet).show
