"""`python -m executor.backends.local.supervise RUN_DIR`: keeps one local run going, whatever the executor does.

The executor may be killed (SIGKILL, a crash, an upgrade) while its jobs run. The job process is
therefore not the executor's child but this supervisor's, in a session of its own: the supervisor
starts it, enforces its active deadline, kills its process group on request, and writes how it
ended to ``result.json``, so a restarted executor finds the outcome, or a live supervisor to adopt.

A kill request is ``stop.json`` followed by SIGTERM to the supervisor: it sends SIGTERM to the
job's process group, SIGKILL after the grace period, and once the job is gone SIGKILL to whatever
is left of the group, so nothing outlives the run.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from executor.backends.local.rundir import CHILD_PID, LAUNCH, OUTPUT, RESULT, STOP, RunDir

DEADLINE_EXCEEDED = "deadline_exceeded"
TERMINATED = "terminated"  # SIGTERM without a stop request: someone else stopped the supervisor
_TICK_S = 0.1


class _StopFlag:
    requested = False

    def set(self, *_: Any) -> None:
        self.requested = True


def _signal_group(pgid: int, signum: int) -> None:
    try:
        os.killpg(pgid, signum)
    except (ProcessLookupError, PermissionError):
        pass


def _exit_fields(returncode: int) -> dict[str, int | None]:
    """Exit code as a container runtime reports it: 128 + signal for a killed process."""
    if returncode < 0:
        return {"exit_code": 128 - returncode, "signal": -returncode}
    return {"exit_code": returncode, "signal": None}


def _finish(run: RunDir, **fields: Any) -> None:
    result = {"exit_code": None, "signal": None, "stopped_by": None, "error": None, **fields}
    run.write_json(RESULT, {**result, "ended_ms": time.time_ns() // 1_000_000})


def supervise(run: RunDir, stop: _StopFlag) -> None:
    launch = run.read_json(LAUNCH)
    if not isinstance(launch, dict):
        _finish(run, error=f"no readable {LAUNCH} in {run.path}")
        return
    grace_s = float(launch.get("grace_period_s") or 0)
    if stop.requested:
        _finish(run, stopped_by=_stop_request(run, grace_s)[0])
        return
    try:
        with open(run.file(OUTPUT), "ab") as output:
            child = subprocess.Popen(
                launch["argv"],
                env=launch["env"],
                cwd=launch["cwd"],
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
    except OSError as exc:
        _finish(run, error=f"cannot start {launch['argv'][0]!r}: {exc.strerror or exc}")
        return
    run.write_text(CHILD_PID, str(child.pid))

    started = time.monotonic()
    deadline = started + launch["deadline_s"] if launch.get("deadline_s") else None
    stopped_by: str | None = None
    force_at: float | None = None
    while True:
        try:
            returncode = child.wait(timeout=_TICK_S)
            break
        except subprocess.TimeoutExpired:
            pass
        now = time.monotonic()
        if stopped_by is None and (stop.requested or (deadline is not None and now >= deadline)):
            stopped_by, grace = _stop_request(run, grace_s) if stop.requested else (DEADLINE_EXCEEDED, grace_s)
            _signal_group(child.pid, signal.SIGTERM)
            force_at = now + grace
        if force_at is not None and now >= force_at:
            _signal_group(child.pid, signal.SIGKILL)
            force_at = None
    _signal_group(child.pid, signal.SIGKILL)  # the job's own children do not outlive it
    _finish(run, stopped_by=stopped_by, **_exit_fields(returncode))


def _stop_request(run: RunDir, default_grace_s: float) -> tuple[str, float]:
    request = run.read_json(STOP)
    if not isinstance(request, dict):
        return TERMINATED, default_grace_s
    return str(request.get("outcome") or TERMINATED), float(request.get("grace_period_s", default_grace_s))


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m executor.backends.local.supervise RUN_DIR", file=sys.stderr)
        return 2
    stop = _StopFlag()
    signal.signal(signal.SIGTERM, stop.set)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    supervise(RunDir(Path(args[0])), stop)
    return 0


if __name__ == "__main__":
    sys.exit(main())
