"""The files of one local run, under ``<state-dir>/runs/<run id>/``.

The run directory is the run's durable record, shared by the executor and the run's supervisor
process: the executor may be killed and restarted at any time while the supervisor keeps the job
going, so everything the executor needs to pick a run up again is written here, each file
atomically (write then rename), never as in-memory state. Standard library only: the supervisor
imports this module and should start fast.

    lease.json       the lease (job, run, queue, job set, node, spec), written before launch
    launch.json      what the supervisor runs: argv, env, cwd, deadline and grace period
    supervisor.pid   the supervisor's pid, written by the executor right after spawning it
    child.pid        the job process's pid, written by the supervisor once it started it
    stop.json        a kill request: outcome (cancelled/preempted) and grace period
    result.json      how the run ended, written by the supervisor (or the executor) last
    output.log       the job's stdout and stderr
    supervisor.log   the supervisor's own errors
    reported         the run's last state the executor put on the log (so a restart does not repeat it)
    forgotten        the executor is done with the run (its outcome was reported long ago)
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

LEASE = "lease.json"
LAUNCH = "launch.json"
SUPERVISOR_PID = "supervisor.pid"
CHILD_PID = "child.pid"
STOP = "stop.json"
RESULT = "result.json"
OUTPUT = "output.log"
SUPERVISOR_LOG = "supervisor.log"
REPORTED = "reported"
FORGOTTEN = "forgotten"


@dataclass(frozen=True)
class RunDir:
    path: Path

    def file(self, name: str) -> Path:
        return self.path / name

    def has(self, name: str) -> bool:
        return (self.path / name).exists()

    def write_json(self, name: str, data: Any) -> None:
        self.write_text(name, json.dumps(data, sort_keys=True))

    def write_text(self, name: str, text: str) -> None:
        """Atomic: a reader sees the old file, no file, or the whole new one."""
        target = self.path / name
        partial = target.with_name(f".{name}.{os.getpid()}.tmp")
        partial.write_text(text)
        os.replace(partial, target)

    def read_json(self, name: str) -> Any | None:
        """The file's content, or ``None`` if it is missing or unreadable."""
        try:
            return json.loads((self.path / name).read_text())
        except (OSError, ValueError):
            return None

    def read_text(self, name: str) -> str | None:
        try:
            return (self.path / name).read_text()
        except OSError:
            return None

    def read_pid(self, name: str) -> int | None:
        try:
            return int((self.path / name).read_text().strip())
        except (OSError, ValueError):
            return None
