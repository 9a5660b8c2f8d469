"""The REST API, served by the Faust worker's web server: queues, submission, job status, health, metrics.

Every write goes to the log (queue definitions to `queues`, submissions to `submissions`); the API
then waits until the effect is visible (the queue in this worker's replica, the ingest agent's answer)
so a caller that got 2xx can rely on it. Errors are JSON `{"error": reason}` with a 4xx status.
Job control (`job_control.py`) answers 202 once its request is on the log, because its effect
comes from the scheduler later; a job set's events stream from `job_set_events.py`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from faust import web

from schemas.codec import SchemaError, encode
from streams.api import job_control, job_set_events
from streams.api.http import ApiError, answers_errors, json_body
from streams.api.lookups import job_or_404, queue_or_404
from streams.domain import jobspec
from streams.domain.ids import IdFactory
from streams.domain.queues import validate_queue
from streams.domain.views import job_view
from streams.metrics import CONTENT_TYPE

if TYPE_CHECKING:
    from streams.app import ControlPlane

ANONYMOUS = "anonymous"
_VISIBILITY_TIMEOUT_S = 10.0


async def _until(condition: Callable[[], bool], what: str) -> None:
    """Wait until a write made through the log is visible to this worker."""
    deadline = asyncio.get_running_loop().time() + _VISIBILITY_TIMEOUT_S
    while not condition():
        if asyncio.get_running_loop().time() > deadline:
            raise ApiError(504, f"{what} was written to the log but is not visible yet; retry the read")
        await asyncio.sleep(0.02)


def register(plane: ControlPlane) -> None:
    app = plane.app
    ids = IdFactory.system()
    job_control.register(plane, ids, ANONYMOUS)
    job_set_events.register(plane)

    async def write_queue(raw: dict[str, Any], *, exists: bool) -> dict[str, Any]:
        queue, reason = validate_queue(raw)
        if queue is None:
            raise ApiError(400, f"invalid queue: {reason}")
        current = plane.queues.get(queue["name"])
        if exists and current is None:
            raise ApiError(404, f"queue {queue['name']!r} does not exist")
        if not exists and current is not None:
            raise ApiError(409, f"queue {queue['name']!r} already exists")
        await plane.topics.queues.send(key=queue["name"], value=encode("queue", queue))
        await _until(lambda: plane.queues.get(queue["name"]) == queue, f"queue {queue['name']!r}")
        return queue

    @app.page("/health")
    class Health(web.View):
        async def get(self, request: web.Request) -> web.Response:
            ready = plane.ready
            return self.json({"status": "ok" if ready else "starting"}, status=200 if ready else 503)

    @app.page("/metrics")
    class Metrics(web.View):
        async def get(self, request: web.Request) -> web.Response:
            return self.bytes(plane.metrics.exposition(), content_type=CONTENT_TYPE)

    @app.page("/api/v1/queues")
    class Queues(web.View):
        async def get(self, request: web.Request) -> web.Response:
            return self.json({"queues": sorted((dict(q) for q in plane.queues.values()), key=lambda q: q["name"])})

        @answers_errors
        async def post(self, request: web.Request) -> web.Response:
            return self.json(await write_queue(await json_body(request), exists=False), status=201)

    @app.page("/api/v1/queues/{name}")
    class Queue(web.View):
        @answers_errors
        async def get(self, request: web.Request, name: str) -> web.Response:
            return self.json(queue_or_404(plane, name))

        @answers_errors
        async def put(self, request: web.Request, name: str) -> web.Response:
            body = await json_body(request)
            if body.setdefault("name", name) != name:
                raise ApiError(400, f"queue name in the body ({body['name']!r}) differs from the URL ({name!r})")
            return self.json(await write_queue(body, exists=True))

        @answers_errors
        async def delete(self, request: web.Request, name: str) -> web.Response:
            queue_or_404(plane, name)
            await plane.topics.queues.send(key=name, value=None)
            await _until(lambda: plane.queues.get(name) is None, f"deletion of queue {name!r}")
            return self.json({"deleted": name})

    @app.page("/api/v1/jobs")
    class Jobs(web.View):
        @answers_errors
        async def post(self, request: web.Request) -> web.Response:
            body = await json_body(request)
            submit = submit_request(body, request_id=ids.new(), user=ANONYMOUS, groups=[])
            try:
                message = encode("submit_request", submit)
            except SchemaError as exc:
                raise ApiError(400, f"invalid submit request: {exc}") from exc
            answer = plane.replies.expect(submit["request_id"])
            try:
                await plane.topics.submissions.send(key=submit["queue"], value=message)
                outcome = await asyncio.wait_for(answer, plane.settings.submit_timeout_s)
            except TimeoutError as exc:
                raise ApiError(
                    504, f"request {submit['request_id']} is on the log but was not processed in time; check its jobs later"
                ) from exc
            finally:
                plane.replies.forget(submit["request_id"])
            job_ids = [item["job_id"] for item in outcome if "job_id" in item]
            # The ingest agent has answered; wait for the fold too, so a read right after a 2xx sees the jobs.
            unseen = set(job_ids)

            def folded() -> bool:
                unseen.difference_update([job_id for job_id in unseen if job_id in plane.jobs])
                return not unseen

            await _until(folded, "the submitted jobs")
            accepted = len(job_ids)
            status = 200 if accepted == len(outcome) else 422 if accepted == 0 else 207
            return self.json(
                {
                    "request_id": submit["request_id"],
                    "job_ids": [item.get("job_id") for item in outcome],
                    "items": outcome,
                },
                status=status,
            )

    @app.page("/api/v1/jobs/{job_id}")
    class Job(web.View):
        @answers_errors
        async def get(self, request: web.Request, job_id: str) -> web.Response:
            return self.json(job_view(job_or_404(plane, job_id)))


def submit_request(body: dict[str, Any], *, request_id: str, user: str, groups: list[str]) -> dict[str, Any]:
    """The submit_request record for a REST body `{queue, job_set_id, items}`."""
    items = body.get("items")
    if not isinstance(items, list) or not items:
        raise ApiError(400, "items must be a non-empty list of jobs")
    if not all(isinstance(item, dict) for item in items):
        raise ApiError(400, "every item must be a JSON object")
    try:
        completed = [jobspec.job_item(item) for item in items]
    except (KeyError, TypeError, AttributeError) as exc:
        raise ApiError(400, f"invalid job item: {exc!r}") from exc
    return {
        "request_id": request_id,
        "queue": str(body.get("queue") or ""),
        "job_set_id": str(body.get("job_set_id") or ""),
        "user": user,
        "groups": groups,
        "items": completed,
    }
