"""List-then-watch of one executor's pods, on a thread of its own.

The official client is synchronous and a watch blocks for as long as the stream is open, so it
gets a daemon thread rather than a slot in asyncio's default executor: a stuck read must never
hold up the event loop's shutdown. The watch resumes from the last resource version it saw; when
the server has compacted that version away (410 Gone) or the stream failed, it lists afresh and
hands the whole snapshot over, so no change is lost while disconnected.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from contextlib import closing
from typing import Any

from kubernetes import watch
from kubernetes.client import CoreV1Api, V1Pod
from kubernetes.client.rest import ApiException

log = logging.getLogger(__name__)

MAX_BACKOFF_S = 30.0
STOP_ATTEMPTS = 10

OnEvent = Callable[[str, V1Pod], None]
OnSnapshot = Callable[[list[V1Pod]], None]


class PodWatch:
    """Follows the pods matching ``label_selector`` (in ``namespace``, or everywhere)."""

    def __init__(
        self,
        core: CoreV1Api,
        label_selector: str,
        namespace: str | None,
        on_event: OnEvent,
        on_snapshot: OnSnapshot,
        timeout_s: int,
    ) -> None:
        self._core = core
        self._selector = label_selector
        self._namespace = namespace
        self._on_event = on_event
        self._on_snapshot = on_snapshot
        self._timeout_s = timeout_s
        # The wrapper below hides the list call's return type, so the event type is named here.
        self._watch = watch.Watch(return_type="V1Pod")
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    def _list_call(self, **kwargs: Any) -> Any:
        if self._namespace is None:
            return self._core.list_pod_for_all_namespaces(label_selector=self._selector, **kwargs)
        return self._core.list_namespaced_pod(self._namespace, label_selector=self._selector, **kwargs)

    def list(self) -> tuple[list[V1Pod], str]:
        """The pods now, and the resource version to watch from."""
        listed = self._list_call()
        return list(listed.items), listed.metadata.resource_version

    def start(self, resource_version: str) -> None:
        self._thread = threading.Thread(target=self._run, args=(resource_version,), name="flotilla-pod-watch", daemon=True)
        self._thread.start()

    def request_stop(self) -> None:
        """Ask the thread to end and cut its open stream; returns at once."""
        self._stopping.set()
        self._watch.stop()

    def stop(self) -> None:
        """End the thread. Blocking; the stream is cut again if the thread was between opening a
        request and the client recording its response, where a single cut would miss it."""
        for _ in range(STOP_ATTEMPTS):
            self.request_stop()
            if self._thread is None:
                return
            self._thread.join(timeout=0.5)
            if not self._thread.is_alive():
                return
        log.warning("pod watch thread did not stop; leaving it (daemon) behind")

    def _run(self, resource_version: str | None) -> None:
        backoff = 1.0
        while not self._stopping.is_set():
            try:
                if resource_version is None:
                    pods, resource_version = self.list()
                    self._on_snapshot(pods)
                self._follow(resource_version)
                resource_version = self._watch.resource_version or resource_version
                backoff = 1.0
            except ApiException as exc:
                if self._stopping.is_set():
                    return
                if exc.status == 410:
                    log.info("pod watch expired (410 Gone); listing again")
                    resource_version = None
                    continue
                log.warning("pod watch failed (%s %s); retrying in %.0f s", exc.status, exc.reason, backoff)
                resource_version = None
                self._stopping.wait(backoff)
                backoff = min(backoff * 2, MAX_BACKOFF_S)
            except Exception as exc:  # noqa: BLE001 - connection reset, timeout, server gone: all worth a retry
                if self._stopping.is_set():
                    return
                log.warning("pod watch interrupted (%r); retrying in %.0f s", exc, backoff)
                resource_version = self._watch.resource_version or resource_version
                self._stopping.wait(backoff)
                backoff = min(backoff * 2, MAX_BACKOFF_S)

    def _follow(self, resource_version: str) -> None:
        """One watch request, until the server ends it (``timeout_s``) or ``stop``."""
        stream = self._watch.stream(
            self._list_call,
            resource_version=resource_version,
            timeout_seconds=self._timeout_s,
            allow_watch_bookmarks=True,
            _request_timeout=(10, self._timeout_s + 15),
        )
        with closing(stream):
            for event in stream:
                if self._stopping.is_set():
                    return
                if event["type"] in ("ADDED", "MODIFIED", "DELETED"):
                    self._on_event(event["type"], event["object"])
