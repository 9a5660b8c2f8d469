"""`flotilla up`, stopped hard or with Ctrl-C and started again on the same state directory, has every queue, job
and event back: the log archive is restored into the new embedded broker and every table refolded from it.

One run per way of stopping: two queues and 1,000 jobs over four job sets, some finished (succeeded,
cancelled), some running (sleepers), the rest submitted just before the stop (queued, or leased and
running); then SIGKILL of the whole process group, or SIGINT to it as a terminal's Ctrl-C sends it.
After the restart: both queues exist, every job is found, every job that had finished keeps its end
state, every job's events before the stop (as the archive held them, read with `flotilla log export`)
are a prefix of its events after (as the restarted API streams them), every other job runs to
its end, and after Ctrl-C no job's end is on the log twice. A second `flotilla up` on the same
directory is refused, naming the first one's pid. And an archive damaged before its end stops
`flotilla up` before anything runs, naming the file, the byte and `flotilla log verify`.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import urllib.request
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from ops.broker import free_port
from streams.archive.segments import index_path, read_index, segments_in
from streams.client.rest import Client
from tests.archive.builders import EVENTS, written
from tests.integration.helpers import create_queue, get_job, submit
from tests.integration.test_ops_run import FLOTILLA, READY_LINE, Output, cli, in_the_foreground, listening
from tests.integration.workers import ROOT, poll

pytestmark = pytest.mark.integration

TERMINAL = {"JobSucceeded": "succeeded", "JobFailed": "failed", "JobCancelled": "cancelled", "JobPreempted": "preempted"}
# job set -> (queue, jobs, command, cpu); 1,000 jobs in all.
JOB_SETS = {
    "done": ("a", 100, ["true"], "10m"),
    "cancelled": ("a", 500, ["true"], "64"),  # larger than any local node: queued until its job set is cancelled
    "sleepers": ("a", 20, ["sleep", "4"], "10m"),  # running when the stop comes; they end while Flotilla is down
    "later": ("b", 380, ["true"], "100m"),  # submitted right before the stop: 20 fit at a time, most wait
}
EXPECTED_END = {"done": "succeeded", "cancelled": "cancelled", "sleepers": "succeeded", "later": "succeeded"}


def items(count: int, command: list[str], cpu: str) -> list[dict[str, Any]]:
    resources = {"cpu": cpu, "memory": "16Mi"}
    container = {"name": "c", "image": "none", "command": command, "resources": {"requests": resources, "limits": resources}}
    return [{"priority": 1.0, "pod_spec": {"restart_policy": "Never", "containers": [container]}} for _ in range(count)]


class Up:
    """`flotilla up` on a state directory, in a process group of its own (as a shell would run it)."""

    def __init__(self, state: Path, web_port: int, grpc_port: int) -> None:
        self.url = f"http://127.0.0.1:{web_port}"
        self.process = subprocess.Popen(
            in_the_foreground(
                [str(FLOTILLA), "up", "--state-dir", str(state), "--broker-port", "0"]
                + ["--web-port", str(web_port), "--grpc-port", str(grpc_port)]
            ),
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            text=True,
            start_new_session=True,
        )
        self.output = Output(self.process)

        def ready() -> bool:
            if self.process.poll() is not None:
                raise AssertionError(f"flotilla up exited with {self.process.returncode}:\n{self.output.text}")
            return READY_LINE in self.output.lines

        poll(ready, 300, f"{READY_LINE!r} from flotilla up")

    @property
    def broker_port(self) -> int:
        """The embedded broker's port, from the banner."""
        found = re.search(r"broker +tansu://127\.0\.0\.1:(\d+)", self.output.text)
        assert found, self.output.text
        return int(found.group(1))

    def signal_group(self, signum: int) -> None:
        os.killpg(self.process.pid, signum)
        self.process.wait(60)


