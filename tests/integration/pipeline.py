"""Helpers for the tests where jobs run: executors as real processes, and the log read back.

Each test gives its queues and executors unique names, so tests sharing a worker do not see
each other's jobs, and cancels what it left running so no job wanders onto the next test's nodes.
"""

from __future__ import annotations

import time
from collections import Counter, defaultdict
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ops.executor import ExecutorProcess
from schemas.codec import decode
from streams.domain.states import ACTIVE
from tests.integration.helpers import call, container, create_queue, submit
from tests.integration.workers import Worker, poll

RUNTIME_ANNOTATION = "flotilla.io/fake-runtime-seconds"


TEST_LABEL = "flotilla.io/test"


def cluster_file(path: Path, groups: list[dict[str, Any]], pool: str | None = None) -> Path:
    """A fake backend's cluster spec: groups of nodes (executor/cluster.py), in ``pool`` if given."""
    path.write_text(yaml.safe_dump({"nodes": groups, **({"pool": pool} if pool else {})}))
    return path


@dataclass
class Executors:
    """The executors one test started; stopped (or found killed) at its end.

    Their nodes carry a label unique to the test, and the test's jobs select it: the nodes of
    an executor stopped by the previous test look alive until the executor timeout passes.
    """

    worker: Worker
    directory: Path
    started: list[ExecutorProcess] = field(default_factory=list)

    @property
    def selector(self) -> dict[str, str]:
        return {TEST_LABEL: self.directory.name}

    def start(self, executor_id: str, backend: str, *args: str) -> ExecutorProcess:
        state_dir = self.directory / "executors" / executor_id  # the layout `flotilla job logs` reads
        state_dir.mkdir(parents=True, exist_ok=True)
        process = ExecutorProcess(
            executor_id=executor_id,
            backend=backend,
            args=("--state-dir", str(state_dir), *args),
            env=self.worker.env(),
            log_path=self.directory / f"{executor_id}.log",
        )
        self.started.append(process)
        return process.start()

    def fake(
        self, executor_id: str, nodes: int, cpu: str = "8", memory: str = "32Gi", pool: str | None = None, **group: Any
    ) -> ExecutorProcess:
        """A fake executor of ``nodes`` identical nodes (``group``: more of a group's fields, e.g. taints)."""
        return self.cluster(executor_id, [{"count": nodes, "prefix": "node", "cpu": cpu, "memory": memory, **group}], pool)

    def cluster(self, executor_id: str, groups: list[dict[str, Any]], pool: str | None = None) -> ExecutorProcess:
        """A fake executor with groups of nodes, each labelled with the test's selector besides its own labels."""
        labelled = [{**group, "labels": {**group.get("labels", {}), **self.selector}} for group in groups]
        spec = cluster_file(self.directory / f"{executor_id}.yaml", labelled, pool)
        return self.start(executor_id, "fake", "--cluster", str(spec))

    def stop_all(self) -> None:
        for process in self.started:
            process.stop()


def fake_item(
    selector: dict[str, str],
    cpu: str = "1",
    memory: str = "1Gi",
    runtime_s: float = 2.0,
    priority_class: str | None = None,
    priority: float = 0.0,
    tolerations: list[dict[str, str]] | None = None,
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A job for the fake backend, which runs it for ``runtime_s``, on nodes matching ``selector``."""
    spec = {
        "containers": [container(cpu=cpu, memory=memory)],
        "priority_class_name": priority_class,
        "node_selector": selector,
        "tolerations": tolerations or [],
    }
    return {"priority": priority, "annotations": {RUNTIME_ANNOTATION: str(runtime_s), **(annotations or {})}, "pod_spec": spec}


def submit_jobs(worker: Worker, queue: str, job_set: str, items: list[dict[str, Any]]) -> list[str]:
    job_ids: list[str] = []
    for start in range(0, len(items), 100):
        status, body = submit(worker.client, queue, job_set, items[start : start + 100])
        assert status == 200, body
        job_ids += body["job_ids"]
    return job_ids


def new_queue(worker: Worker, name: str, priority_factor: float = 1.0) -> str:
    create_queue(worker.client, name, priority_factor=priority_factor)
    return name


def states(worker: Worker, job_ids: list[str]) -> dict[str, dict[str, Any]]:
    """The latest state of each job, as `job-states` holds it (missing jobs are left out)."""
    everything = worker.job_states()
    return {job_id: everything[job_id] for job_id in job_ids if job_id in everything}


def wait_states(worker: Worker, job_ids: list[str], wanted: Collection[str], timeout: float, what: str) -> dict[str, dict[str, Any]]:
    def reached() -> dict[str, dict[str, Any]] | None:
        found = states(worker, job_ids)
        return found if len(found) == len(job_ids) and all(j["state"] in wanted for j in found.values()) else None

    return poll(reached, timeout, what, interval=1.0)


def count_by(jobs: dict[str, dict[str, Any]], key: str = "queue", states_: frozenset[str] = ACTIVE) -> Counter[str]:
    return Counter(job[key] for job in jobs.values() if job["state"] in states_)


def events(worker: Worker, queue: str | None = None) -> list[tuple[str, str | None, str, dict[str, Any]]]:
    """Every event on `events`, in log order per partition: (kind, job id, queue, payload)."""
    found = []
    for record in sorted(worker.read(worker.topic("events")), key=lambda r: (r.partition, r.offset)):
        sequence = decode("event_sequence", record.value)
        if queue is not None and sequence["queue"] != queue:
            continue
        for event in sequence["events"]:
            kind, payload = event["payload"]
            found.append((kind.rsplit(".", 1)[-1], event["job_id"], sequence["queue"], payload))
    return found


def runs_by_job(worker: Worker, queue: str) -> dict[str, list[str]]:
    """Job id -> the kinds of its run-level events, in order."""
    history: dict[str, list[str]] = defaultdict(list)
    for kind, job_id, _, _ in events(worker, queue):
        if job_id is not None:
            history[job_id].append(kind)
    return history


def cancel_job_set(worker: Worker, queue: str, job_set: str) -> None:
    status, body = call(worker.client, "POST", f"/api/v1/queues/{queue}/jobsets/{job_set}/cancel", {"reason": "test over"})
    assert status == 202, body


def settle(seconds: float) -> None:
    """Give the scheduler a few cycles to (not) act, when the test asserts that nothing happens."""
    time.sleep(seconds)
