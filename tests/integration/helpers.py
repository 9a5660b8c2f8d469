"""Job items, submit requests and REST calls shared by the integration tests."""

from __future__ import annotations

import asyncio
import copy
import json
import os
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from typing import Any

from schemas.codec import encode
from streams.api.job_set_log import EventsTopic
from streams.api.rest.job_details import jsonable
from streams.api.rest.sse import event_records
from streams.client.rest import Client
from streams.domain.jobspec import job_item
from streams.kafka import KafkaClients
from tests.kit.jobs import container as kit_container

USER = "integration"


def container(cpu: str = "100m", memory: str = "64Mi") -> dict[str, Any]:
    """A container that exits at once, small enough for any test cluster."""
    return kit_container(cpu=cpu, memory=memory, command=["sh", "-c"], args=["true"])


def item(client_id: str | None = None, **pod_spec: Any) -> dict[str, Any]:
    """A valid job item in the REST (partial, snake_case) shape; ``pod_spec`` fields override."""
    spec: dict[str, Any] = {"containers": [container()], "restart_policy": "Never", **pod_spec}
    return {"client_id": client_id, "priority": 1.0, "pod_spec": spec}


def avro_item(raw: dict[str, Any]) -> dict[str, Any]:
    """The item completed to the Avro `JobItem` shape."""
    return job_item(copy.deepcopy(raw))


def submit_record(queue: str, job_set_id: str, items: list[dict[str, Any]], request_id: str | None = None) -> dict[str, Any]:
    return {
        "request_id": request_id or f"it-{uuid.uuid4().hex}",
        "queue": queue,
        "job_set_id": job_set_id,
        "user": USER,
        "groups": [],
        "items": [avro_item(i) for i in items],
    }


def submission(record: dict[str, Any]) -> tuple[bytes, bytes]:
    """A message for the submissions topic: keyed by queue, Avro value."""
    return record["queue"].encode(), encode("submit_request", record)


def create_queue(client: Client, name: str, **fields: Any) -> dict[str, Any]:
    return client.call("POST", "/api/v1/queues", {"name": name, "priority_factor": 1.0, **fields})


def call(client: Client, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    """One REST call; returns (HTTP status, JSON body) whatever the status."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(f"{client.url}{path}", data=data, method=method, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=client.timeout_s) as response:
            return response.status, json.loads(response.read() or b"null")
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"null")


def submit(client: Client, queue: str, job_set_id: str, items: list[dict[str, Any]]) -> tuple[int, dict[str, Any]]:
    """POST /api/v1/jobs; returns (status, body)."""
    return call(client, "POST", "/api/v1/jobs", {"queue": queue, "job_set_id": job_set_id, "items": items})


def get_job(client: Client, job_id: str) -> dict[str, Any] | None:
    return client.call("GET", f"/api/v1/jobs/{job_id}", accept=(404,)) if job_id else None


def broker_connections(pid: int, port: int) -> int:
    """Established TCP connections of process ``pid`` to 127.0.0.1:``port`` (from /proc)."""
    sockets = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            sockets.add(target[len("socket:[") : -1])
    count = 0
    for line in Path(f"/proc/{pid}/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        remote_port, state, inode = int(fields[2].split(":")[1], 16), fields[3], fields[9]
        count += remote_port == port and state == "01" and inode in sockets
    return count


def job_set_events(bootstrap: str, topic: str, queue: str, job_set: str) -> list[dict[str, Any]]:
    """Every event of the job set on the events ``topic``, read whole from its start as a client receives them."""

    async def read() -> list[dict[str, Any]]:
        found = []
        async with EventsTopic(KafkaClients(bootstrap), topic).job_set(queue, job_set) as log:
            while True:
                found += [record for sequence in await log.read(200) for record in event_records(sequence)]
                if await log.caught_up():
                    return list(jsonable(found))

    return asyncio.run(read())
