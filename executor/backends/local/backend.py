"""The local backend: "nodes" are slices of this machine, a run is a real process.

Each run is started through a supervisor process (``executor.backends.local.supervise``) in a session
of its own, with its lease, pids, kill request and result in ``<state-dir>/runs/<run id>/``. So
a run survives the executor being killed, and a restarted executor adopts it from its directory:
a live supervisor is watched again, a state it reached while the executor was away is reported
(one already on the log is not: ``reported`` notes each run's last state produced), and a
lease replayed from the log finds the directory and starts nothing. Runs are watched by polling
their directories, which is plenty for the handful of processes one machine runs.

The job's output goes to ``runs/<run id>/output.log``, which stays after the run is forgotten.
Node sizes are what the scheduler packs against; processes are not confined to them.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from executor.backend import ACTIVE, ENDED, Lease, NodeInfo, OnChange, RunStatus
from executor.backends.ledger import RETENTION_S, RunLedger
from executor.backends.local.rundir import (
    CHILD_PID,
    FORGOTTEN,
    LAUNCH,
    LEASE,
    OUTPUT,
    REPORTED,
    RESULT,
    STOP,
    SUPERVISOR_LOG,
    SUPERVISOR_PID,
    RunDir,
)
from executor.backends.local.supervise import DEADLINE_EXCEEDED, TERMINATED

log = logging.getLogger(__name__)

DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
DEFAULT_GRACE_S = 30.0  # Kubernetes' default terminationGracePeriodSeconds
_RUN_ID = re.compile(r"^[0-9A-Za-z][0-9A-Za-z_.-]{0,127}$")  # it names a directory
_TAIL_BYTES = 300


@dataclass
class _Run:
    dir: RunDir
    lease: Lease
    supervisor: subprocess.Popen[bytes] | None = None  # None once adopted from an earlier executor


class LocalBackend:
    def __init__(
        self,
        state_dir: Path,
        nodes: Iterable[NodeInfo],
        pool: str = "default",
        poll_interval_s: float = 0.1,
        clock: Callable[[], float] = time.monotonic,
        retention_s: float = RETENTION_S,
    ) -> None:
        self.pool = pool
        self.runs_dir = Path(state_dir) / "runs"
        self.poll_interval_s = poll_interval_s
        self._nodes = tuple(nodes)
        self._node_names = frozenset(node.name for node in self._nodes)
        self._runs: dict[str, _Run] = {}
        self._ledger = RunLedger(clock, retention_s, on_forget=self._forget)
        self._watch: asyncio.Task[None] | None = None

    # ------------------------------------------------------------------ Backend

    async def start(self, on_change: OnChange) -> list[RunStatus]:
        self.runs_dir.mkdir(parents=True, exist_ok=True)
        for path in sorted(self.runs_dir.iterdir()):
            if path.is_dir() and not (path / FORGOTTEN).exists():
                self._adopt(RunDir(path))
        self._ledger.on_change = on_change
        self._watch = asyncio.create_task(self._watch_runs(), name="local-backend-watch")
        return [status for status in self._ledger.runs() if self._runs[status.run_id].dir.read_text(REPORTED) != status.state]

    def reported(self, statuses: list[RunStatus]) -> None:
        last = {status.run_id: status.state for status in statuses}
        for run_id, state in last.items():
            run = self._runs.get(run_id)
            if run is not None:
                run.dir.write_text(REPORTED, state)

    async def stop(self) -> None:
        if self._watch is not None:
            self._watch.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watch
            self._watch = None

    async def nodes(self) -> list[NodeInfo]:
        return list(self._nodes)

    def runs(self) -> list[RunStatus]:
        return self._ledger.runs()

    async def logs(self, run_id: str, limit_bytes: int) -> bytes | None:
        """The end of ``runs/<run id>/output.log``, kept after the run is forgotten."""
        if not _RUN_ID.match(run_id):
            return None
        try:
            with open(self.runs_dir / run_id / OUTPUT, "rb") as output:
                output.seek(0, os.SEEK_END)
                output.seek(max(0, output.tell() - limit_bytes))
                return output.read()
        except OSError:
            return None

    async def launch(self, lease: Lease) -> None:
        if lease.run_id in self._runs:
            return
        if not _RUN_ID.match(lease.run_id):
            log.error("refusing lease of job %s: run id %r cannot name a run directory", lease.job_id, lease.run_id)
            self._ledger.record(_status(lease, "failed", reason="invalid_run_id", message=f"run id {lease.run_id!r} is not valid"))
            return
        run_dir = RunDir(self.runs_dir / lease.run_id)
        try:
            run_dir.path.mkdir()
        except FileExistsError:  # launched by an earlier executor and forgotten since: never twice
            return
        run_dir.write_json(LEASE, dataclasses.asdict(lease))
        run = self._runs[lease.run_id] = _Run(run_dir, lease)
        plan, problem = self._launch_plan(lease, run_dir)
        if problem is not None:
            state, reason, message = problem
            self._settle(run, _status(lease, state, reason=reason, message=message))
            return
        run_dir.write_json(LAUNCH, plan)
        try:
            with open(run_dir.file(SUPERVISOR_LOG), "ab") as errors:
                run.supervisor = subprocess.Popen(
                    [sys.executable, "-m", "executor.backends.local.supervise", str(run_dir.path)],
                    stdin=subprocess.DEVNULL,
                    stdout=errors,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
        except OSError as exc:
            self._settle(run, _status(lease, "failed", reason="executor_error", message=f"cannot start the run's supervisor: {exc}"))
            return
        run_dir.write_text(SUPERVISOR_PID, str(run.supervisor.pid))
        self._ledger.record(_status(lease, "pending"))

    async def kill(self, run_id: str, grace_period_s: float, outcome: str) -> None:
        run, status = self._runs.get(run_id), self._ledger.get(run_id)
        if run is None or status is None or status.state in ENDED or run.dir.has(STOP):
            return
        run.dir.write_json(STOP, {"outcome": outcome, "grace_period_s": max(0.0, float(grace_period_s))})
        self._signal_supervisor(run)

    # ------------------------------------------------------------------ runs on disk

    def _launch_plan(self, lease: Lease, run_dir: RunDir) -> tuple[dict[str, Any], tuple[str, str, str] | None]:
        """What the supervisor runs, or why the lease cannot run: (state, reason, message)."""
        if lease.node not in self._node_names:
            return {}, ("returned", "unknown_node", f"node {lease.node!r} is not one of this executor's nodes")
        pod = lease.spec.get("pod_spec") or {}
        containers = pod.get("containers") or []
        container = containers[0] if containers else {}
        argv = [*(container.get("command") or []), *(container.get("args") or [])]
        if not container.get("command"):
            return {}, ("failed", "no_command", "the first container has no command; the local backend runs commands, not images")
        cwd = container.get("working_dir") or str(run_dir.path)
        if not Path(cwd).is_dir():
            return {}, ("failed", "no_working_dir", f"working directory {cwd!r} does not exist on this machine")
        env = {
            "PATH": os.environ.get("PATH", DEFAULT_PATH),
            "HOME": os.environ.get("HOME", str(run_dir.path)),
            "LANG": "C.UTF-8",
            "HOSTNAME": lease.node,
        }
        env.update({var["name"]: var["value"] for var in container.get("env") or []})
        grace = pod.get("termination_grace_period_seconds")
        plan = {
            "argv": argv,
            "env": env,
            "cwd": cwd,
            "deadline_s": pod.get("active_deadline_seconds") or None,
            "grace_period_s": DEFAULT_GRACE_S if grace is None else float(grace),
        }
        return plan, None

    def _adopt(self, run_dir: RunDir) -> None:
        raw = run_dir.read_json(LEASE)
        try:
            lease = Lease(**raw) if isinstance(raw, dict) else None
        except TypeError:
            lease = None
        if lease is None:
            log.warning("ignoring %s: no readable %s", run_dir.path, LEASE)
            return
        run = self._runs[lease.run_id] = _Run(run_dir, lease)
        status = self._observe(run)
        if status.state in ACTIVE and run_dir.has(STOP):  # the executor died between request and signal
            self._signal_supervisor(run)
        self._ledger.record(status, notify=False)

    async def _watch_runs(self) -> None:
        while True:
            await asyncio.sleep(self.poll_interval_s)
            try:
                self.poll()
            except Exception:  # a bad run directory must not stop watching the others
                log.exception("watching local runs failed")

    def poll(self) -> None:
        """Look at every active run once and report what changed."""
        for status in self._ledger.active():
            run = self._runs[status.run_id]
            observed = self._observe(run)
            if observed.state in ENDED and status.state == "pending" and run.dir.has(CHILD_PID):
                self._ledger.record(_status(run.lease, "running"))  # it ran, if only between two looks
            self._ledger.record(observed)
        self._ledger.forget_expired()

    def _observe(self, run: _Run) -> RunStatus:
        alive = self._supervisor_alive(run)  # before the result: a supervisor writes it, then exits
        result = run.dir.read_json(RESULT)
        if result is not None:
            return _ended(run, result)
        if not alive:
            _kill_job_group(run.dir)  # without its supervisor nothing would ever stop the job
            return self._settle(run, _lost(run))
        return _status(run.lease, "running" if run.dir.has(CHILD_PID) else "pending")

    def _settle(self, run: _Run, status: RunStatus) -> RunStatus:
        """An outcome the executor decided itself, kept in the run directory like a supervisor's."""
        run.dir.write_json(
            RESULT,
            {"state": status.state, "reason": status.reason, "message": status.message, "ended_ms": time.time_ns() // 1_000_000},
        )
        self._ledger.record(status)
        return status

    def _supervisor_alive(self, run: _Run) -> bool:
        if run.supervisor is not None:
            return run.supervisor.poll() is None  # also reaps it
        pid = run.dir.read_pid(SUPERVISOR_PID)
        if pid is None:
            return False
        try:  # a recycled pid belongs to some other process: its command line does not name this run
            return str(run.dir.path).encode() in Path(f"/proc/{pid}/cmdline").read_bytes()
        except FileNotFoundError:
            return False
        except OSError:
            return _pid_exists(pid)

    def _signal_supervisor(self, run: _Run) -> None:
        pid = run.supervisor.pid if run.supervisor is not None else run.dir.read_pid(SUPERVISOR_PID)
        if pid is not None and self._supervisor_alive(run):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)

    def _forget(self, run_id: str) -> None:
        run = self._runs.pop(run_id, None)
        if run is not None:
            run.dir.write_text(FORGOTTEN, "")


