"""The runs a backend holds, shared by the backends that keep their own books.

Reports list ended runs for a while after they end, so the control plane can tell a run that
finished from one that was lost; after ``retention_s`` the ledger forgets them. Ended states are
final: a late or repeated observation never turns a finished run back into a running one, and
only real changes reach ``on_change``, so the runtime need not de-duplicate.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable

from executor.backend import ACTIVE, ENDED, OnChange, RunStatus

RETENTION_S = 60.0


def _ignore(status: RunStatus) -> None:
    """The callback until the runtime starts the backend."""


class RunLedger:
    def __init__(
        self,
        clock: Callable[[], float] = time.monotonic,
        retention_s: float = RETENTION_S,
        on_forget: Callable[[str], None] | None = None,
    ) -> None:
        self.clock = clock
        self.retention_s = retention_s
        self.on_forget = on_forget
        self.on_change: OnChange = _ignore
        self._runs: dict[str, RunStatus] = {}
        # (forget at, run id) in end order: with one retention and a monotonic clock it stays sorted.
        self._expiry: deque[tuple[float, str]] = deque()

    def __contains__(self, run_id: str) -> bool:
        return run_id in self._runs

    def get(self, run_id: str) -> RunStatus | None:
        return self._runs.get(run_id)

    def record(self, status: RunStatus, notify: bool = True) -> bool:
        """Take ``status`` as the run's state; returns whether anything changed."""
        previous = self._runs.get(status.run_id)
        if previous is not None and (previous.state == status.state or previous.state in ENDED):
            return False
        self._runs[status.run_id] = status
        if status.state in ENDED:
            self._expiry.append((self.clock() + self.retention_s, status.run_id))
        if notify:
            self.on_change(status)
        return True

    def active(self) -> list[RunStatus]:
        return [status for status in self._runs.values() if status.state in ACTIVE]

    def runs(self) -> list[RunStatus]:
        self.forget_expired()
        return list(self._runs.values())

    def forget_expired(self) -> None:
        now = self.clock()
        while self._expiry and self._expiry[0][0] <= now:
            _, run_id = self._expiry.popleft()
            del self._runs[run_id]
            if self.on_forget is not None:
                self.on_forget(run_id)
