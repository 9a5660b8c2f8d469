"""The Kubernetes backend: one pod per run, bound to the leased node, observed by a watch.

The cluster holds the truth about runs: a restarted executor lists its pods (selected by the
executor label) and carries on. Blocking client calls run in worker threads; everything that
touches the backend's books runs on the event loop thread, including ``on_change``, so the
runtime never sees a callback from a foreign thread.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import urllib3
from kubernetes import config
from kubernetes.client import (
    ApiClient,
    Configuration,
    CoreV1Api,
    NetworkingV1Api,
    V1DeleteOptions,
    V1Ingress,
    V1Pod,
    V1Service,
)
from kubernetes.client.rest import ApiException

from executor.backend import ENDED, Lease, NodeInfo, OnChange, RunStatus
from executor.backends.kubernetes.manifests import (
    EXECUTOR,
    RUN_ID,
    ingress_manifests,
    label_value,
    pod_manifest,
    service_manifests,
)
from executor.backends.kubernetes.status import meta, node_infos, pod_location, run_status
from executor.backends.kubernetes.watch import PodWatch

log = logging.getLogger(__name__)

RETENTION_S = 60.0
FINISHED_POD_TTL_S = 600.0
SWEEP_PERIOD_S = 30.0
WATCH_TIMEOUT_S = 300
# Lines of a pod's log the API and UI read (the end of it, as `kubectl logs --tail`).
LOG_TAIL_LINES = 10_000
# The API server's answers that mean the pod can never be created as asked, wherever it runs.
INVALID_STATUSES = frozenset({400, 404, 422})
UNFINISHED = "status.phase!=Succeeded,status.phase!=Failed"


def _ignore(status: RunStatus) -> None:
    """The callback until the runtime starts the backend."""


def client_from_config(kubeconfig: str | None) -> ApiClient:
    """An API client from ``kubeconfig``, else the pod's service account, else ~/.kube/config."""
    if kubeconfig:
        return config.new_client_from_config(config_file=kubeconfig)
    try:
        configuration = Configuration()
        config.load_incluster_config(client_configuration=configuration)
        return ApiClient(configuration)
    except config.ConfigException:
        return config.new_client_from_config()


def _api_message(exc: Exception) -> str:
    if isinstance(exc, ApiException):
        try:
            message = json.loads(exc.body or "{}").get("message", "")
        except (ValueError, AttributeError):
            message = ""
        return f"{exc.status} {exc.reason}: {message}".rstrip(": ")
    return repr(exc)


