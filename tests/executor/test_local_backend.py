"""The local backend with real processes: outcomes, logs, kills, deadlines and adoption after a restart."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import signal
import subprocess
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

import pytest

from executor.backend import Lease, RunStatus
from executor.backends.local.backend import LocalBackend
from executor.backends.local.rundir import CHILD_PID, FORGOTTEN, LAUNCH, LEASE, OUTPUT, SUPERVISOR_PID, RunDir
from executor.cluster import uniform_nodes
from tests.executor.builders import job_spec, lease

T = TypeVar("T")
NODES = uniform_nodes(2, "local", "1", "1Gi")
TIMEOUT_S = 15.0


def shell(script: str, **pod_spec: Any) -> Lease:
    return lease(job_spec(command=["sh", "-c"], args=[script], **pod_spec), node="local-0")


def alive(pid: int) -> bool:
    """Running, not a zombie waiting to be reaped."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def group_alive(pgid: int) -> bool:
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[2]) == pgid and fields[0] != "Z":
                return True
    return False


class Harness:
    """A local backend on a state directory, with every change it reported."""

    def __init__(self, state_dir: Path, retention_s: float = 60.0) -> None:
        self.changes: list[RunStatus] = []
        self.backend = LocalBackend(state_dir, NODES, poll_interval_s=0.05, retention_s=retention_s)
        self.found: list[RunStatus] = []

    async def __aenter__(self) -> Harness:
        self.found = await self.backend.start(self.changes.append)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.backend.stop()

    def history(self, run_id: str) -> list[str]:
        return [c.state for c in self.changes if c.run_id == run_id]

    def last(self, run_id: str) -> RunStatus | None:
        found = [c for c in self.changes if c.run_id == run_id]
        return found[-1] if found else None

    async def until(self, run_id: str, *states: str) -> RunStatus:
        deadline = time.monotonic() + TIMEOUT_S
        while (last := self.last(run_id)) is None or last.state not in states:
            assert time.monotonic() < deadline, f"run {run_id} never reached {states}: {self.history(run_id)}"
            await asyncio.sleep(0.02)
        return last

    def run_dir(self, run_id: str) -> RunDir:
        return RunDir(self.backend.runs_dir / run_id)


def run(test: Callable[[], Coroutine[Any, Any, T]]) -> T:
    return asyncio.run(test())


async def wait_for(check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + TIMEOUT_S
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.02)


