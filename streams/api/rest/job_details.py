"""What a job's page shows beyond its state: its spec, its events, its logs, why it waits; and the cluster.

- `GET /api/v1/jobs/{job_id}/spec`: the job's spec as submitted (Avro `JobSubmitted` payload).
- `GET /api/v1/jobs/{job_id}/events`: the job's events (and its job set's requests), read from the
  `events` topic up to now, oldest first.
- `GET /api/v1/jobs/{job_id}/logs?run=<run id>`: a run's output, fetched from the executor that
  ran it (`FLOTILLA_EXECUTOR_URLS`), which keeps it if its backend does (local: files; Kubernetes:
  the pod's log while the pod exists).
- `GET /api/v1/jobs/{job_id}/scheduling`: why the last cycle left the job queued or preempted it,
  answered by the worker that schedules, whichever worker is asked.
- `GET /api/v1/cluster`: the last cycle of each pool (queue shares and allocation, capacity,
  unschedulable reasons) and the executors, from the worker that schedules.

Each job route needs the caller's watch permission on the job's queue; the cluster is open to
every authenticated caller, like the queue list.
"""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.parse
import urllib.request
from typing import TYPE_CHECKING, Any

from faust import web

from streams.api.errors import ApiError
from streams.api.job_set_log import EventsTopic
from streams.api.operations import Operations
from streams.api.reads import Reads
from streams.api.rest.http import answers_errors, caller
from streams.api.rest.sse import event_records

if TYPE_CHECKING:
    from streams.plane import ControlPlane

LOG_LIMIT_BYTES = 1024 * 1024
_EVENT_READ_MS = 200


def executor_urls(spec: str) -> dict[str, str]:
    """`id=url,id=url` (FLOTILLA_EXECUTOR_URLS) as a mapping."""
    urls = {}
    for part in spec.split(","):
        name, sep, url = part.strip().partition("=")
        if sep and name and url:
            urls[name.strip()] = url.strip().rstrip("/")
    return urls


def jsonable(value: Any) -> Any:
    """Avro-decoded values as JSON: bytes as text, tuples (unions) as their value."""
    if isinstance(value, dict):
        return {key: jsonable(item) for key, item in value.items()}
    if isinstance(value, list):
        return [jsonable(item) for item in value]
    if isinstance(value, tuple):
        return jsonable(value[-1])
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    return value


def register(plane: ControlPlane, ops: Operations, reads: Reads) -> None:
    app = plane.app
    events = EventsTopic.of(plane.settings)
    urls = executor_urls(plane.settings.executor_urls)

    @app.page("/api/v1/jobs/{job_id}/spec")
    class JobSpec(web.View):
        @answers_errors
        async def get(self, request: web.Request, job_id: str) -> web.Response:
            job = await ops.job(caller(plane.auth, request), job_id)
            return self.json({"job_id": job_id, "spec": jsonable(job["spec"])})

    @app.page("/api/v1/jobs/{job_id}/events")
    class JobEvents(web.View):
        @answers_errors
        async def get(self, request: web.Request, job_id: str) -> web.Response:
            job = await ops.job(caller(plane.auth, request), job_id)
            found = []
            async with events.job_set(job["queue"], job["job_set_id"]) as log:
                while True:
                    for sequence in await log.read(_EVENT_READ_MS):
                        found += [record for record in event_records(sequence) if record["job_id"] in (job_id, None)]
                    if await log.caught_up():
                        break
            return self.json({"job_id": job_id, "events": jsonable(found)})

    @app.page("/api/v1/jobs/{job_id}/logs")
    class JobLogs(web.View):
        @answers_errors
        async def get(self, request: web.Request, job_id: str) -> web.Response:
            job = await ops.job(caller(plane.auth, request), job_id)
            wanted = request.query.get("run")
            runs = job["runs"]
            run = runs[-1] if runs and wanted is None else next((r for r in runs if r["run_id"] == wanted), None)
            if run is None:
                raise ApiError(404, f"job {job_id} has no run {wanted}" if wanted else f"job {job_id} has not run yet")
            base = urls.get(run["executor"])
            if base is None:
                raise ApiError(
                    404, f"executor {run['executor']!r} has no address here (FLOTILLA_EXECUTOR_URLS), so its logs cannot be read"
                )
            text = await asyncio.to_thread(_fetch_log, base, run["run_id"])
            return self.json({"job_id": job_id, "run_id": run["run_id"], "executor": run["executor"], "log": text})

    @app.page("/api/v1/jobs/{job_id}/scheduling")
    class JobScheduling(web.View):
        @answers_errors
        async def get(self, request: web.Request, job_id: str) -> web.Response:
            principal = caller(plane.auth, request)
            job = await ops.job(principal, job_id)
            why = await reads.scheduler(principal, "scheduling", {"job_id": job_id})
            return self.json({"job_id": job_id, "state": job["state"], **why, "reason": job["reason"]})

    @app.page("/api/v1/cluster")
    class Cluster(web.View):
        @answers_errors
        async def get(self, request: web.Request) -> web.Response:
            return self.json(await reads.scheduler(caller(plane.auth, request), "cluster", {}))


def _fetch_log(base: str, run_id: str) -> str:
    url = f"{base}/runs/{urllib.parse.quote(run_id)}/logs?limit_bytes={LOG_LIMIT_BYTES}"
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return bytes(response.read()).decode(errors="replace")
    except urllib.error.HTTPError as exc:
        try:
            reason = json.loads(exc.read()).get("error")
        except ValueError:
            reason = None
        raise ApiError(404 if exc.code == 404 else 502, reason or f"executor answered HTTP {exc.code}") from exc
    except (urllib.error.URLError, OSError) as exc:
        raise ApiError(502, f"cannot reach the executor at {base}: {getattr(exc, 'reason', exc)}") from exc
