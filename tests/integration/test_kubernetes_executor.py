"""A real `flotilla-executor --backend kubernetes` process against a Kubernetes API server.

The API server is ``tests.executor.kube_server.FakeKubeApi``, run on an event loop of its own in
a thread of the test process and reached by the executor through a kubeconfig file, as a real
cluster would be. It has two nodes; nothing on it schedules or runs pods, so the test plays the
kubelet: it changes the status of the pods the executor created, and finishes the graceful
deletion of a pod the executor deleted. What the control plane made of it is read back from
`job-states`.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest
import yaml

from ops.broker import EmbeddedBroker
from tests.executor.kube_server import FakeKubeApi
from tests.integration.helpers import container
from tests.integration.pipeline import Executors, cancel_job_set, new_queue, submit_jobs, wait_states
from tests.integration.workers import Worker, poll, running_worker

pytestmark = pytest.mark.integration

T = TypeVar("T")

EXECUTOR_ID = "kube"
NODES = ("kube-node-a", "kube-node-b")
JOB_ID_LABEL = "flotilla.io/job-id"
EXECUTOR_LABEL = "flotilla.io/executor"
GRACE_S = 7  # the cancelled job's termination grace period, which its pod's deletion must carry


class KubeInThread:
    """``FakeKubeApi`` served from a thread of this process, so the synchronous test can act on
    it. Its state and its watches live on that thread's loop: every read and change goes there
    (``call``), and what comes back is a copy."""

    def __init__(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="fake-kube-api", daemon=True)
        self.api: FakeKubeApi | None = None

    def start(self) -> KubeInThread:
        self._thread.start()

        async def enter() -> FakeKubeApi:
            return await FakeKubeApi().__aenter__()

        self.api = self._run(enter())
        return self

    def stop(self) -> None:
        if self.api is not None:
            self._run(self.api.__aexit__(None, None, None))
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    @property
    def url(self) -> str:
        assert self.api is not None
        return self.api.url

    def _run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(10)

    def call(self, action: Callable[[FakeKubeApi], T]) -> T:
        """``action(api)`` on the server's loop; the result is deep-copied (JSON)."""
        api = self.api
        assert api is not None

        async def run() -> T:
            return json.loads(json.dumps(action(api)))

        return self._run(run())

    # --- what the test reads and does

    def pods_of(self, job_id: str) -> list[dict[str, Any]]:
        def labelled(pod: dict[str, Any]) -> bool:
            return (pod["metadata"].get("labels") or {}).get(JOB_ID_LABEL) == job_id

        return self.call(lambda api: [pod for pod in api.of("pods") if labelled(pod)])

    def pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.call(lambda api: api.pod(namespace, name))

    def set_status(self, pod: dict[str, Any], status: dict[str, Any]) -> None:
        self.call(lambda api: api.set_pod_status(pod["metadata"]["namespace"], pod["metadata"]["name"], status))

    def finish_deletion(self, pod: dict[str, Any]) -> None:
        self.call(lambda api: api.finish_deletion(pod["metadata"]["namespace"], pod["metadata"]["name"]))

    def deletions(self) -> list[tuple[str, Any]]:
        return self.call(lambda api: api.deletions())


def kubeconfig(path: Path, server: str) -> Path:
    """A kubeconfig for a plain-HTTP server that asks for no credentials."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "fake", "cluster": {"server": server}}],
        "users": [{"name": "nobody", "user": {}}],
        "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "nobody"}}],
        "current-context": "fake",
    }
    path.write_text(yaml.safe_dump(config))
    return path


@dataclass
class Cluster:
    kube: KubeInThread
    selector: dict[str, str]  # the label of both nodes, which every job of this module selects


@pytest.fixture(scope="module")
def worker(broker: EmbeddedBroker, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Worker]:
    with running_worker(broker, tmp_path_factory, "kubernetes-executor", FLOTILLA_SCHEDULE_PERIOD_S="0.5") as started:
        yield started


@pytest.fixture(scope="module")
def cluster(worker: Worker, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """The API server with two labelled nodes, and a kubernetes executor process talking to it."""
    executors = Executors(worker, tmp_path_factory.mktemp("kube-executors"))
    kube = KubeInThread().start()
    try:
        allocatable = {"cpu": "4", "memory": "16Gi", "pods": "110"}
        for name in NODES:

            def add(api: FakeKubeApi, name: str = name) -> None:
                api.add_node(name, allocatable, labels=executors.selector)

            kube.call(add)
        config = kubeconfig(executors.directory / "kubeconfig.yaml", kube.url)
        executors.start(EXECUTOR_ID, "kubernetes", "--kubeconfig", str(config))
        try:
            yield Cluster(kube, executors.selector)
        finally:
            executors.stop_all()
            for process in executors.started:
                print(process.log_tail(30))
    finally:
        kube.stop()


# --- the kubelet's reports ------------------------------------------------------------------


def _container_status(state: dict[str, Any]) -> dict[str, Any]:
    ready = "running" in state
    return {"name": "main", "image": "busybox:1.36", "imageID": "", "ready": ready, "restartCount": 0, "state": state}


RUNNING = {"phase": "Running", "containerStatuses": [_container_status({"running": {"startedAt": "2026-01-01T00:00:00Z"}})]}


def ended(phase: str, exit_code: int, reason: str) -> dict[str, Any]:
    return {"phase": phase, "containerStatuses": [_container_status({"terminated": {"exitCode": exit_code, "reason": reason}})]}


# --- helpers --------------------------------------------------------------------------------


def kube_item(selector: dict[str, str], grace_s: int = 1) -> dict[str, Any]:
    return {
        "priority": 0.0,
        "pod_spec": {
            "containers": [container(cpu="1", memory="1Gi")],
            "node_selector": selector,
            "termination_grace_period_seconds": grace_s,
        },
    }


def placed_pod(cluster: Cluster, job_id: str) -> dict[str, Any]:
    """The job's one pod, once the executor created it, bound to one of the nodes."""

    def found() -> dict[str, Any] | None:
        pods = cluster.kube.pods_of(job_id)
        assert len(pods) <= 1, f"more than one pod for job {job_id}: {[p['metadata']['name'] for p in pods]}"
        return pods[0] if pods and pods[0]["spec"].get("nodeName") else None

    pod = poll(found, 30, f"a pod labelled {JOB_ID_LABEL}={job_id} bound to a node", interval=0.2)
    assert pod["spec"]["nodeName"] in NODES
    assert pod["metadata"]["labels"][EXECUTOR_LABEL] == EXECUTOR_ID
    assert pod["spec"]["nodeSelector"] == cluster.selector
    assert pod["spec"]["restartPolicy"] == "Never"
    assert pod["status"]["phase"] == "Pending", "nobody but the test plays the kubelet"
    return pod