def _status(lease: Lease, state: str, **fields: Any) -> RunStatus:
    return RunStatus(lease.run_id, lease.job_id, lease.queue, lease.job_set_id, lease.node, state, **fields)


def _lost(run: _Run) -> RunStatus:
    """A run whose supervisor is gone without writing a result."""
    if not run.dir.has(SUPERVISOR_PID):
        return _status(run.lease, "returned", reason="launch_interrupted", message="the executor stopped while launching the run")
    stop = run.dir.read_json(STOP)
    if isinstance(stop, dict) and stop.get("outcome") in ("cancelled", "preempted"):
        # a kill that reached the supervisor before it could start the job
        return _status(run.lease, stop["outcome"], reason=stop["outcome"], message="stopped before the job started")
    if not run.dir.has(CHILD_PID):
        # The job never ran: like a pod lost before its container started, the lease goes back and the
        # job is retried under its retry policy, rather than failed for something it did not do.
        message = f"the run's supervisor exited before starting the job (see {run.dir.file(SUPERVISOR_LOG)})"
        return _status(run.lease, "returned", reason="supervisor_lost", message=message)
    return _status(
        run.lease,
        "failed",
        reason="supervisor_lost",
        message=f"the run's supervisor exited without recording an outcome (see {run.dir.file(SUPERVISOR_LOG)})",
    )


