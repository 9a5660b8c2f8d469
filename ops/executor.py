"""An executor (`flotilla-executor`) as a child process: start, wait until ready, kill or stop.

`flotilla up` and the integration tests run executors this way, so that what is tested is the
process users run. Ready means the executor printed ``executor <id> ready``: it consumes its
commands and has sent its first report.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from executor.runtime import ready_line
from ops import child

ROOT = Path(__file__).resolve().parents[1]


class ExecutorError(RuntimeError):
    """The executor exited or did not become ready; the message ends with its log's tail."""


@dataclass
class ExecutorProcess:
    executor_id: str
    backend: str  # local, fake or kubernetes
    env: Mapping[str, str]  # the whole environment, FLOTILLA_* settings included
    log_path: Path
    args: Sequence[str] = ()  # further flotilla-executor options: --state-dir, --nodes, --cluster ...
    new_session: bool = False  # True: Ctrl-C in the terminal reaches only the parent, which stops us
    process: subprocess.Popen[bytes] | None = field(default=None, init=False)
    _log_start: int = field(default=0, init=False, repr=False)

    @property
    def command(self) -> list[str]:
        return [sys.executable, "-m", "executor.cli", "--id", self.executor_id, "--backend", self.backend, *self.args]

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def start(self, timeout_s: float = 60.0) -> ExecutorProcess:
        if self.running:
            raise ExecutorError(f"executor {self.executor_id} already running")
        with open(self.log_path, "ab") as log:
            self._log_start = log.tell()  # a restart appends: readiness is looked for after this point
            self.process = subprocess.Popen(
                self.command,
                cwd=ROOT,
                env=dict(self.env),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=self.new_session,
            )
        self.wait_ready(timeout_s)
        return self

    def ready(self) -> bool:
        try:
            with open(self.log_path, "rb") as log:
                log.seek(self._log_start)
                return ready_line(self.executor_id).encode() in log.read()
        except OSError:
            return False

    def wait_ready(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if not self.running:
                code = self.process.returncode if self.process else None
                raise ExecutorError(f"executor {self.executor_id} exited with code {code}\n{self.log_tail()}")
            if self.ready():
                return
            time.sleep(0.1)
        raise ExecutorError(f"executor {self.executor_id} not ready after {timeout_s:.0f}s\n{self.log_tail()}")

    def kill(self) -> None:
        """SIGKILL: no flush, no commit; local runs keep going under their supervisors."""
        if self.running:
            assert self.process is not None
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(10)

    def stop(self, grace_s: float = 15.0) -> None:
        """SIGTERM, then SIGKILL after the grace period."""
        if not self.running:
            return
        assert self.process is not None
        child.stop(self.process, grace_s)

    def log_tail(self, lines: int = 40) -> str:
        return child.log_tail(self.log_path, lines)
