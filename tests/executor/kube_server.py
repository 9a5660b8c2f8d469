"""A small in-process Kubernetes API server for testing the Kubernetes backend.

It speaks the real REST API (JSON over HTTP) for what the backend uses: pods (create, get,
list, watch, graceful delete), nodes, services and networking.k8s.io/v1 ingresses, with label
and field selectors, resource versions, watch resumption and 410 Gone once history is
compacted, and the garbage collector's deletion of objects owned by a deleted pod. The test
plays the kubelet through ``set_pod_status`` / ``finish_deletion`` and the operator through
``add_node`` / ``add_pod`` / ``expire_watches``.

Written for these tests rather than taken from a package: kmock, the suggested mock server,
ignores label selectors and resource versions, and its pytest plugin needs pytest-asyncio,
which this project does not use.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from aiohttp import web

CORE = "/api/v1"
NETWORKING = "/apis/networking.k8s.io/v1"
# plural -> (API prefix, kind, namespaced)
RESOURCES = {
    "pods": (CORE, "Pod", True),
    "services": (CORE, "Service", True),
    "nodes": (CORE, "Node", False),
    "ingresses": (NETWORKING, "Ingress", True),
}

Key = tuple[str, str, str]  # plural, namespace ("" for cluster objects), name


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _status(code: int, reason: str, message: str) -> web.Response:
    body = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code, "reason": reason, "message": message}
    return web.json_response(body, status=code)


def _field(obj: dict[str, Any], path: str) -> str:
    value: Any = obj
    for part in path.split("."):
        value = value.get(part, {}) if isinstance(value, dict) else {}
    return value if isinstance(value, str) else ""


def _matches(obj: dict[str, Any], label_selector: str, field_selector: str) -> bool:
    """Equality-based selectors: ``k=v``, ``k==v``, ``k!=v`` and (labels) bare ``k``."""
    labels = obj.get("metadata", {}).get("labels") or {}
    for term in filter(None, label_selector.split(",")):
        if "!=" in term:
            key, value = term.split("!=", 1)
            if labels.get(key) == value:
                return False
        elif "=" in term:
            key, value = term.replace("==", "=").split("=", 1)
            if labels.get(key) != value:
                return False
        elif term not in labels:
            return False
    for term in filter(None, field_selector.split(",")):
        if "!=" in term:
            path, value = term.split("!=", 1)
            if _field(obj, path) == value:
                return False
        else:
            path, value = term.replace("==", "=").split("=", 1)
            if _field(obj, path) != value:
                return False
    return True


@dataclass
class Event:
    resource_version: int
    type: str
    plural: str
    object: dict[str, Any]


@dataclass
class FakeKubeApi:
    """The server. Use as ``async with FakeKubeApi() as api: ... api.url ...``."""

    namespaces: set[str] = field(default_factory=lambda: {"default"})
    objects: dict[Key, dict[str, Any]] = field(default_factory=dict)
    # (namespace, pod name) -> what its container printed, served at .../pods/NAME/log
    logs: dict[tuple[str, str], str] = field(default_factory=dict)
    history: list[Event] = field(default_factory=list)
    requests: list[tuple[str, str, dict[str, str], Any]] = field(default_factory=list)
    url: str = ""
    _version: int = 0
    _compacted: int = 0  # watches resuming from before this version get 410 Gone
    _epoch: int = 0  # bumped to end every open watch
    open_watches: int = 0  # watch streams following the history now (not ended, not refused with 410)
    _changed: asyncio.Event = field(default_factory=asyncio.Event)
    _runner: web.AppRunner | None = None

    async def __aenter__(self) -> FakeKubeApi:
        app = web.Application()
        app.router.add_route("*", "/{path:.*}", self._handle)
        self._runner = web.AppRunner(app, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        host, port = self._runner.addresses[0][:2]
        self.url = f"http://{host}:{port}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.expire_watches()
        assert self._runner is not None
        await self._runner.cleanup()

    # --- state changes (each one is a watch event) -------------------------------------------

    def _emit(self, kind: str, plural: str, obj: dict[str, Any]) -> None:
        self.history.append(Event(int(obj["metadata"]["resourceVersion"]), kind, plural, json.loads(json.dumps(obj))))
        self._changed.set()
        self._changed = asyncio.Event()

    def _stamp(self, obj: dict[str, Any]) -> None:
        self._version += 1
        obj["metadata"]["resourceVersion"] = str(self._version)

    def _create(self, plural: str, namespace: str, obj: dict[str, Any]) -> dict[str, Any]:
        metadata = obj.setdefault("metadata", {})
        if RESOURCES[plural][2]:
            metadata["namespace"] = namespace
        metadata.update(uid=str(uuid.uuid4()), creationTimestamp=_now())
        prefix, kind, _ = RESOURCES[plural]
        obj.update(apiVersion=prefix.removeprefix("/apis/").removeprefix("/api/"), kind=kind)
        if plural == "pods":
            obj.setdefault("status", {}).setdefault("phase", "Pending")
        self._stamp(obj)
        self.objects[(plural, namespace, metadata["name"])] = obj
        self._emit("ADDED", plural, obj)
        return obj

    def _modify(self, key: Key) -> dict[str, Any]:
        obj = self.objects[key]
        self._stamp(obj)
        self._emit("MODIFIED", key[0], obj)
        return obj

    def _remove(self, key: Key) -> dict[str, Any]:
        obj = self.objects.pop(key)
        self._stamp(obj)
        self._emit("DELETED", key[0], obj)
        uid = obj["metadata"]["uid"]
        for other in [k for k, o in self.objects.items() if any(r.get("uid") == uid for r in o["metadata"].get("ownerReferences") or [])]:
            self._remove(other)
        return obj

    # --- the operator's and the kubelet's side ---------------------------------------------

    def add_node(self, name: str, allocatable: dict[str, str], **metadata_and_spec: Any) -> None:
        """``labels=`` go in metadata, ``taints=`` and ``unschedulable=`` in spec."""
        labels = metadata_and_spec.pop("labels", {})
        obj = {"metadata": {"name": name, "labels": labels}, "spec": metadata_and_spec, "status": {"allocatable": allocatable}}
        self._create("nodes", "", obj)

    def add_pod(self, namespace: str, pod: dict[str, Any]) -> dict[str, Any]:
        self.namespaces.add(namespace)
        return self._create("pods", namespace, json.loads(json.dumps(pod)))

    def pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.objects.get(("pods", namespace, name))

    def of(self, plural: str) -> list[dict[str, Any]]:
        return [obj for (kind, _, _), obj in self.objects.items() if kind == plural]

    def set_pod_status(self, namespace: str, name: str, status: dict[str, Any]) -> None:
        """What the kubelet reports: replaces the pod's status."""
        self.objects[("pods", namespace, name)]["status"] = status
        self._modify(("pods", namespace, name))

    def finish_deletion(self, namespace: str, name: str) -> None:
        """The kubelet has stopped a gracefully deleted pod's containers: the pod goes."""
        assert self.objects[("pods", namespace, name)]["metadata"].get("deletionTimestamp")
        self._remove(("pods", namespace, name))

    def expire_watches(self) -> None:
        """Compact history and end every open watch: resuming from any version seen so far
        gets 410 Gone, as after an API server restart."""
        self._compacted = self._version + 1
        self._epoch += 1
        self._changed.set()
        self._changed = asyncio.Event()

    def deletions(self) -> list[tuple[str, Any]]:
        """(path, grace period seconds in the request body) of every DELETE received."""
        return [(path, (body or {}).get("gracePeriodSeconds")) for method, path, _, body in self.requests if method == "DELETE"]

    # --- HTTP ------------------------------------------------------------------------------

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        body = json.loads(await request.read() or b"null")
        self.requests.append((request.method, request.path, dict(request.query), body))
        for prefix in (CORE, NETWORKING):
            if request.path.startswith(prefix + "/"):
                parts = request.path[len(prefix) + 1 :].split("/")
                break
        else:
            return _status(404, "NotFound", f"no API at {request.path}")
        namespace = ""
        if parts[0] == "namespaces" and len(parts) >= 3:
            namespace, parts = parts[1], parts[2:]
        plural, name = parts[0], "/".join(parts[1:])
        if plural not in RESOURCES or RESOURCES[plural][0] != prefix:
            return _status(404, "NotFound", f"the server could not find the requested resource {plural}")
        if namespace and namespace not in self.namespaces and request.method == "POST":
            return _status(404, "NotFound", f'namespaces "{namespace}" not found')
        if not name and request.method == "GET":
            if request.query.get("watch", "").lower() in ("true", "1"):
                return await self._watch(request, plural, namespace)
            return self._list(request, plural, namespace)
        if not name and request.method == "POST":
            key = (plural, namespace, body["metadata"]["name"])
            if key in self.objects:
                return _status(409, "AlreadyExists", f'{plural} "{key[2]}" already exists')
            return web.json_response(self._create(plural, namespace, body), status=201)
        if plural == "pods" and name.endswith("/log") and request.method == "GET":
            return self._log(request, namespace, name.removesuffix("/log"))
        key = (plural, namespace, name)
        if key not in self.objects:
            return _status(404, "NotFound", f'{plural} "{name}" not found')
        if request.method == "GET":
            return web.json_response(self.objects[key])
        if request.method == "DELETE":
            return web.json_response(self._delete(key, request.query, body))
        return _status(405, "MethodNotAllowed", request.method)

    def _log(self, request: web.Request, namespace: str, name: str) -> web.Response:
        """The pod's log: its last ``tailLines`` lines, then its first ``limitBytes`` bytes, as the API server cuts it."""
        if ("pods", namespace, name) not in self.objects:
            return _status(404, "NotFound", f'pods "{name}" not found')
        text = self.logs.get((namespace, name), "")
        if "tailLines" in request.query:
            text = "".join(text.splitlines(keepends=True)[-int(request.query["tailLines"]) :])
        if "limitBytes" in request.query:
            text = text.encode()[: int(request.query["limitBytes"])].decode(errors="ignore")
        return web.Response(text=text, content_type="text/plain")

    def _delete(self, key: Key, query: Any, body: dict[str, Any] | None) -> dict[str, Any]:
        """Pods on a node that are still running are deleted gracefully, as the API server
        does: marked with a deletion timestamp until the kubelet has stopped them."""
        obj = self.objects[key]
        grace = (body or {}).get("gracePeriodSeconds", query.get("gracePeriodSeconds"))
        if grace is None:
            grace = obj.get("spec", {}).get("terminationGracePeriodSeconds", 30)
        graceful = (
            key[0] == "pods"
            and int(grace) > 0
            and obj["spec"].get("nodeName")
            and obj["status"].get("phase") not in ("Succeeded", "Failed")
        )
        if not graceful:
            return self._remove(key)
        if not obj["metadata"].get("deletionTimestamp"):
            obj["metadata"].update(deletionTimestamp=_now(), deletionGracePeriodSeconds=int(grace))
            self._modify(key)
        return obj

    def _selected(self, request: web.Request, plural: str, namespace: str, obj: dict[str, Any]) -> bool:
        in_namespace = not namespace or obj["metadata"].get("namespace") == namespace
        return in_namespace and _matches(obj, request.query.get("labelSelector", ""), request.query.get("fieldSelector", ""))

    def _list(self, request: web.Request, plural: str, namespace: str) -> web.Response:
        items = [obj for (kind, _, _), obj in self.objects.items() if kind == plural and self._selected(request, plural, namespace, obj)]
        kind = RESOURCES[plural][1]
        return web.json_response(
            {"kind": f"{kind}List", "apiVersion": "v1", "metadata": {"resourceVersion": str(self._version)}, "items": items}
        )

    async def _watch(self, request: web.Request, plural: str, namespace: str) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        response.enable_chunked_encoding()
        await response.prepare(request)
        try:
            await self._stream(request, response, plural, namespace)
        except ConnectionResetError:  # the client hung up, as a stopping watch does
            pass
        return response

    async def _stream(self, request: web.Request, response: web.StreamResponse, plural: str, namespace: str) -> None:
        since = request.query.get("resourceVersion", "")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + float(request.query.get("timeoutSeconds", 1800))
        if since in ("", "0"):
            for (kind, _, _), obj in list(self.objects.items()):
                if kind == plural and self._selected(request, plural, namespace, obj):
                    await response.write(json.dumps({"type": "ADDED", "object": obj}).encode() + b"\n")
            position = len(self.history)
        elif int(since) < self._compacted:
            gone = {
                "kind": "Status",
                "apiVersion": "v1",
                "status": "Failure",
                "code": 410,
                "reason": "Expired",
                "message": "too old resource version",
            }
            await response.write(json.dumps({"type": "ERROR", "object": gone}).encode() + b"\n")
            await response.write_eof()
            return
        else:
            position = next((i for i, event in enumerate(self.history) if event.resource_version > int(since)), len(self.history))
        epoch = self._epoch
        self.open_watches += 1
        try:
            while epoch == self._epoch:
                while position < len(self.history):  # events may arrive while one is being written
                    event = self.history[position]
                    position += 1
                    if event.plural == plural and self._selected(request, plural, namespace, event.object):
                        await response.write(json.dumps({"type": event.type, "object": event.object}).encode() + b"\n")
                remaining = deadline - loop.time()
                if remaining <= 0:
                    break
                try:
                    await asyncio.wait_for(self._changed.wait(), remaining)
                except TimeoutError:
                    break
        finally:
            self.open_watches -= 1
        await response.write_eof()
