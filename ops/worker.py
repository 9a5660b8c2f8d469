"""A control-plane worker (`flotilla worker`) as a child process: start, wait for health, stop.

`flotilla up`, the integration tests and the benchmarks all run workers this way, so that what is
tested and measured is the process users run.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ops import child
from streams.client.rest import Client, ClientError

ROOT = Path(__file__).resolve().parents[1]


class WorkerError(RuntimeError):
    """The worker exited or did not become healthy; the message ends with its log's tail."""


@dataclass
class WorkerProcess:
    env: Mapping[str, str]  # the whole environment, FLOTILLA_* settings included
    log_path: Path
    web_port: int
    new_session: bool = False  # True: Ctrl-C in the terminal reaches only the parent, which stops us
    process: subprocess.Popen[bytes] | None = field(default=None, init=False)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.web_port}"

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def start(self, timeout_s: float = 120.0) -> WorkerProcess:
        if self.running:
            raise WorkerError("worker already running")
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "streams.client.cli", "worker"],
                cwd=ROOT,
                env=dict(self.env),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=self.new_session,
            )
        self.wait_healthy(timeout_s)
        return self

    def healthy(self) -> bool:
        try:
            return Client(self.url, timeout_s=5.0).call("GET", "/health", accept=(503,)).get("status") == "ok"
        except ClientError:
            return False

    def wait_healthy(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if not self.running:
                code = self.process.returncode if self.process else None
                raise WorkerError(f"worker exited with code {code}\n{self.log_tail()}")
            if self.healthy():
                return
            time.sleep(0.3)
        raise WorkerError(f"worker not healthy at {self.url}/health after {timeout_s:.0f}s\n{self.log_tail()}")

    def kill(self) -> None:
        """SIGKILL: no shutdown, no final commit, no goodbye to the consumer group."""
        if self.process is not None:
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
