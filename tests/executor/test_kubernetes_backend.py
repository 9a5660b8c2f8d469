"""The Kubernetes backend, through the official client, against an HTTP Kubernetes API server.

The server (``kube_server.FakeKubeApi``) runs in the test's event loop; the backend talks to it
with a real ``kubernetes.client.ApiClient`` from worker threads. The test plays the kubelet by
changing pod status on the server side and asserts on what the backend reports and on the
objects it created.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from kubernetes.client import ApiClient, Configuration, V1Pod

from executor.backend import Lease, RunStatus
from executor.backends.kubernetes.backend import KubernetesBackend
from executor.backends.kubernetes.manifests import label_value, pod_manifest, pod_name
from executor.backends.kubernetes.status import milli_quantity, run_status
from streams.domain.validation import SubmitPolicy, validate_item
from tests.executor.driving import Clock
from tests.executor.kube_server import FakeKubeApi

EXECUTOR = "exec-a"
# Run ids as the scheduler derives them (streams.domain.ids.run_id_for): the job's ULID and the attempt.
RUN = "01HZY3Q0B6V8N6J6ZQ9V2K4M7A-1"
RUN_2 = "01HZY3Q0B6V8N6J6ZQ9V2K4M7B-2"
POD = pod_name(RUN)
POD_2 = pod_name(RUN_2)


def job_spec(**overrides: Any) -> dict[str, Any]:
    """A JobSubmitted payload as the control plane leases it (schemas/job_submitted.avsc)."""
    container = {
        "name": "main",
        "image": "busybox:1.36",
        "command": ["sh", "-c"],
        "args": ["sleep 5"],
        "env": [{"name": "MODE", "value": "fast"}],
        "working_dir": None,
        "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"cpu": "500m", "memory": "1Gi"}},
        "ports": [{"container_port": 8080, "protocol": "TCP", "name": "http"}],
    }
    spec: dict[str, Any] = {
        "priority": 1000.0,
        "priority_class": "armada-default",
        "client_id": None,
        "namespace": "default",
        "labels": {"app": "train"},
        "annotations": {"armadaproject.io/gangId": "g-1"},
        "pod_spec": {
            "containers": [container],
            "init_containers": [],
            "node_selector": {"disk": "ssd"},
            "tolerations": [{"key": "gpu", "operator": "Exists", "value": None, "effect": "NoSchedule", "toleration_seconds": None}],
            "affinity": {"node_affinity": {"required": [{"match_expressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]}},
            "termination_grace_period_seconds": 12,
            "active_deadline_seconds": 600,
            "priority_class_name": None,
            "restart_policy": None,
            "service_account_name": None,
        },
        "services": [],
        "ingresses": [],
    }
    spec.update(overrides)
    return spec


def lease(run_id: str = RUN, queue: str = "ml", job_set: str = "nightly", **spec: Any) -> Lease:
    return Lease(
        job_id=f"job-{run_id.split('-')[0][-1]}", run_id=run_id, queue=queue, job_set_id=job_set, node="node-1", spec=job_spec(**spec)
    )


def container_status(name: str, state: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "image": "busybox:1.36", "imageID": "", "ready": "running" in state, "restartCount": 0, "state": state}


def running() -> dict[str, Any]:
    return {"phase": "Running", "containerStatuses": [container_status("main", {"running": {"startedAt": "2026-01-01T00:00:00Z"}})]}


def ended(phase: str, *exits: tuple[str, int, str], **pod: str) -> dict[str, Any]:
    statuses = [container_status(name, {"terminated": {"exitCode": code, "reason": reason}}) for name, code, reason in exits]
    return {"phase": phase, "containerStatuses": statuses, **pod}


def waiting(reason: str, message: str) -> dict[str, Any]:
    return {"phase": "Pending", "containerStatuses": [container_status("main", {"waiting": {"reason": reason, "message": message}})]}


@dataclass
class Harness:
    api: FakeKubeApi
    backend: KubernetesBackend
    changes: list[RunStatus] = field(default_factory=list)
    threads: set[int] = field(default_factory=set)

    def on_change(self, status: RunStatus) -> None:
        self.changes.append(status)
        self.threads.add(threading.get_ident())

    def states(self, run_id: str = RUN) -> list[str]:
        return [change.state for change in self.changes if change.run_id == run_id]

    async def start(self) -> list[RunStatus]:
        return await self.backend.start(self.on_change)


async def until(predicate: Callable[[], Any], what: str, timeout: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.01)


def backend_for(api: FakeKubeApi, **settings: Any) -> KubernetesBackend:
    configuration = Configuration()
    configuration.host = api.url
    settings = {"watch_timeout_s": 5, "retention_s": 60, "clock": Clock(), **settings}
    return KubernetesBackend(EXECUTOR, pool="gpu", api_client=ApiClient(configuration), **settings)


@asynccontextmanager
async def cluster(**settings: Any) -> AsyncIterator[Harness]:
    async with FakeKubeApi() as api:
        api.add_node("node-1", {"cpu": "8", "memory": "32Gi", "pods": "110"})
        harness = Harness(api, backend_for(api, **settings))
        try:
            yield harness
        finally:
            await harness.backend.stop()
            harness.backend._api.close()


def run(test: Callable[[], Coroutine[Any, Any, None]]) -> Callable[[], None]:
    """Each test is a coroutine run on a fresh event loop, as the executor runs."""

    def sync() -> None:
        asyncio.run(test())

    sync.__name__ = test.__name__
    sync.__doc__ = test.__doc__
    return sync


# --- names and quantities ------------------------------------------------------------------


def test_label_values_are_kept_when_valid_and_made_safe_and_distinct_otherwise() -> None:
    assert label_value("nightly-2026.01_a") == "nightly-2026.01_a"
    safe = label_value("Team A/ML")
    assert safe.startswith("Team-A-ML-") and len(safe) <= 63
    assert label_value("Team A+ML") != safe
    long = label_value("x" * 100)
    assert len(long) <= 63 and long != label_value("x" * 101)
    assert label_value("/") and label_value("/").isalnum()


def test_pod_names_derive_from_the_run_id_and_are_dns_labels() -> None:
    assert pod_name(RUN) == "flotilla-" + RUN.lower()
    assert pod_name("01HZY3Q0B6V8N6J6ZQ9V2K4M7A-1234") == "flotilla-01hzy3q0b6v8n6j6zq9v2k4m7a-1234"
    odd = pod_name("Run #7 of job/42")
    assert odd == pod_name("Run #7 of job/42") and odd != pod_name("run #7 of job/42")
    assert len(pod_name("r" * 200)) <= 50


def test_a_failed_init_container_is_the_jobs_failure_and_not_a_rejection() -> None:
    pod = V1Pod.from_dict(
        {
            "metadata": {"name": POD, "annotations": {"flotilla.io/run-id": RUN}},
            "spec": {"nodeName": "node-1", "containers": [{"name": "main", "image": "x"}]},
            "status": {
                "phase": "Failed",
                "initContainerStatuses": [container_status("fetch", {"terminated": {"exitCode": 2, "reason": "Error"}})],
                "containerStatuses": [container_status("main", {"waiting": {"reason": "PodInitializing"}})],
            },
        }
    )
    assert pod is not None
    status = run_status(pod)
    assert status is not None and (status.state, status.exit_code) == ("failed", 2)


def test_milli_amounts_are_written_as_kubernetes_quantities() -> None:
    assert milli_quantity(2000) == "2"
    assert milli_quantity(2500) == "2500m"


# --- launching -----------------------------------------------------------------------------


@run
async def test_launch_creates_the_pod_bound_to_the_leased_node_with_services_and_ingress() -> None:
    async with cluster() as h:
        h.api.namespaces.add("team-a")
        await h.start()
        services = [{"type": "NodePort", "ports": [8080], "name": None}, {"type": "Headless", "ports": [8080], "name": "peers"}]
        ingresses = [
            {
                "ports": [8080],
                "annotations": {"ingress.class": "nginx"},
                "tls_enabled": True,
                "cert_name": "team-a-cert",
                "use_cluster_ip": False,
            }
        ]
        await h.backend.launch(lease(queue="Team A/ML", namespace="team-a", services=services, ingresses=ingresses))

        pod = h.api.pod("team-a", POD)
        assert pod is not None
        spec, metadata = pod["spec"], pod["metadata"]
        assert spec["nodeName"] == "node-1" and spec["restartPolicy"] == "Never"
        assert spec["terminationGracePeriodSeconds"] == 12 and spec["activeDeadlineSeconds"] == 600
        assert spec["nodeSelector"] == {"disk": "ssd"}
        assert spec["tolerations"] == [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}]
        terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
        assert terms == [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]
        [main] = spec["containers"]
        assert main["image"] == "busybox:1.36" and main["command"] == ["sh", "-c"] and main["args"] == ["sleep 5"]
        assert main["env"] == [{"name": "MODE", "value": "fast"}]
        assert main["resources"]["requests"] == {"cpu": "500m", "memory": "1Gi"}
        assert main["ports"] == [{"containerPort": 8080, "protocol": "TCP", "name": "http"}]
        labels = metadata["labels"]
        assert labels["flotilla.io/run-id"] == RUN and labels["flotilla.io/job-id"] == "job-A"
        assert labels["flotilla.io/executor"] == EXECUTOR and labels["flotilla.io/job-set"] == "nightly"
        assert labels["flotilla.io/queue"] == label_value("Team A/ML") and labels["app"] == "train"
        assert metadata["annotations"]["flotilla.io/queue"] == "Team A/ML"
        assert metadata["annotations"]["armadaproject.io/gangId"] == "g-1"

        owner = [{"apiVersion": "v1", "kind": "Pod", "name": POD, "uid": metadata["uid"], "controller": True}]
        by_name = {service["metadata"]["name"]: service for service in h.api.of("services")}
        assert set(by_name) == {f"{POD}-nodeport-0", f"{POD}-peers", f"{POD}-ingress-0"}
        assert by_name[f"{POD}-nodeport-0"]["spec"]["type"] == "NodePort"
        assert by_name[f"{POD}-peers"]["spec"]["clusterIP"] == "None"
        for service in by_name.values():
            assert service["metadata"]["ownerReferences"] == owner
            assert service["spec"]["selector"] == {"flotilla.io/run-id": RUN}
            assert service["spec"]["ports"][0]["port"] == 8080
        [ingress] = h.api.of("ingresses")
        host = f"{POD}-8080.team-a.flotilla.local"
        assert ingress["metadata"]["ownerReferences"] == owner
        assert ingress["metadata"]["annotations"]["ingress.class"] == "nginx"
        assert ingress["spec"]["tls"] == [{"hosts": [host], "secretName": "team-a-cert"}]
        [rule] = ingress["spec"]["rules"]
        assert rule["host"] == host
        assert rule["http"]["paths"][0]["backend"]["service"] == {"name": f"{POD}-ingress-0", "port": {"number": 8080}}

        await until(lambda: h.states() == ["pending"], "pending reported")
        assert h.changes[0].node == "node-1" and h.changes[0].queue == "Team A/ML"


WHOLE_POD_SPEC: dict[str, Any] = {
    "nodeSelector": {"disk": "ssd"},
    "priorityClassName": "armada-preemptible",
    "securityContext": {"runAsNonRoot": True, "fsGroup": 2000},
    "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "datasets"}}, {"name": "scratch", "emptyDir": {}}],
    "initContainers": [
        {"name": "fetch", "image": "busybox:1.36", "command": ["true"], "volumeMounts": [{"name": "data", "mountPath": "/data"}]}
    ],
    "containers": [
        {
            "name": "main",
            "image": "busybox:1.36",
            "command": ["sh", "-c", "sleep 5"],
            "env": [{"name": "MODE", "value": "fast"}, {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}],
            "volumeMounts": [{"name": "scratch", "mountPath": "/scratch"}],
            "readinessProbe": {"exec": {"command": ["true"]}, "periodSeconds": 5},
            "securityContext": {"readOnlyRootFilesystem": True},
            "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"cpu": "500m", "memory": "1Gi"}},
        }
    ],
}


@run
async def test_a_pod_spec_given_whole_reaches_the_cluster_whole() -> None:
    """Every field the user wrote reaches the pod; Flotilla puts in only what it decides."""
    spec, problem = validate_item({"priority": 0.0, "pod_spec": {"manifest": WHOLE_POD_SPEC}}, SubmitPolicy())
    assert spec is not None, problem
    async with cluster() as h:
        await h.start()
        await h.backend.launch(Lease(job_id="job-W", run_id=RUN, queue="ml", job_set_id="nightly", node="node-1", spec=spec))
        pod = h.api.pod("default", POD)
        assert pod is not None
        created = pod["spec"]
        assert created["volumes"] == WHOLE_POD_SPEC["volumes"] and created["securityContext"] == WHOLE_POD_SPEC["securityContext"]
        assert created["initContainers"] == WHOLE_POD_SPEC["initContainers"]
        [main] = created["containers"]
        for field_name in ("env", "volumeMounts", "readinessProbe", "securityContext", "resources", "command"):
            assert main[field_name] == WHOLE_POD_SPEC["containers"][0][field_name], field_name
        assert (created["nodeName"], created["restartPolicy"], created["nodeSelector"]) == ("node-1", "Never", {"disk": "ssd"})
        assert created["terminationGracePeriodSeconds"] == 1 and created["activeDeadlineSeconds"] == 3 * 24 * 3600  # settled at submission
        assert "priorityClassName" not in created, "Flotilla's priority classes are not the cluster's"


@run
async def test_a_replayed_lease_is_idempotent() -> None:
    async with cluster() as h:
        await h.start()
        await h.backend.launch(lease(services=[{"type": "NodePort", "ports": [80], "name": None}]))
        await h.backend.launch(lease(services=[{"type": "NodePort", "ports": [80], "name": None}]))
        creates = [r for r in h.api.requests if r[0] == "POST" and r[1].endswith("/pods")]
        assert len(creates) == 1, "a run the backend knows is left alone"

        # A restarted executor that has not listed yet meets 409 Conflict and takes the pod as its own.
        other = backend_for(h.api)
        try:
            await other.launch(lease(services=[{"type": "NodePort", "ports": [80], "name": None}]))
            assert [status.state for status in other.runs()] == ["pending"]
        finally:
            other._api.close()
        assert len(h.api.of("pods")) == 1 and len(h.api.of("services")) == 1


@run
async def test_a_pod_the_cluster_refuses_fails_the_run() -> None:
    async with cluster() as h:
        await h.start()
        await h.backend.launch(lease(namespace="nowhere"))
        [change] = h.changes
        assert (change.state, change.reason) == ("failed", "pod_rejected")
        assert 'namespaces "nowhere" not found' in change.message


# --- watching ------------------------------------------------------------------------------


@run
async def test_watch_reports_pending_running_succeeded_once_each_on_the_loop_thread() -> None:
    async with cluster() as h:
        await h.start()
        await h.backend.launch(lease())
        h.api.set_pod_status("default", POD, running())
        await until(lambda: h.states() == ["pending", "running"], "running reported")
        h.api.set_pod_status("default", POD, running())  # the kubelet repeats itself
        h.api.set_pod_status("default", POD, ended("Succeeded", ("main", 0, "Completed")))
        await until(lambda: h.states() == ["pending", "running", "succeeded"], "succeeded reported")
        await asyncio.sleep(0.05)
        assert h.states() == ["pending", "running", "succeeded"]
        assert h.changes[-1].exit_code == 0
        assert h.threads == {threading.get_ident()}
        assert [(s.run_id, s.state) for s in h.backend.runs()] == [(RUN, "succeeded")]


@run
async def test_a_failed_pod_reports_the_failing_containers_exit_code() -> None:
    async with cluster() as h:
        await h.start()
        await h.backend.launch(lease())
        h.api.set_pod_status("default", POD, ended("Failed", ("sidecar", 0, "Completed"), ("main", 3, "Error")))
        await until(lambda: h.states()[-1:] == ["failed"], "failed reported")
        failed = h.changes[-1]
        assert (failed.exit_code, failed.reason) == (3, "Error")


@run
async def test_a_pod_past_its_active_deadline_fails_with_deadline_exceeded() -> None:
    async with cluster() as h:
        await h.start()
        await h.backend.launch(lease())
        status = ended("Failed", ("main", 137, "Error"), reason="DeadlineExceeded", message="Pod was active too long")
        h.api.set_pod_status("default", POD, status)
        await until(lambda: h.states()[-1:] == ["failed"], "failed reported")
        assert (h.changes[-1].reason, h.changes[-1].exit_code) == ("deadline_exceeded", 137)


@run
async def test_an_image_that_cannot_be_pulled_returns_the_lease_and_deletes_the_pod() -> None:
    async with cluster() as h:
        await h.start()
        await h.backend.launch(lease())
        h.api.set_pod_status("default", POD, waiting("ErrImagePull", "manifest unknown"))
        await until(lambda: h.states() == ["pending", "returned"], "returned reported")
        assert (h.changes[-1].reason, h.changes[-1].message) == ("ErrImagePull", "manifest unknown")
        await until(lambda: h.api.deletions(), "pod deleted")
        assert h.api.deletions()[0][0] == f"/api/v1/namespaces/default/pods/{POD}"
        h.api.finish_deletion("default", POD)
        await until(lambda: h.api.pod("default", POD) is None, "pod gone")
        await asyncio.sleep(0.05)
        assert h.states() == ["pending", "returned"]


@run
async def test_a_pod_the_kubelet_rejects_returns_the_lease() -> None:
    async with cluster() as h:
        await h.start()
        await h.backend.launch(lease())
        h.api.set_pod_status("default", POD, {"phase": "Failed", "reason": "OutOfcpu", "message": "Node didn't have enough resource: cpu"})
        await until(lambda: h.states()[-1:] == ["returned"], "returned reported")
        assert h.changes[-1].reason == "OutOfcpu" and h.changes[-1].exit_code is None


@run
async def test_a_pod_deleted_by_someone_else_fails_the_run() -> None:
    async with cluster() as h:
        await h.start()
        await h.backend.launch(lease())
        h.api.set_pod_status("default", POD, running())
        await until(lambda: h.states()[-1:] == ["running"], "running reported")
        h.api._remove(("pods", "default", POD))
        await until(lambda: h.states()[-1:] == ["failed"], "failed reported")
        assert h.changes[-1].reason == "pod_deleted"


@run
async def test_after_410_gone_the_watch_lists_again_and_misses_nothing() -> None:
    async with cluster() as h:
        await h.start()
        await h.backend.launch(lease())
        await h.backend.launch(lease(run_id=RUN_2))
        await until(lambda: len(h.changes) == 2, "both pending")
        # The pods may be reported from the first list before the watch opens (under load, well before):
        # expire the watch that is open, so that resuming it is what meets 410 Gone.
        await until(lambda: h.api.open_watches > 0, "the watch open")
        h.api.expire_watches()
        # While the backend reconnects: one pod starts, the other is force-deleted.
        h.api.set_pod_status("default", POD, running())
        h.api._remove(("pods", "default", POD_2))
        await until(lambda: h.states() == ["pending", "running"], "running seen after re-listing")
        await until(lambda: h.states(RUN_2) == ["pending", "failed"], "deletion seen after re-listing")
        watches = [r for r in h.api.requests if r[2].get("watch") == "true"]
        assert len(watches) >= 3 and all(r[2]["labelSelector"] == f"flotilla.io/executor={EXECUTOR}" for r in watches)


# --- killing -------------------------------------------------------------------------------


@run
async def test_kill_deletes_with_the_grace_period_and_reports_cancelled_once_the_pod_is_gone() -> None:
    async with cluster() as h:
        await h.start()
        await h.backend.launch(lease(services=[{"type": "Headless", "ports": [80], "name": None}]))
        h.api.set_pod_status("default", POD, running())
        await until(lambda: h.states()[-1:] == ["running"], "running reported")

        await h.backend.kill(RUN, 7, "cancelled")
        assert h.api.deletions() == [(f"/api/v1/namespaces/default/pods/{POD}", 7)]
        deleting = h.api.pod("default", POD)
        assert deleting is not None and deleting["metadata"]["deletionGracePeriodSeconds"] == 7
        # SIGTERM makes the container exit 143: that is the kill, not a failure of the job.
        h.api.set_pod_status("default", POD, ended("Failed", ("main", 143, "Error")))
        await asyncio.sleep(0.1)
        assert h.states() == ["pending", "running"]

        h.api.finish_deletion("default", POD)
        await until(lambda: h.states()[-1:] == ["cancelled"], "cancelled reported")
        assert h.api.of("services") == [], "the pod's services go with it"
        assert h.changes[-1].reason == "cancelled"


@run
async def test_kill_with_no_grace_preempts_at_once_and_unknown_or_ended_runs_are_ignored() -> None:
    clock = Clock()
    async with cluster(clock=clock) as h:
        await h.start()
        await h.backend.launch(lease())
        await h.backend.launch(lease(run_id=RUN_2))
        h.api.set_pod_status("default", POD_2, ended("Succeeded", ("main", 0, "Completed")))
        await until(lambda: h.states(RUN_2)[-1:] == ["succeeded"], "succeeded reported")

        await h.backend.kill("no-such-run", 5, "cancelled")
        await h.backend.kill(RUN_2, 5, "cancelled")
        assert h.api.deletions() == []

        await h.backend.kill(RUN, 0, "preempted")
        await until(lambda: h.states()[-1:] == ["preempted"], "preempted reported")
        assert h.api.deletions() == [(f"/api/v1/namespaces/default/pods/{POD}", 0)]

        # An ended run is held while its pod exists and for the retention after it is gone.
        clock.now += 59
        assert {(s.run_id, s.state) for s in h.backend.runs()} == {(RUN, "preempted"), (RUN_2, "succeeded")}
        clock.now += 1
        assert [(s.run_id, s.state) for s in h.backend.runs()] == [(RUN_2, "succeeded")]


@run
async def test_finished_pods_are_deleted_after_their_time_to_live() -> None:
    async with cluster(clock=time.monotonic, finished_pod_ttl_s=0.05) as h:
        await h.start()
        await h.backend.launch(lease())
        await h.backend.launch(lease(run_id=RUN_2))
        h.api.set_pod_status("default", POD, ended("Succeeded", ("main", 0, "Completed")))
        await until(lambda: h.api.pod("default", POD) is None, "finished pod deleted")
        assert h.api.pod("default", POD_2) is not None, "a running pod is left alone"
        await asyncio.sleep(0.05)
        assert h.states() == ["pending", "succeeded"], "its deletion is not a new outcome"
        assert {(s.run_id, s.state) for s in h.backend.runs()} == {(RUN, "succeeded"), (RUN_2, "pending")}


# --- restart -------------------------------------------------------------------------------


@run
async def test_start_finds_the_pods_an_earlier_process_created_and_then_watches_them() -> None:
    async with cluster() as h:
        for run_id, status in [(RUN, running()), (RUN_2, ended("Succeeded", ("main", 0, "Completed")))]:
            h.api.add_pod("default", pod_manifest(lease(run_id=run_id), EXECUTOR, "default"))
            h.api.set_pod_status("default", pod_name(run_id), status)
        stuck = "01HZY3Q0B6V8N6J6ZQ9V2K4M7C-1"
        h.api.add_pod("default", pod_manifest(lease(run_id=stuck), EXECUTOR, "default"))
        h.api.set_pod_status("default", pod_name(stuck), waiting("ImagePullBackOff", "back-off pulling image"))
        h.api.add_pod("default", pod_manifest(lease(run_id="01HZY3Q0B6V8N6J6ZQ9V2K4M7D-3"), "exec-b", "default"))

        found = await h.start()

        assert {(s.run_id, s.state) for s in found} == {(RUN, "running"), (RUN_2, "succeeded"), (stuck, "returned")}
        assert {s.job_id for s in found} == {"job-A", "job-B", "job-C"}
        assert h.changes == [], "what start returns is not told twice"
        await until(lambda: h.api.deletions(), "stuck pod deleted")
        assert h.api.deletions()[0][0].endswith(pod_name(stuck))
        h.api.set_pod_status("default", POD, ended("Succeeded", ("main", 0, "Completed")))
        await until(lambda: h.states() == ["succeeded"], "the watch follows on from the listing")


@run
async def test_stop_ends_the_watch_and_leaves_the_pods_running() -> None:
    async with cluster() as h:
        await h.start()
        await h.backend.launch(lease())
        await h.backend.stop()
        assert not [t for t in threading.enumerate() if t.name == "flotilla-pod-watch"]
        assert h.api.pod("default", POD) is not None
        assert h.api.deletions() == []


# --- nodes ---------------------------------------------------------------------------------


def other_pod(name: str, node: str | None, phase: str, *requests: dict[str, str], init: dict[str, str] | None = None) -> dict[str, Any]:
    containers = [{"name": f"c{i}", "image": "x", "resources": {"requests": r}} for i, r in enumerate(requests)]
    spec: dict[str, Any] = {"containers": containers}
    if init:
        spec["initContainers"] = [{"name": "init", "image": "x", "resources": {"requests": init}}]
    if node:
        spec["nodeName"] = node
    return {"metadata": {"name": name}, "spec": spec, "status": {"phase": phase}}


@run
async def test_nodes_report_allocatable_labels_taints_and_what_other_pods_take() -> None:
    async with cluster() as h:
        h.api.add_node(
            "node-2",
            {"cpu": "4", "memory": "16Gi"},
            labels={"zone": "a"},
            taints=[{"key": "gpu", "value": "true", "effect": "NoSchedule"}],
            unschedulable=True,
        )
        # Init containers run one at a time: the pod reserves max(2, 0.5 + 1) cpu.
        h.api.add_pod(
            "kube-system",
            other_pod("daemon", "node-1", "Running", {"cpu": "500m", "memory": "1Gi"}, {"cpu": "1"}, init={"cpu": "2"}),
        )
        h.api.add_pod("kube-system", other_pod("starting", "node-1", "Pending", {"cpu": "250m", "memory": "512Mi"}))
        h.api.add_pod("kube-system", other_pod("finished", "node-1", "Succeeded", {"cpu": "3"}))
        h.api.add_pod("kube-system", other_pod("unbound", None, "Pending", {"cpu": "3"}))
        h.api.add_pod("default", pod_manifest(lease(), EXECUTOR, "default"))  # Flotilla's own: not counted

        nodes = {node.name: node for node in await h.backend.nodes()}

        assert nodes["node-1"].allocatable == {"cpu": "8", "memory": "32Gi", "pods": "110"}
        assert nodes["node-1"].non_flotilla_usage == {"cpu": "2250m", "memory": str(1024**3 + 512 * 1024**2)}
        assert not nodes["node-1"].unschedulable
        node_2 = nodes["node-2"]
        assert node_2.labels == {"zone": "a"} and node_2.unschedulable
        assert node_2.taints == ({"key": "gpu", "value": "true", "effect": "NoSchedule"},)
        assert node_2.non_flotilla_usage == {}
        assert h.backend.pool == "gpu"


@run
async def test_a_runs_log_is_the_end_of_its_pods_log_while_the_pod_exists() -> None:
    async with cluster() as h:
        await h.start()
        await h.backend.launch(lease())
        h.api.logs[("default", POD)] = "".join(f"line {i}\n" for i in range(20_000))
        output = await h.backend.logs(RUN, 1_000_000)
        assert output is not None
        lines = output.decode().splitlines()
        assert (len(lines), lines[0], lines[-1]) == (10_000, "line 10000", "line 19999")
        assert await h.backend.logs(RUN, 12) == b"line 10000\nl"
        assert await h.backend.logs("no-such-run", 100) is None