def job_set_events(url: str, queue: str, job_set: str) -> list[dict[str, Any]]:
    """The job set's events as the API streams them (server-sent events, up to now)."""
    request = urllib.request.Request(f"{url}/api/v1/queues/{queue}/jobsets/{job_set}/events?watch=false")
    with urllib.request.urlopen(request, timeout=60) as response:
        return [json.loads(line[6:]) for line in response.read().decode().splitlines() if line.startswith("data: ")]


def ends(url: str) -> dict[str, str]:
    """Job id -> end state, for every job of the job sets that has one."""
    found = {}
    for job_set, (queue, *_) in JOB_SETS.items():
        for event in job_set_events(url, queue, job_set):
            if event["job_id"] and event["kind"] in TERMINAL:
                found[event["job_id"]] = TERMINAL[event["kind"]]
    return found


def histories(lines: list[dict[str, Any]]) -> dict[str, list[str]]:
    """Job id -> its events' ids in log order, from `flotilla log export` lines."""
    found: dict[str, list[str]] = defaultdict(list)
    for line in lines:
        for event in line["value"]["events"]:
            if event["job_id"]:
                found[event["job_id"]].append(event["event_id"])
    return found


def archived_histories(state: Path) -> dict[str, list[str]]:
    exported = subprocess.run(
        [str(FLOTILLA), "log", "export", "--from-archive", str(state / "log"), "--topic", "events"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert exported.returncode == 0, exported.stderr
    return histories([json.loads(line) for line in exported.stdout.splitlines()])


def fill(up: Up) -> dict[str, list[str]]:
    """Two queues and the job sets, each brought to its state; returns job set -> job ids."""
    client = Client(up.url, timeout_s=60)
    created = cli(up.url, "create", "queue", "a")
    assert created.returncode == 0, created.stderr
    create_queue(client, "b")
    jobs: dict[str, list[str]] = {}

    def submitted(job_set: str) -> list[str]:
        queue, count, command, cpu = JOB_SETS[job_set]
        status, answer = submit(client, queue, job_set, items(count, command, cpu))
        assert status == 200, answer
        jobs[job_set] = answer["job_ids"]
        return answer["job_ids"]

    def all_ended(job_ids: list[str], state: str) -> bool:
        found = ends(up.url)
        return all(found.get(job_id) == state for job_id in job_ids)

    done = submitted("done")
    poll(lambda: all_ended(done, "succeeded"), 180, "the first job set to succeed", interval=1)
    cancelled = submitted("cancelled")
    cancel = cli(up.url, "cancel", "job-set", "a", "cancelled")
    assert cancel.returncode == 0, cancel.stderr
    poll(lambda: all_ended(cancelled, "cancelled"), 120, "the cancelled job set to be cancelled", interval=1)
    sleepers = set(submitted("sleepers"))

    def running() -> bool:
        return {e["job_id"] for e in job_set_events(up.url, "a", "sleepers") if e["kind"] == "JobRunRunning"} >= sleepers

    poll(running, 120, "the sleepers to run", interval=0.5)
    submitted("later")
    return jobs


def restarted_with_everything(tmp_path: Path, stop: int) -> None:
    state = tmp_path / "state"
    web_port, grpc_port = free_port(), free_port()
    first = Up(state, web_port, grpc_port)
    try:
        jobs = fill(first)
        before = archived_histories(state)  # what is durable now; more may be archived before the stop
        ended_before = {job_id: kinds for job_id, kinds in ends(first.url).items() if job_id in before}
        if stop == signal.SIGKILL:
            command = [str(FLOTILLA), "up", "--state-dir", str(state), "--broker-port", "0"]
            second = subprocess.run(command, capture_output=True, text=True, timeout=60)
            assert second.returncode == 1 and f"is in use by pid {first.process.pid} (flotilla up)" in second.stderr, second.stderr
    finally:
        first.signal_group(stop)
    # Neither way of stopping leaves the broker running (it has a process group of its own, out of the
    # terminal's reach, so that it stops after the processes using it: they stop without errors).
    poll(lambda: not listening(first.broker_port), 10, "the embedded broker to stop with flotilla up")
    if stop == signal.SIGINT:
        executor_log = (state / "executor.log").read_text()
        assert "Traceback" not in executor_log and "ERROR" not in executor_log, executor_log
    assert sum(len(job_ids) for job_ids in jobs.values()) == 1000
    assert len(before) == 1000, "every acknowledged submission is in the archive"

    again = Up(state, web_port, grpc_port)
    try:
        assert re.search(r"restoring the log from .* \([\d,]+ records\)", again.output.text), again.output.text
        assert "refolded" in again.output.text, again.output.text
        queues = cli(again.url, "get", "queues", "--json")
        assert queues.returncode == 0, queues.stderr
        assert {"a", "b"} <= {queue["name"] for queue in json.loads(queues.stdout)}

        everyone = [job_id for job_ids in jobs.values() for job_id in job_ids]
        poll(lambda: len(ends(again.url)) >= len(everyone), 300, "every job to end after the restart", interval=2)
        client = Client(again.url, timeout_s=60)
        for job_set, job_ids in jobs.items():
            for job_id in job_ids:
                job = get_job(client, job_id)
                assert job is not None, f"job {job_id} of {job_set} is lost"
                assert job["state"] == EXPECTED_END[job_set], (job_set, job)
                assert ended_before.get(job_id, job["state"]) == job["state"], f"job {job_id} had ended {ended_before[job_id]}"

        after: dict[str, list[str]] = defaultdict(list)
        ended: dict[str, list[str]] = defaultdict(list)
        for job_set, (queue, *_) in JOB_SETS.items():
            for event in job_set_events(again.url, queue, job_set):
                if event["job_id"]:
                    after[event["job_id"]].append(event["event_id"])
                    if event["kind"] in TERMINAL:
                        ended[event["job_id"]].append(event["kind"])
        for job_id, history in before.items():
            assert after[job_id][: len(history)] == history, f"job {job_id}: its events before the stop are not a prefix of those after"
        if stop == signal.SIGINT:  # a clean stop repeats no run's end (a SIGKILL may, between a produce and its note)
            twice = {job_id: kinds for job_id, kinds in ended.items() if len(kinds) > 1}
            assert not twice, f"{len(twice)} jobs ended more than once on the log, e.g. {sorted(twice.items())[:3]}"
    finally:
        again.signal_group(signal.SIGINT)


def test_a_killed_process_group_restarts_with_every_queue_job_and_event(tmp_path: Path) -> None:
    restarted_with_everything(tmp_path, signal.SIGKILL)


def test_ctrl_c_then_up_again_has_every_queue_job_and_event(tmp_path: Path) -> None:
    restarted_with_everything(tmp_path, signal.SIGINT)


def test_a_damaged_archive_stops_the_start_naming_the_file_the_byte_and_what_to_do(tmp_path: Path) -> None:
    state = tmp_path / "state"
    written(state / "log", groups=20, per_group=20, codec="null", segment_bytes=8_000)
    first, *later = segments_in(state / "log" / EVENTS / "0")
    assert later, "the damage must be before the last segment: not a torn tail"
    block = read_index(index_path(first))[1]
    data = bytearray(first.read_bytes())
    data[block.position + 60] ^= 0xFF
    first.write_bytes(bytes(data))
    command = [str(FLOTILLA), "up", "--state-dir", str(state), "--broker-port", "0", "--web-port", str(free_port())]
    stopped = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=120, start_new_session=True)
    assert stopped.returncode == 1, stopped.stdout + stopped.stderr
    for named in (str(first), f"byte {block.position}", "flotilla log verify"):
        assert named in stopped.stderr, stopped.stderr
    assert not (state / "worker.log").exists(), "no worker may start on a damaged log"
