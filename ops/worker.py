"""A control-plane worker (`flotilla worker`) as a child process: start, wait for health, stop.

`flotilla up`, the integration tests and the benchmarks all run workers this way, so that what is
tested and measured is the process users run.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

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

    def start(self, timeout_s: float = 120.0, on_health: Callable[[dict[str, Any]], None] | None = None) -> WorkerProcess:
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
        self.wait_healthy(timeout_s, on_health)
        return self

    def health(self) -> dict[str, Any] | None:
        """The worker's /health answer (status ok, starting, or refolding with its progress); None while it does not answer."""
        try:
            answer = Client(self.url, timeout_s=5.0).call("GET", "/health", accept=(503,))
        except ClientError:
            return None
        return answer if isinstance(answer, dict) else None

    def healthy(self) -> bool:
        return (self.health() or {}).get("status") == "ok"

    def wait_healthy(self, timeout_s: float, on_health: Callable[[dict[str, Any]], None] | None = None) -> None:
        """Wait for status ok; a refold that moves on (after a restore) extends the wait by ``timeout_s`` each time."""
        deadline = time.monotonic() + timeout_s
        folded = -1
        while time.monotonic() < deadline:
            if not self.running:
                code = self.process.returncode if self.process else None
                raise WorkerError(f"worker exited with code {code}\n{self.log_tail()}")
            health = self.health()
            if health is not None and health.get("status") == "ok":
                return
            if health is not None and health.get("status") == "refolding" and health.get("folded", 0) > folded:
                folded = health["folded"]
                deadline = time.monotonic() + timeout_s
            if health is not None and on_health is not None:
                on_health(health)
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