def last_run(job: dict[str, Any]) -> dict[str, Any]:
    assert job["runs"], f"job {job['job_id']} ended without a run: {job}"
    return job["runs"][-1]


# --- the tests ------------------------------------------------------------------------------


def test_a_pod_that_succeeds_ends_its_job_succeeded_on_the_pods_node(worker: Worker, cluster: Cluster) -> None:
    queue = new_queue(worker, "kube-succeeds")
    [job_id] = submit_jobs(worker, queue, "one", [kube_item(cluster.selector)])

    pod = placed_pod(cluster, job_id)
    cluster.kube.set_status(pod, RUNNING)
    running = wait_states(worker, [job_id], {"running"}, 20, "the job to run once its pod runs")[job_id]
    assert last_run(running)["node"] == pod["spec"]["nodeName"]

    cluster.kube.set_status(pod, ended("Succeeded", 0, "Completed"))
    job = wait_states(worker, [job_id], {"succeeded"}, 20, "the job to succeed once its pod succeeded")[job_id]
    run = last_run(job)
    assert run["state"] == "succeeded"  # JobRunSucceeded carries no exit code, on any backend
    assert run["executor"] == EXECUTOR_ID
    assert run["node"] == pod["spec"]["nodeName"]
    assert len(job["runs"]) == 1


def test_cancelling_the_job_set_of_a_running_pod_deletes_it_with_the_jobs_grace_period(worker: Worker, cluster: Cluster) -> None:
    queue = new_queue(worker, "kube-cancels")
    [job_id] = submit_jobs(worker, queue, "to-cancel", [kube_item(cluster.selector, grace_s=GRACE_S)])

    pod = placed_pod(cluster, job_id)
    namespace, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
    cluster.kube.set_status(pod, RUNNING)
    wait_states(worker, [job_id], {"running"}, 20, "the job to run once its pod runs")

    cancel_job_set(worker, queue, "to-cancel")

    def deleting() -> dict[str, Any] | None:
        current = cluster.kube.pod(namespace, name)
        assert current is not None, "the running pod went without the kubelet stopping it"
        return current if current["metadata"].get("deletionTimestamp") else None

    terminating = poll(deleting, 30, f"pod {name} to be deleted after the cancel", interval=0.2)
    assert terminating["metadata"]["deletionGracePeriodSeconds"] == GRACE_S
    # Every DELETE asks for the job's grace period. There may be two: the cancel, and one cycle
    # later an orphan cancel_run, as the executor still reports the run while its pod terminates;
    # a repeated graceful delete changes nothing.
    graces = [grace for path, grace in cluster.kube.deletions() if path.endswith(f"/pods/{name}")]
    assert graces and set(graces) == {GRACE_S}, graces

    cluster.kube.finish_deletion(terminating)  # the kubelet stopped the containers: the pod goes
    job = wait_states(worker, [job_id], {"cancelled"}, 20, "the job to end cancelled")[job_id]
    assert last_run(job)["node"] == pod["spec"]["nodeName"]
    assert len(job["runs"]) == 1


def test_a_pod_that_fails_ends_its_job_failed_with_the_containers_exit_code(worker: Worker, cluster: Cluster) -> None:
    queue = new_queue(worker, "kube-fails")
    [job_id] = submit_jobs(worker, queue, "one", [kube_item(cluster.selector)])

    pod = placed_pod(cluster, job_id)
    cluster.kube.set_status(pod, ended("Failed", 3, "Error"))
    job = wait_states(worker, [job_id], {"failed"}, 20, "the job to fail once its pod failed")[job_id]
    run = last_run(job)
    assert (run["state"], run["exit_code"]) == ("failed", 3)
    assert run["node"] == pod["spec"]["nodeName"]
    assert len(job["runs"]) == 1, "a failure of the job's own is not retried"