class KubernetesBackend:
    """Runs leases as pods on one cluster.

    ``namespace`` confines the executor to one namespace (for a namespace-scoped service
    account): every pod goes there whatever namespace its job asked for, and only it is watched.
    Without it, pods go to their job's namespace and the watch spans the cluster.
    Ended runs stay in ``runs()`` while their pod exists and for ``retention_s`` after it is gone,
    so the control plane hears how a run ended before the executor forgets it. A finished pod is
    deleted ``finished_pod_ttl_s`` after its run ended (its logs stay readable until then), as
    Armada's executor expires terminated pods; otherwise they would pile up in the cluster.
    """

    def __init__(
        self,
        executor_id: str,
        pool: str = "default",
        namespace: str | None = None,
        kubeconfig: str | None = None,
        api_client: ApiClient | None = None,
        *,
        ingress_host_suffix: str = "flotilla.local",
        watch_timeout_s: int = WATCH_TIMEOUT_S,
        retention_s: float = RETENTION_S,
        finished_pod_ttl_s: float = FINISHED_POD_TTL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.executor_id = executor_id
        self.pool = pool
        self.namespace = namespace
        self.ingress_host_suffix = ingress_host_suffix
        self.retention_s = retention_s
        self.finished_pod_ttl_s = finished_pod_ttl_s
        self._clock = clock
        self._api = api_client if api_client is not None else client_from_config(kubeconfig)
        self._core = CoreV1Api(self._api)
        self._networking = NetworkingV1Api(self._api)
        self._on_change: OnChange = _ignore
        self._loop: asyncio.AbstractEventLoop | None = None
        self._statuses: dict[str, RunStatus] = {}
        self._pods: dict[str, tuple[str, str]] = {}  # run id -> (namespace, name) while its pod exists
        self._killing: dict[str, str] = {}  # run id -> the outcome to report once its pod is gone
        self._ended_at: dict[str, float] = {}  # ended runs whose pod is still there -> when they ended
        self._gone_at: dict[str, float] = {}  # ended runs whose pod is gone -> when it went
        self._tasks: set[asyncio.Task[None]] = set()
        self._sweeper: asyncio.Task[None] | None = None
        self._watch = PodWatch(
            self._core,
            f"{EXECUTOR}={label_value(executor_id)}",
            namespace,
            on_event=lambda kind, pod: self._from_watch(self._observe, kind, pod),
            on_snapshot=lambda pods: self._from_watch(self._resync, pods),
            timeout_s=watch_timeout_s,
        )

    # --- lifecycle -------------------------------------------------------------------------

    async def start(self, on_change: OnChange) -> list[RunStatus]:
        self._loop = asyncio.get_running_loop()
        self._on_change = on_change
        pods, resource_version = await asyncio.to_thread(self._watch.list)
        found = [status for pod in pods if (status := self._observe("ADDED", pod, notify=False)) is not None]
        self._watch.start(resource_version)
        self._sweeper = self._loop.create_task(self._sweep_finished_pods())
        return found

    async def stop(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
        await asyncio.to_thread(self._watch.stop)
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    def runs(self) -> list[RunStatus]:
        self._forget_expired()
        return list(self._statuses.values())

    def reported(self, statuses: list[RunStatus]) -> None:
        """Not noted: a restart reports every pod it finds again (at least once), rather than patching
        each pod with what was reported (an API write per change)."""

    async def logs(self, run_id: str, limit_bytes: int) -> bytes | None:
        """The pod's last `LOG_TAIL_LINES` lines (at most ``limit_bytes``) while the pod exists: Kubernetes keeps them no longer."""
        where = self._pods.get(run_id)
        if where is None:
            return None
        namespace, name = where
        try:
            text = await asyncio.to_thread(
                self._core.read_namespaced_pod_log, name, namespace, tail_lines=LOG_TAIL_LINES, limit_bytes=limit_bytes
            )
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return str(text).encode()

    async def nodes(self) -> list[NodeInfo]:
        nodes, pods = await asyncio.gather(
            asyncio.to_thread(self._core.list_node),
            asyncio.to_thread(self._core.list_pod_for_all_namespaces, field_selector=UNFINISHED),
        )
        return node_infos(nodes.items, pods.items)

    # --- launching -------------------------------------------------------------------------

    async def launch(self, lease: Lease) -> None:
        if lease.run_id in self._statuses:
            return
        namespace = self.namespace or lease.spec.get("namespace") or "default"
        manifest = pod_manifest(lease, self.executor_id, namespace)
        try:
            pod = await self._create_pod(namespace, manifest)
        except (ApiException, urllib3.exceptions.HTTPError) as exc:
            self._refused(lease, exc)
            return
        self._observe("ADDED", pod)
        uid = meta(pod).uid
        assert uid is not None  # the API server gives every pod it creates a uid
        try:
            await self._create_attached(lease, namespace, uid)
        except (ApiException, urllib3.exceptions.HTTPError) as exc:
            self._refused(lease, exc)
            self._delete_later(namespace, pod_location(pod)[1])

    async def _create_pod(self, namespace: str, manifest: dict[str, Any]) -> V1Pod:
        body = V1Pod.from_dict(manifest)
        assert body is not None  # from_dict answers None only for None
        try:
            return await asyncio.to_thread(self._core.create_namespaced_pod, namespace, body)
        except ApiException as exc:
            if exc.status != 409:
                raise
        # Created by an earlier delivery of this lease; the caller finishes what that one may not have.
        return await asyncio.to_thread(self._core.read_namespaced_pod, manifest["metadata"]["name"], namespace)

    async def _create_attached(self, lease: Lease, namespace: str, pod_uid: str) -> None:
        """The job's services and ingresses, owned by the pod so they are deleted with it."""
        manifests = [
            *service_manifests(lease, self.executor_id, namespace, pod_uid),
            *ingress_manifests(lease, self.executor_id, namespace, pod_uid, self.ingress_host_suffix),
        ]
        for manifest in manifests:
            try:
                if manifest["kind"] == "Service":
                    service = V1Service.from_dict(manifest)
                    assert service is not None  # from_dict answers None only for None
                    await asyncio.to_thread(self._core.create_namespaced_service, namespace, service)
                else:
                    ingress = V1Ingress.from_dict(manifest)
                    assert ingress is not None
                    await asyncio.to_thread(self._networking.create_namespaced_ingress, namespace, ingress)
            except ApiException as exc:
                if exc.status != 409:
                    raise

    def _refused(self, lease: Lease, exc: Exception) -> None:
        """The cluster would not take the run: invalid as asked is the job's failure, anything
        else (quota, outage) returns the lease so it can be tried again."""
        invalid = isinstance(exc, ApiException) and exc.status in INVALID_STATUSES
        log.warning("run %s refused by the cluster: %s", lease.run_id, _api_message(exc))
        self._record(
            RunStatus(
                run_id=lease.run_id,
                job_id=lease.job_id,
                queue=lease.queue,
                job_set_id=lease.job_set_id,
                node=lease.node,
                state="failed" if invalid else "returned",
                reason="pod_rejected" if invalid else "submit_failed",
                message=_api_message(exc),
            )
        )
        self._without_pod(lease.run_id)

    # --- killing ---------------------------------------------------------------------------

    async def kill(self, run_id: str, grace_period_s: float, outcome: str) -> None:
        current = self._statuses.get(run_id)
        where = self._pods.get(run_id)
        if current is None or current.state in ENDED or where is None:
            return
        namespace, name = where
        grace = max(0, math.ceil(grace_period_s))
        self._killing[run_id] = outcome
        try:
            await asyncio.to_thread(
                self._core.delete_namespaced_pod,
                name,
                namespace,
                grace_period_seconds=grace,
                body=V1DeleteOptions(grace_period_seconds=grace),
            )
        except ApiException as exc:
            if exc.status == 404:
                self._pod_gone(run_id)
                return
            self._killing.pop(run_id, None)
            log.warning("run %s: pod %s/%s not deleted: %s", run_id, namespace, name, _api_message(exc))

    async def _sweep_finished_pods(self) -> None:
        while True:
            await asyncio.sleep(min(SWEEP_PERIOD_S, self.finished_pod_ttl_s))
            cutoff = self._clock() - self.finished_pod_ttl_s
            for run_id, ended_at in list(self._ended_at.items()):
                where = self._pods.get(run_id)
                if ended_at <= cutoff and where is not None:
                    del self._ended_at[run_id]
                    self._delete_later(*where)

    def _delete_later(self, namespace: str, name: str) -> None:
        """Delete a pod that can never run, in the background (the caller is on the loop)."""

        async def delete() -> None:
            try:
                await asyncio.to_thread(self._core.delete_namespaced_pod, name, namespace)
            except ApiException as exc:
                if exc.status != 404:
                    log.warning("pod %s/%s not deleted: %s", namespace, name, _api_message(exc))

        task = asyncio.get_running_loop().create_task(delete())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # --- observing (event loop thread only) ------------------------------------------------

    def _from_watch(self, handler: Callable[..., Any], *args: Any) -> None:
        """Called on the watch thread: hand the observation to the event loop."""
        assert self._loop is not None
        try:
            self._loop.call_soon_threadsafe(handler, *args)
        except RuntimeError:  # the loop is closed: nobody is left to tell
            self._watch.request_stop()

    def _observe(self, kind: str, pod: V1Pod, notify: bool = True) -> RunStatus | None:
        run_id = (meta(pod).annotations or {}).get(RUN_ID)
        if run_id is None:
            return None
        if kind == "DELETED":
            self._pod_gone(run_id)
            return self._statuses.get(run_id)
        self._pods[run_id] = pod_location(pod)
        status = run_status(pod)
        if status is None or run_id in self._killing:
            # A pod being killed may still fail on SIGTERM; its outcome is already decided.
            return self._statuses.get(run_id)
        if self._record(status, notify) and status.state == "returned":
            self._delete_later(*pod_location(pod))
        return self._statuses[run_id]

    def _resync(self, pods: list[V1Pod]) -> None:
        """A fresh listing after the watch lost track: take every pod's state, and check the
        runs whose pods are missing from it (they may have gone while nobody watched)."""
        listed = set()
        for pod in pods:
            self._observe("MODIFIED", pod)
            listed.add((meta(pod).annotations or {}).get(RUN_ID))
        for run_id, (namespace, name) in list(self._pods.items()):
            if run_id not in listed:
                task = asyncio.get_running_loop().create_task(self._confirm_gone(run_id, namespace, name))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)

    async def _confirm_gone(self, run_id: str, namespace: str, name: str) -> None:
        """Reads the pod rather than trusting the listing, which may predate its creation."""
        try:
            pod = await asyncio.to_thread(self._core.read_namespaced_pod, name, namespace)
        except ApiException as exc:
            if exc.status == 404:
                self._pod_gone(run_id)
            return
        self._observe("MODIFIED", pod)

    def _pod_gone(self, run_id: str) -> None:
        self._pods.pop(run_id, None)
        outcome = self._killing.pop(run_id, None)
        current = self._statuses.get(run_id)
        if current is None:
            return
        if outcome is not None:
            self._record(replace(current, state=outcome, exit_code=None, reason=outcome, message=f"stopped by the executor: {outcome}"))
        else:
            self._record(replace(current, state="failed", reason="pod_deleted", message="the pod was deleted outside Flotilla"))
        self._without_pod(run_id)

    def _without_pod(self, run_id: str) -> None:
        """The ended run has no pod (any more): it is forgotten after the retention."""
        self._ended_at.pop(run_id, None)
        self._gone_at[run_id] = self._clock()

    def _record(self, status: RunStatus, notify: bool = True) -> bool:
        """Take ``status`` as the run's state; an ended state is final and only a change of
        state is told, so replays and repeated watch events reach nobody."""
        previous = self._statuses.get(status.run_id)
        if previous is not None and (previous.state == status.state or previous.state in ENDED):
            return False
        self._statuses[status.run_id] = status
        if status.state in ENDED:
            self._ended_at[status.run_id] = self._clock()
        if notify:
            self._on_change(status)
        return True

    def _forget_expired(self) -> None:
        cutoff = self._clock() - self.retention_s
        for run_id, gone_at in list(self._gone_at.items()):
            if gone_at <= cutoff:
                del self._gone_at[run_id]
                self._statuses.pop(run_id, None)
