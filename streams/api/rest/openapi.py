"""The OpenAPI 3.1 document of the REST API, served at GET /api/v1/openapi.json.

Written by hand next to the views; `tests/api/test_openapi.py` checks that it names exactly the
routes the worker registers, with their methods.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import faust
from faust import web

_ERROR = {"description": "refused, with the reason", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}
_REFUSALS = {str(code): _ERROR for code in (400, 401, 403, 404)}


def _json(description: str, schema: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema or {"type": "object"}}}}


def _op(
    summary: str, answer: dict[str, Any], *, parameters: Sequence[dict[str, Any]] = (), body: bool = False, conflict: bool = False
) -> dict[str, Any]:
    """An operation answered with ``answer`` or a refusal (409 too with ``conflict``)."""
    responses = {**answer, **_REFUSALS, **({"409": _ERROR} if conflict else {})}
    operation: dict[str, Any] = {"summary": summary, "parameters": list(parameters), "responses": responses}
    if body:
        operation["requestBody"] = {"required": True, "content": {"application/json": {"schema": {"type": "object"}}}}
    return operation


def _path(name: str, description: str = "") -> dict[str, Any]:
    return {"name": name, "in": "path", "required": True, "schema": {"type": "string"}, "description": description}


def _query(name: str, description: str, kind: str = "string") -> dict[str, Any]:
    return {"name": name, "in": "query", "required": False, "schema": {"type": kind}, "description": description}


_JOB = _path("job_id", "a job id")
_QUEUE = _path("queue", "a queue name")
_JOB_SET = _path("job_set", "a job set id")
_ACCEPTED = {"202": _json("the request is on the log", {"type": "object", "properties": {"event_ids": {"type": "array"}}})}
_EXECUTOR = _path("executor", "an executor id")
_CYCLE = [
    _query("cycle", "a cycle id (default: the last cycle recorded)"),
    _query("at", "the last cycle at or before this time (epoch ms or ISO 8601)"),
]
_AT = _query("at", "a past time (ISO 8601 or epoch ms): the answer folded from the log up to then")
_MATCHED = {"202": _json("a request for each matching job is on the log", {"type": "object", "properties": {"job_ids": {"type": "array"}}})}

_LIST_PARAMETERS = [
    _query("queue", "queue names (repeat or comma-separate)"),
    _query("job_set", "one job set id"),
    _query("state", "states: queued, leased, pending, running, succeeded, failed, cancelled, preempted"),
    _query("priority_class", "priority class names"),
    _query("label", "key=value, every one must match"),
    _query("node", "the node of the job's latest run"),
    _query("submitted_from", "epoch ms, inclusive", "integer"),
    _query("submitted_to", "epoch ms, exclusive", "integer"),
    _query("sort", "submitted (default), last_transition or priority"),
    _query("order", "desc (default) or asc"),
    _query("limit", "rows per page, 1 to 1000 (default 100)", "integer"),
    _query("cursor", "next_cursor of the previous page"),
]

_JOB_ROW = {
    "type": "object",
    "properties": {
        name: {"type": kind}
        for name, kind in {
            "job_id": "string",
            "queue": "string",
            "job_set": "string",
            "state": "string",
            "priority": "number",
            "priority_class": "string",
            "submitted": "integer",
            "last_transition": "integer",
            "runs": "integer",
            "executor": ["string", "null"],
            "node": ["string", "null"],
            "labels": "object",
            "reason": ["string", "null"],
            "cancel_requested": "boolean",
        }.items()
    },
}
# The calls between workers (streams/api/rest/peer_routes.py): each answers for the partitions the
# worker holds, for the caller whose credentials the asking worker passes on.
_PEER_OPS = {
    "jobs": "jobs by id (job_ids): their job_state Avro, base64, or why the caller may not watch them",
    "event-positions": "where a job's events and its job set's requests are on events, [partition, offset] (job_id); null if not kept",
    "job-set-rows": "a job set's [job id, state] in states (queue, job_set, states)",
    "job-set-annotated": "a job set's jobs whose annotation key is value (queue, job_set, key, value)",
    "page": "this worker's first page of a job query (query)",
    "counts": "jobs per state per group (group_by, queues)",
    "active-queues": "queues with unfinished jobs",
    "matching": "[queue, job set, job id] of the jobs a queue- or executor-wide filter matches (filter); administrators",
    "await-jobs": "once the jobs are in the table, or timeout_s is over: those missing (job_ids, timeout_s)",
    "queues-at": "once the queue replica has read the queues record at offset (offset, timeout_s): its position",
    "cluster": "the scheduler's view of the cluster (as GET /api/v1/cluster)",
    "scheduling": "why the last cycle left a job queued (job_id)",
}
_PEER_ANSWER = {"200": _json("this worker's answer, with the partitions it covers"), "503": _ERROR}
_PARTITIONS = {"partitions": {"type": "array", "items": {"type": "integer"}}, "partitions_total": {"type": "integer"}}

DOCUMENT: dict[str, Any] = {
    "openapi": "3.1.0",
    "info": {
        "title": "Flotilla REST API",
        "version": "1",
        "description": "Queues, jobs and their events. Every /api/v1 call but this document takes `Authorization: Bearer <token>`.",
    },
    "components": {
        "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        "schemas": {
            "Error": {"type": "object", "properties": {"error": {"type": "string"}}, "required": ["error"]},
            "JobRow": _JOB_ROW,
        },
    },
    "security": [{"bearer": []}],
    "paths": {
        "/": {"get": {"summary": "the web UI", "security": [], "responses": {"200": {"description": "an HTML page"}}}},
        "/ui/{name}": {
            "get": {
                "summary": "a file of the web UI (script, style sheet)",
                "security": [],
                "parameters": [_path("name")],
                "responses": {"200": {"description": "the file"}, "404": _ERROR},
            }
        },
        "/health": {
            "get": {
                "summary": "ready once tables are recovered",
                "security": [],
                "responses": {"200": _json("ok"), "503": _json("starting")},
            }
        },
        "/metrics": {
            "get": {"summary": "Prometheus metrics", "security": [], "responses": {"200": {"description": "text exposition format"}}}
        },
        "/api/v1/openapi.json": {"get": {"summary": "this document", "security": [], "responses": {"200": _json("the document")}}},
        "/api/v1/queues": {
            "get": _op(
                "every queue; with `at`, the queues as the log said then, with their queued and running jobs and usage",
                {"200": _json("the queues (and `as_of` with `at`)"), "503": _ERROR},
                parameters=[_AT],
            ),
            "post": _op("create a queue", {"201": _json("the queue")}, body=True, conflict=True),
        },
        "/api/v1/queues/{name}": {
            "get": _op("one queue", {"200": _json("the queue")}, parameters=[_path("name")]),
            "put": _op("replace a queue's definition", {"200": _json("the queue")}, parameters=[_path("name")], body=True),
            "delete": _op("delete a queue", {"200": _json("deleted")}, parameters=[_path("name")]),
        },
        "/api/v1/jobs": {
            "get": _op(
                "list jobs: filtered, sorted, a page at a time",
                {
                    "200": _json(
                        "a page of jobs of this worker's partitions",
                        {
                            "type": "object",
                            "properties": {
                                "jobs": {"type": "array", "items": {"$ref": "#/components/schemas/JobRow"}},
                                "next_cursor": {"type": ["string", "null"]},
                                **_PARTITIONS,
                            },
                        },
                    ),
                    "503": _ERROR,
                },
                parameters=_LIST_PARAMETERS,
            ),
            "post": _op(
                "submit jobs",
                {"200": _json("every item accepted"), "207": _json("some accepted"), "422": _json("none accepted")},
                body=True,
            ),
        },
        "/api/v1/job-counts": {
            "get": _op(
                "jobs per state, per queue or per job set",
                {
                    "200": _json(
                        "the groups",
                        {"type": "object", "properties": {"group_by": {"type": "string"}, "groups": {"type": "array"}, **_PARTITIONS}},
                    ),
                    "503": _ERROR,
                },
                parameters=[_query("group_by", "queue (default) or job_set"), _query("queue", "queue names")],
            )
        },
        "/api/v1/jobs/{job_id}": {
            "get": _op(
                "a job's state and runs; with `at`, as the log said then (its events folded up to that time)",
                {"200": _json("the job (and `as_of` with `at`)"), "503": _ERROR},
                parameters=[_JOB, _AT],
            )
        },
        "/api/v1/audit": {
            "get": _op(
                "administrators: repeat every recorded scheduling cycle from the log and compare it with what was recorded",
                {
                    "200": _json(
                        "the audit: cycles repeated and matched, decisions and records matched, the first divergence (null if none)",
                        {
                            "type": "object",
                            "properties": {
                                "ok": {"type": "boolean"},
                                "cycles": {"type": "integer"},
                                "decisions_matched": {"type": "integer"},
                                "divergences": {"type": "integer"},
                                "first_divergence": {"type": ["object", "null"]},
                            },
                        },
                    ),
                    "503": _ERROR,
                },
                parameters=[
                    _query("since", "compare only cycles at or after this time (ISO 8601 or epoch ms)"),
                    _query("until", "compare only cycles at or before this time"),
                ],
            )
        },
        "/api/v1/jobs/{job_id}/spec": {"get": _op("a job's spec", {"200": _json("the spec")}, parameters=[_JOB])},
        "/api/v1/jobs/{job_id}/events": {"get": _op("a job's events, oldest first", {"200": _json("the events")}, parameters=[_JOB])},
        "/api/v1/jobs/{job_id}/logs": {
            "get": _op(
                "a run's output, from its executor",
                {"200": _json("the log text"), "502": _ERROR},
                parameters=[_JOB, _query("run", "run id (default: the latest run)")],
            )
        },
        "/api/v1/jobs/{job_id}/scheduling": {
            "get": _op("why the job waits or was preempted", {"200": _json("the reasons")}, parameters=[_JOB])
        },
        "/api/v1/jobs/{job_id}/cancel": {"post": _op("cancel the job", _ACCEPTED, parameters=[_JOB], body=True, conflict=True)},
        "/api/v1/jobs/{job_id}/preempt": {"post": _op("preempt the job's run", _ACCEPTED, parameters=[_JOB], body=True, conflict=True)},
        "/api/v1/jobs/{job_id}/reprioritize": {
            "post": _op("set the job's priority", _ACCEPTED, parameters=[_JOB], body=True, conflict=True)
        },
        "/api/v1/queues/{queue}/jobsets/{job_set}/cancel": {
            "post": _op("cancel every unfinished job of the job set", _ACCEPTED, parameters=[_QUEUE, _JOB_SET], body=True)
        },
        "/api/v1/queues/{queue}/jobsets/{job_set}/reprioritize": {
            "post": _op("set the priority of every unfinished job of the job set", _ACCEPTED, parameters=[_QUEUE, _JOB_SET], body=True)
        },
        "/api/v1/queues/{queue}/jobsets/{job_set}/events": {
            "get": _op(
                "the job set's events as server-sent events",
                {"200": {"description": "text/event-stream"}},
                parameters=[
                    _QUEUE,
                    _JOB_SET,
                    _query("from", "resume after this event id"),
                    _query("watch", "false: end after the events present"),
                ],
            )
        },
        "/api/v1/jobs/{job_id}/explain": {
            "get": _op(
                "the job's story from the log: its events, why it waited each cycle (with its queue's shares),"
                " where it was placed, why it was preempted (Armada's job report, for every past cycle)",
                {"200": _json("the story, and `report`: the same as text"), "503": _ERROR},
                parameters=[_JOB, _query("replay", "false: only what the cycle records say (no replay of the scheduler feed)", "boolean")],
            )
        },
        "/api/v1/queues/{queue}/scheduler-report": {
            "get": _op(
                "the queue in one scheduling cycle: weight, fair share, demand-capped fair share, share before and after,"
                " jobs queued, running, scheduled and preempted (Armada's queue report)",
                {"200": _json("the report, and `report`: the same as text"), "503": _ERROR},
                parameters=[_QUEUE, *_CYCLE],
            )
        },
        "/api/v1/scheduling-report": {
            "get": _op(
                "what one scheduling cycle did per pool and queue, why jobs stayed queued or were preempted (Armada's scheduling report)",
                {"200": _json("the report, and `report`: the same as text"), "503": _ERROR},
                parameters=_CYCLE,
            )
        },
        "/api/v1/cluster": {
            "get": _op("the last cycle per pool and the executors (on the scheduling worker)", {"200": _json("the cluster")})
        },
        "/api/v1/queues/{queue}/cancel": {
            "post": _op(
                "administrators: cancel the queue's jobs in job_states, of priority_classes and pools (Armada's CancelOnQueue)",
                _MATCHED,
                parameters=[_QUEUE],
                body=True,
            )
        },
        "/api/v1/queues/{queue}/preempt": {
            "post": _op(
                "administrators: preempt the queue's running jobs of priority_classes and pools (Armada's PreemptOnQueue)",
                _MATCHED,
                parameters=[_QUEUE],
                body=True,
            )
        },
        "/api/v1/executors/{executor}/cancel": {
            "post": _op(
                "administrators: cancel the jobs running on the executor, of queues, priority_classes and pools",
                _MATCHED,
                parameters=[_EXECUTOR],
                body=True,
            )
        },
        "/api/v1/executors/{executor}/preempt": {
            "post": _op(
                "administrators: preempt the jobs running on the executor, of queues, priority_classes and pools",
                _MATCHED,
                parameters=[_EXECUTOR],
                body=True,
            )
        },
        "/api/v1/executors/{executor}/cordon": {
            "post": _op(
                "administrators: place no new job on the executor's nodes until uncordoned; its runs go on (Armada's"
                " UpsertExecutorSettings). Body: reason (required)",
                _ACCEPTED,
                parameters=[_EXECUTOR],
                body=True,
            )
        },
        "/api/v1/executors/{executor}/uncordon": {
            "post": _op("administrators: lift the executor's cordon", _ACCEPTED, parameters=[_EXECUTOR], body=True)
        },
        **{f"/peer/v1/{op}": {"post": _op(f"between workers: {summary}", _PEER_ANSWER, body=True)} for op, summary in _PEER_OPS.items()},
        "/peer/v1/replies": {
            "post": {
                "summary": "between workers: answers to submissions made through this worker, from the ingest agent that judged them",
                "security": [],
                "requestBody": {"required": True, "content": {"application/json": {"schema": {"type": "object"}}}},
                "responses": {"200": _json("received"), "400": _ERROR},
            }
        },
        "/api/v1/config": {
            "get": _op(
                "the scheduler configuration in force, every setting resolved, and its hash",
                {
                    "200": _json(
                        "the configuration",
                        {
                            "type": "object",
                            "properties": {"hash": {"type": "string"}, "file": {"type": ["string", "null"]}, "config": {"type": "object"}},
                        },
                    )
                },
            )
        },
    },
}


def register(app: faust.App) -> None:
    @app.page("/api/v1/openapi.json")
    class OpenApi(web.View):
        async def get(self, request: web.Request) -> web.Response:
            return self.json(DOCUMENT)
