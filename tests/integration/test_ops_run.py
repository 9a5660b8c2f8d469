"""The README's `ops/run`, in the background: wait for the API, create a queue and submit a job file
with the `flotilla` CLI, see the job run to success on the local executor, watch its events and read
its output, then Ctrl-C (SIGINT) stops everything it started."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from ops.broker import free_port
from streams.client.rest import Client, ClientError
from tests.integration.workers import ROOT, poll

pytestmark = pytest.mark.integration

FLOTILLA = Path(sys.executable).parent / "flotilla"
READY_LINE = "Press Ctrl-C to stop."
JOB_FILE = """\
queue: demo
jobSetId: first
jobs:
  - priority: 0
    clientId: hello-1
    podSpec:
      restartPolicy: Never
      containers:
        - name: hello
          image: busybox:latest
          command: [sh, -c]
          args: ["echo hello"]
          resources:
            requests: {cpu: 100m, memory: 64Mi}
            limits: {cpu: 100m, memory: 64Mi}
"""


def descendants(pid: int) -> set[int]:
    """Every live process below ``pid`` (from /proc)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        parent = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(parent, []).append(int(entry.name))
    found: set[int] = set()
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def alive(pid: int) -> bool:
    """Running, and not a zombie waiting for a reaper."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def listening(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def cli(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "FLOTILLA_URL": url}
    return subprocess.run([str(FLOTILLA), *args], env=env, cwd=ROOT, capture_output=True, text=True, timeout=120)


class Output:
    """Collects a process's stdout lines in a thread so that waiting on it never blocks."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        self.lines: list[str] = []
        self._thread = threading.Thread(target=self._read, args=(process,), daemon=True)
        self._thread.start()

    def _read(self, process: subprocess.Popen[str]) -> None:
        assert process.stdout is not None
        for line in process.stdout:
            self.lines.append(line.rstrip("\n"))

    @property
    def text(self) -> str:
        return "\n".join(self.lines)


def in_the_foreground(argv: list[str]) -> list[str]:
    """``argv`` run with SIGINT at its default, as a terminal runs its foreground job, whatever this process
    inherited: a shell starting a job in the background (``&``, no job control) makes it ignore SIGINT,
    Python keeps an ignored SIGINT ignored, and a Ctrl-C test would then test nothing (seen: ops/test run
    from a background job; `flotilla up` never saw the SIGINT)."""
    restore = "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); os.execv(sys.argv[1], sys.argv[1:])"
    return [sys.executable, "-c", restore, *argv]


def status_of(pid: int) -> str:
    """What the process is doing (state, signals pending, blocked, ignored and caught), for a failure's message."""
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError as exc:
        return str(exc)
    return ", ".join(line for line in lines if line.split(":")[0] in ("State", "SigPnd", "ShdPnd", "SigBlk", "SigIgn", "SigCgt"))