def _ended(run: _Run, result: dict[str, Any]) -> RunStatus:
    lease = run.lease
    if "state" in result:  # decided by the executor itself (see LocalBackend._settle)
        return _status(lease, result["state"], reason=result.get("reason", ""), message=result.get("message", ""))
    exit_code, stopped_by = result.get("exit_code"), result.get("stopped_by")
    if stopped_by in ("cancelled", "preempted"):
        return _status(lease, stopped_by, exit_code=exit_code, reason=stopped_by, message=f"stopped by the executor: {stopped_by}")
    if stopped_by == DEADLINE_EXCEEDED:
        deadline = (lease.spec.get("pod_spec") or {}).get("active_deadline_seconds")
        message = f"active deadline of {deadline} s exceeded; the process was killed"
        return _status(lease, "failed", exit_code=exit_code, reason=DEADLINE_EXCEEDED, message=message)
    if result.get("error"):
        return _status(lease, "failed", reason="launch_error", message=result["error"])
    if stopped_by == TERMINATED:
        return _status(lease, "failed", exit_code=exit_code, reason=TERMINATED, message="the run's supervisor was sent SIGTERM")
    if exit_code == 0:
        return _status(lease, "succeeded", exit_code=0)
    detail = f"exit code {exit_code}" + (f" (signal {result['signal']})" if result.get("signal") else "")
    tail = _output_tail(run.dir.file(OUTPUT))
    return _status(lease, "failed", exit_code=exit_code, reason=detail, message=f"{detail}; last output: {tail}" if tail else detail)


def _output_tail(path: Path) -> str:
    """The end of the job's output, for a failure message people can act on."""
    try:
        with open(path, "rb") as output:
            output.seek(0, os.SEEK_END)
            output.seek(max(0, output.tell() - _TAIL_BYTES))
            lines = output.read().decode(errors="replace").strip().splitlines()
    except OSError:
        return ""
    return lines[-1] if lines else ""


def _kill_job_group(run_dir: RunDir) -> None:
    pid = run_dir.read_pid(CHILD_PID)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        # the job leads its own session; a pid that no longer leads a group was recycled
        if pid is not None and os.getpgid(pid) == pid:
            os.killpg(pid, signal.SIGKILL)


def _pid_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
