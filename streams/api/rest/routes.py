"""The REST API, served by the Faust worker's web server: queues, submission, job status, health, metrics.

Views parse the request, authenticate the caller and hand both to `operations.Operations`, which
REST shares with gRPC. Writes are answered once their effect is visible, so a caller that got 2xx
can rely on it. Errors are JSON `{"error": reason}` with a 4xx status (401 without valid
credentials, 403 without the permission). Job control (`job_control.py`) answers 202 once its
request is on the log; a job set's events stream from `job_set_events.py`. /health and /metrics
are open to anyone.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

from faust import web

from streams.api import replays
from streams.api.errors import ApiError
from streams.api.job_queries import JobQueries, parse_query
from streams.api.operations import Operations
from streams.api.reads import Reads
from streams.api.rest import job_control, job_details, job_set_events, openapi, peer_routes, reports, ui
from streams.api.rest.http import answers_errors, caller, json_body, query_lists
from streams.api.rest.route_errors import json_route_errors
from streams.domain import jobspec
from streams.domain.views import job_view
from streams.metrics import CONTENT_TYPE

if TYPE_CHECKING:
    from faust.web.drivers.aiohttp import Web as AiohttpWeb

    from streams.plane import ControlPlane


def register(plane: ControlPlane, ops: Operations, queries: JobQueries, reads: Reads) -> None:
    app = plane.app
    cast("AiohttpWeb", app.web).web_app.middlewares.append(json_route_errors)
    ui.register(app)
    openapi.register(app)
    job_control.register(app, plane.auth, ops)
    job_set_events.register(plane, ops)
    job_details.register(plane, ops, reads)
    peer_routes.register(app, plane.auth, reads.local, plane.replies)
    reports.register(plane, ops)

    @app.page("/health")
    class Health(web.View):
        async def get(self, request: web.Request) -> web.Response:
            ready = plane.ready
            if not plane.refold.caught_up:  # after a restore: how far the refold of the log is
                return self.json({"status": "refolding", **plane.refold.progress()}, status=503)
            return self.json({"status": "ok" if ready else "starting"}, status=200 if ready else 503)

    @app.page("/metrics")
    class Metrics(web.View):
        async def get(self, request: web.Request) -> web.Response:
            return self.bytes(plane.metrics.exposition(), content_type=CONTENT_TYPE)

    @app.page("/api/v1/config")
    class Configuration(web.View):
        """The scheduler configuration in force, every setting resolved; read-only, for any authenticated caller."""

        @answers_errors
        async def get(self, request: web.Request) -> web.Response:
            caller(plane.auth, request)
            configuration = plane.configuration
            return self.json(
                {"hash": configuration.hash, "file": plane.settings.scheduler_config or None, "config": configuration.resolved}
            )

    @app.page("/api/v1/queues")
    class Queues(web.View):
        @answers_errors
        async def get(self, request: web.Request) -> web.Response:
            principal = caller(plane.auth, request)
            at = replays.moment(request.query, "at")
            if at is not None:
                return self.json(await replays.queues_at(plane, at))
            return self.json({"queues": ops.list_queues(principal)})

        @answers_errors
        async def post(self, request: web.Request) -> web.Response:
            principal = caller(plane.auth, request)
            return self.json(await ops.create_queue(principal, await json_body(request)), status=201)

    @app.page("/api/v1/queues/{name}")
    class Queue(web.View):
        @answers_errors
        async def get(self, request: web.Request, name: str) -> web.Response:
            return self.json(ops.queue(caller(plane.auth, request), name))

        @answers_errors
        async def put(self, request: web.Request, name: str) -> web.Response:
            principal = caller(plane.auth, request)
            body = await json_body(request)
            if body.setdefault("name", name) != name:
                raise ApiError(400, f"queue name in the body ({body['name']!r}) differs from the URL ({name!r})")
            return self.json(await ops.update_queue(principal, body))

        @answers_errors
        async def delete(self, request: web.Request, name: str) -> web.Response:
            await ops.delete_queue(caller(plane.auth, request), name)
            return self.json({"deleted": name})

    @app.page("/api/v1/jobs")
    class Jobs(web.View):
        @answers_errors
        async def get(self, request: web.Request) -> web.Response:
            principal = caller(plane.auth, request)
            return self.json(await queries.list_jobs(principal, parse_query(query_lists(request))))

        @answers_errors
        async def post(self, request: web.Request) -> web.Response:
            principal = caller(plane.auth, request)
            body = await json_body(request)
            submitted = await ops.submit(principal, str(body.get("queue") or ""), str(body.get("job_set_id") or ""), job_items(body))
            status = 200 if submitted.accepted == len(submitted.items) else 422 if submitted.accepted == 0 else 207
            return self.json(
                {
                    "request_id": submitted.request_id,
                    "job_ids": [item.get("job_id") for item in submitted.items],
                    "items": submitted.items,
                },
                status=status,
            )

    @app.page("/api/v1/job-counts")
    class JobCounts(web.View):
        @answers_errors
        async def get(self, request: web.Request) -> web.Response:
            principal = caller(plane.auth, request)
            return self.json(await queries.counts(principal, query_lists(request)))

    @app.page("/api/v1/jobs/{job_id}")
    class Job(web.View):
        @answers_errors
        async def get(self, request: web.Request, job_id: str) -> web.Response:
            principal = caller(plane.auth, request)
            at = replays.moment(request.query, "at")
            if at is not None:
                return self.json(await replays.job_at(plane, ops, principal, job_id, at))
            return self.json(job_view(await ops.job(principal, job_id)))

    @app.page("/api/v1/audit")
    class Audit(web.View):
        @answers_errors
        async def get(self, request: web.Request) -> web.Response:
            principal = caller(plane.auth, request)
            since, until = replays.moment(request.query, "since"), replays.moment(request.query, "until")
            return self.json(await replays.audit(plane, principal, since, until))


def job_items(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The complete Avro job items of a REST body `{queue, job_set_id, items}`."""
    items = body.get("items")
    if not isinstance(items, list) or not items:
        raise ApiError(400, "items must be a non-empty list of jobs")
    if not all(isinstance(item, dict) for item in items):
        raise ApiError(400, "every item must be a JSON object")
    try:
        return [jobspec.job_item(item) for item in items]
    except (KeyError, TypeError, AttributeError) as exc:
        raise ApiError(400, f"invalid job item: {exc!r}") from exc