def test_a_failing_command_reports_its_exit_code_and_keeps_its_output(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with Harness(tmp_path) as h:
            leased = shell("echo hi; exit 3")
            await h.backend.launch(leased)
            ended = await h.until(leased.run_id, "failed")
            assert (ended.exit_code, ended.reason) == (3, "exit code 3")
            assert ended.message == "exit code 3; last output: hi"
            assert h.history(leased.run_id) == ["pending", "running", "failed"]
            assert (tmp_path / "runs" / leased.run_id / "output.log").read_text() == "hi\n"

    run(scenario)


def test_a_command_gets_its_container_env_and_not_the_executors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EXECUTOR_SECRET", "do-not-leak")

    async def scenario() -> None:
        async with Harness(tmp_path) as h:
            leased = lease(
                job_spec(
                    command=["sh", "-c", 'echo "$GREETING ${EXECUTOR_SECRET:-absent} $HOSTNAME $PWD"'], args=[], env={"GREETING": "hello"}
                ),
                node="local-1",
            )
            await h.backend.launch(leased)
            assert (await h.until(leased.run_id, "succeeded", "failed")).state == "succeeded"
            output = h.run_dir(leased.run_id).file("output.log").read_text()
            assert output == f"hello absent local-1 {h.run_dir(leased.run_id).path}\n"

    run(scenario)


def test_kill_sends_sigterm_and_reports_the_outcome_with_nothing_left(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with Harness(tmp_path) as h:
            leased = shell("sleep 60 & wait")
            await h.backend.launch(leased)
            await h.until(leased.run_id, "running")
            child = h.run_dir(leased.run_id).read_pid(CHILD_PID)
            supervisor = h.run_dir(leased.run_id).read_pid(SUPERVISOR_PID)
            assert child and supervisor and alive(child) and alive(supervisor)
            started = time.monotonic()
            await h.backend.kill(leased.run_id, 10, "cancelled")
            ended = await h.until(leased.run_id, "cancelled", "failed", "succeeded")
            assert time.monotonic() - started < 5, "SIGTERM should have been enough"
            assert (ended.state, ended.exit_code) == ("cancelled", 143)
            await wait_for(lambda: not alive(supervisor), "the supervisor to exit")
            assert not group_alive(child), "the background sleep outlived the run"

    run(scenario)


def test_a_process_that_ignores_sigterm_is_killed_after_the_grace_period(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with Harness(tmp_path) as h:
            leased = shell("trap '' TERM; echo trapped; sleep 60 & wait; sleep 60")
            await h.backend.launch(leased)
            await h.until(leased.run_id, "running")
            await wait_for(lambda: "trapped" in h.run_dir(leased.run_id).file("output.log").read_text(), "the trap")
            child = h.run_dir(leased.run_id).read_pid(CHILD_PID)
            assert child is not None
            started = time.monotonic()
            await h.backend.kill(leased.run_id, 1, "preempted")
            ended = await h.until(leased.run_id, "preempted", "failed", "succeeded")
            took = time.monotonic() - started
            assert (ended.state, ended.exit_code) == ("preempted", 137)
            assert 0.9 <= took < 5, f"killed after {took:.1f}s, expected after the 1 s grace period"
            assert not group_alive(child)

    run(scenario)


def test_the_active_deadline_kills_the_run_and_fails_it(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with Harness(tmp_path) as h:
            leased = shell("sleep 60", active_deadline_seconds=1, termination_grace_period_seconds=1)
            started = time.monotonic()
            await h.backend.launch(leased)
            ended = await h.until(leased.run_id, "failed", "succeeded")
            assert 0.9 <= time.monotonic() - started < 5
            assert ended.reason == "deadline_exceeded"
            assert "active deadline of 1 s exceeded" in ended.message

    run(scenario)


@pytest.mark.parametrize(
    ("command", "reason", "message"),
    [
        ([], "no_command", "the first container has no command"),
        (["/no/such/binary"], "launch_error", "cannot start '/no/such/binary'"),
    ],
)
def test_a_command_that_cannot_run_fails_with_a_clear_reason(tmp_path: Path, command: list[str], reason: str, message: str) -> None:
    async def scenario() -> None:
        async with Harness(tmp_path) as h:
            leased = lease(job_spec(command=command, args=[]), node="local-0")
            await h.backend.launch(leased)
            ended = await h.until(leased.run_id, "failed")
            assert ended.reason == reason
            assert message in ended.message

    run(scenario)


def test_a_lease_for_a_node_it_does_not_have_is_returned(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with Harness(tmp_path) as h:
            leased = lease(job_spec(), node="node-7")
            await h.backend.launch(leased)
            assert h.history(leased.run_id) == ["returned"]

    run(scenario)


def test_a_new_backend_adopts_live_and_finished_runs_and_never_starts_one_twice(tmp_path: Path) -> None:
    marker = tmp_path / "starts"
    slow = shell(f"echo started >> {marker}; sleep 1; exit 4")
    quick = shell("exit 0")

    async def first_life() -> None:
        h = Harness(tmp_path)
        await h.__aenter__()
        await h.backend.launch(slow)
        await h.backend.launch(quick)
        await h.until(slow.run_id, "running")
        await h.backend.stop()  # the executor goes away without a word; its runs go on
        await wait_for(lambda: h.run_dir(quick.run_id).has("result.json"), "the quick run to end unwatched")

    async def second_life() -> None:
        async with Harness(tmp_path) as h:
            found = {s.run_id: s.state for s in h.found}
            assert found == {slow.run_id: "running", quick.run_id: "succeeded"}
            await h.backend.launch(slow)  # a lease replayed from the log
            await h.backend.launch(quick)
            ended = await h.until(slow.run_id, "failed")
            assert ended.exit_code == 4
            assert h.history(slow.run_id) == ["failed"]
            assert h.history(quick.run_id) == []

    run(first_life)
    run(second_life)
    assert marker.read_text() == "started\n"


def test_a_restart_hands_back_only_the_states_not_reported_yet(tmp_path: Path) -> None:
    """The runtime says what reached the log; a restart must not put those states on it a second time
    (seen: every run that ended in the minute before `ops/run` stopped was reported succeeded twice)."""
    done = shell("exit 0")
    ended_unreported = shell("exit 3")
    still_running = shell("sleep 60")
    running_then_ended = shell(f"while [ ! -e {tmp_path / 'go'} ]; do sleep 0.05; done")

    async def first_life() -> None:
        h = Harness(tmp_path)
        await h.__aenter__()
        for each in (done, ended_unreported, still_running, running_then_ended):
            await h.backend.launch(each)
        await h.until(done.run_id, "succeeded")
        await h.until(ended_unreported.run_id, "failed")
        await h.until(still_running.run_id, "running")
        await h.until(running_then_ended.run_id, "running")
        h.backend.reported([h.last(done.run_id), h.last(still_running.run_id), h.last(running_then_ended.run_id)])  # type: ignore[list-item]
        h.backend.reported([c for c in h.changes if c.run_id == ended_unreported.run_id and c.state == "running"])
        await h.backend.stop()
        (tmp_path / "go").touch()
        await wait_for(lambda: h.run_dir(running_then_ended.run_id).has("result.json"), "the run to end unwatched")

    async def second_life() -> None:
        async with Harness(tmp_path) as h:
            found = {s.run_id: s.state for s in h.found}
            assert found == {ended_unreported.run_id: "failed", running_then_ended.run_id: "succeeded"}
            held = {s.run_id: s.state for s in h.backend.runs()}  # reports still list every run held
            assert held[done.run_id] == "succeeded" and held[still_running.run_id] == "running"
            await h.backend.kill(still_running.run_id, 0.0, "cancelled")
            await h.until(still_running.run_id, "cancelled")

    run(first_life)
    run(second_life)


def test_a_kill_requested_before_a_restart_is_carried_out_after_it(tmp_path: Path) -> None:
    leased = shell("sleep 60")

    async def first_life() -> None:
        h = Harness(tmp_path)
        await h.__aenter__()
        await h.backend.launch(leased)
        await h.until(leased.run_id, "running")
        await h.backend.stop()
        # as if the executor died between writing the request and signalling the supervisor
        h.run_dir(leased.run_id).write_json("stop.json", {"outcome": "cancelled", "grace_period_s": 1})

    async def second_life() -> None:
        async with Harness(tmp_path) as h:
            assert (await h.until(leased.run_id, "cancelled")).exit_code == 143

    run(first_life)
    run(second_life)


def test_forgotten_runs_are_marked_and_stay_forgotten(tmp_path: Path) -> None:
    leased = shell("echo done")

    async def first_life() -> None:
        async with Harness(tmp_path, retention_s=0.2) as h:
            await h.backend.launch(leased)
            await h.until(leased.run_id, "succeeded")
            await wait_for(lambda: h.run_dir(leased.run_id).has(FORGOTTEN), "the run to be forgotten")
            assert leased.run_id not in {r.run_id for r in h.backend.runs()}

    async def second_life() -> None:
        async with Harness(tmp_path) as h:
            assert h.found == []
            await h.backend.launch(leased)
            await asyncio.sleep(0.2)
            assert h.changes == []

    run(first_life)
    run(second_life)
    assert (tmp_path / "runs" / leased.run_id / "output.log").read_text() == "done\n"


def test_a_run_whose_supervisor_died_before_starting_the_job_is_returned_for_a_retry(tmp_path: Path) -> None:
    """Found after a restart: the lease and launch plan are on disk, the supervisor's pid names a process
    that is gone, and no job was ever started (no child pid, no result)."""
    leased = shell("echo never")
    gone = subprocess.Popen(["true"])
    gone.wait()
    run_dir = RunDir(tmp_path / "runs" / leased.run_id)
    run_dir.path.mkdir(parents=True)
    run_dir.write_json(LEASE, dataclasses.asdict(leased))
    run_dir.write_json(LAUNCH, {"argv": ["echo", "never"], "env": {}, "cwd": str(run_dir.path), "deadline_s": None, "grace_period_s": 1.0})
    run_dir.write_text(SUPERVISOR_PID, str(gone.pid))

    async def scenario() -> list[RunStatus]:
        async with Harness(tmp_path) as h:
            return h.found

    [found] = run(scenario)
    assert (found.run_id, found.state, found.reason) == (leased.run_id, "returned", "supervisor_lost")
    assert not run_dir.has(OUTPUT)


def test_a_run_whose_supervisor_died_fails_and_its_job_is_killed(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with Harness(tmp_path) as h:
            leased = shell("sleep 60")
            await h.backend.launch(leased)
            await h.until(leased.run_id, "running")
            child = h.run_dir(leased.run_id).read_pid(CHILD_PID)
            supervisor = h.run_dir(leased.run_id).read_pid(SUPERVISOR_PID)
            assert child and supervisor
            os.kill(supervisor, signal.SIGKILL)
            ended = await h.until(leased.run_id, "failed")
            assert ended.reason == "supervisor_lost"
            await wait_for(lambda: not alive(child), "the orphaned job to be killed")

    run(scenario)