def test_ops_run_serves_the_cli_and_stops_on_ctrl_c(tmp_path: Path) -> None:
    assert FLOTILLA.exists(), f"the flotilla command is not installed next to {sys.executable}"
    web_port, grpc_port = free_port(), free_port()
    url = f"http://127.0.0.1:{web_port}"
    state = tmp_path / "state"
    config = tmp_path / "scheduler.yaml"
    config.write_text("scheduling:\n  maxRetries: 2\n")
    process = subprocess.Popen(
        in_the_foreground(
            [
                str(ROOT / "ops" / "run"),
                "--config",
                str(config),
                "--web-port",
                str(web_port),
                "--grpc-port",
                str(grpc_port),
                "--broker-port",
                "0",
                "--state-dir",
                str(state),
            ]
        ),
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        text=True,
        start_new_session=True,  # its own process group, so a failed test can still clean up all of it
    )
    output = Output(process)
    started: set[int] = set()
    try:

        def ready() -> bool:
            if process.poll() is not None:
                raise AssertionError(f"ops/run exited with {process.returncode}:\n{output.text}")
            started.update(descendants(process.pid))
            return READY_LINE in output.lines

        poll(ready, 240, f"{READY_LINE!r} from ops/run")
        started.update(descendants(process.pid))
        assert f"REST API       {url}" in output.text, output.text
        assert f"gRPC API       127.0.0.1:{grpc_port}" in output.text, output.text
        assert listening(grpc_port), "the gRPC API does not accept connections"
        assert Client(url).call("GET", "/health") == {"status": "ok"}
        printed = re.search(rf"scheduler configuration \({re.escape(str(config))}; hash (\w+)\):", output.text)
        assert printed, f"ops/run did not print the scheduler configuration:\n{output.text}"
        assert "    maxRetries: 2" in output.lines and "    maxQueueLookback: 100000" in output.lines, "resolved: defaults shown too"
        served = Client(url).call("GET", "/api/v1/config")
        assert (served["hash"], served["file"], served["config"]["scheduling"]["maxRetries"]) == (printed.group(1), str(config), 2)
        announced = re.search(r"broker\s+\w+://127\.0\.0\.1:(\d+)", output.text)
        assert announced, f"ops/run did not say where the broker is:\n{output.text}"
        broker_port = int(announced.group(1))
        assert listening(broker_port)
        worker_pid = int(next(line for line in output.lines if "control plane" in line).split("pid", 1)[1].split()[0])
        assert worker_pid in started and alive(worker_pid)
        executor = re.search(r"executor\s+local, pid (\d+)", output.text)
        assert executor, f"ops/run did not say it runs the local executor:\n{output.text}"
        executor_pid = int(executor.group(1))
        assert executor_pid in started and alive(executor_pid)
        assert len([p for p in started if alive(p)]) >= 3, "expected at least the broker, the worker and the executor"

        created = cli(url, "queue", "create", "demo", "--json")
        assert created.returncode == 0, created.stderr
        assert json.loads(created.stdout)["name"] == "demo"

        job_file = tmp_path / "job.yaml"
        job_file.write_text(JOB_FILE)
        submitted = cli(url, "submit", str(job_file), "--json")
        assert submitted.returncode == 0, submitted.stderr
        (job_id,) = json.loads(submitted.stdout)["job_ids"]
        assert job_id

        def found() -> dict[str, Any] | None:
            status = cli(url, "job", "status", job_id, "--json")
            if status.returncode != 0:
                assert "not found" in status.stderr, status.stderr
                return None
            return json.loads(status.stdout)

        job = poll(found, 30, f"`flotilla job status {job_id}` to find the job")
        assert job["state"] in ("queued", "leased", "pending", "running", "succeeded"), job
        assert job["queue"] == "demo" and job["job_set"] == "first" and job["client_id"] == "hello-1"

        # Needs the scheduler to lease the job to the local executor.
        def finished() -> dict[str, Any] | None:
            status = found()
            assert status is not None
            return status if status["state"] not in ("queued", "leased", "pending", "running") else None

        job = poll(finished, 60, f"job {job_id} to finish")
        assert job["state"] == "succeeded", job
        (run,) = job["runs"]
        assert run["executor"] == "local" and run["state"] == "succeeded"

        logs = cli(url, "job", "logs", job_id, "--state-dir", str(state))
        assert logs.returncode == 0, logs.stderr
        assert logs.stdout == "hello\n"

        watched = cli(url, "watch", "demo", "first", "--no-follow", "--json")
        assert watched.returncode == 0, watched.stderr
        events = [json.loads(line) for line in watched.stdout.splitlines()]
        assert {e["job_id"] for e in events} == {job_id}
        kinds = [e["kind"] for e in events]
        assert kinds[0] == "JobSubmitted" and kinds[-1] == "JobSucceeded", kinds
        assert "JobLeased" in kinds and "JobRunRunning" in kinds, kinds

        # re-submitting the same file: the client id makes it the same job
        again = cli(url, "submit", str(job_file), "--json")
        assert again.returncode == 0, again.stderr
        assert json.loads(again.stdout)["job_ids"] == [job_id]

        # Ctrl-C: `flotilla up` stops its children itself
        process.send_signal(signal.SIGINT)
        try:
            code = process.wait(60)
        except subprocess.TimeoutExpired:
            status = status_of(process.pid)
            raise AssertionError(f"ops/run did not stop within 60 s of Ctrl-C ({status}):\n{output.text}") from None
        assert code == 0, output.text
        poll(lambda: not any(alive(p) for p in started), 20, f"every process ops/run started to exit: {[p for p in started if alive(p)]}")
        assert not listening(broker_port), "the broker port still accepts connections"
        assert not listening(web_port), "the REST API still accepts connections"
        assert not listening(grpc_port), "the gRPC API still accepts connections"
        with pytest.raises(ClientError):
            Client(url, timeout_s=2).call("GET", "/health")
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(10)
        for pid in started:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0)
