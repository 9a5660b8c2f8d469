"""Stopping a child process and reading its log: shared by the worker and executor launchers."""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path


def stop(process: subprocess.Popen[bytes], grace_s: float, signum: int = signal.SIGTERM) -> None:
    """SIGTERM (or ``signum``), then SIGKILL after the grace period."""
    process.send_signal(signum)
    try:
        process.wait(grace_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(10)


def log_tail(log_path: Path, lines: int) -> str:
    try:
        text = log_path.read_text(errors="replace").splitlines()
    except OSError:
        return f"(no log at {log_path})"
    return f"--- last {lines} lines of {log_path} ---\n" + "\n".join(text[-lines:])
