"""Listing and counting jobs from the job index (`streams.domain.job_index`), for REST and the UI.

A caller sees the jobs of the queues they may watch (administrators: every queue, deleted ones
too). Whichever worker is asked, the answer covers every partition (`partitions` of
`partitions_total` in every answer): `streams.api.reads` asks each partition's owner and merges
their pages by the query's sort key (the cursor is a sort key, the same on every worker) and sums
their counts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from streams.api.errors import ApiError
from streams.api.reads import Reads
from streams.auth import Principal
from streams.domain.job_index import JobQuery, decode_cursor, encode_cursor

# Query parameters of GET /api/v1/jobs: each may be repeated or hold a comma-separated list.
LIST_PARAMETERS = (
    "queue",
    "job_set",
    "state",
    "priority_class",
    "label",
    "node",
    "submitted_from",
    "submitted_to",
    "sort",
    "order",
    "limit",
    "cursor",
)


def _values(params: Mapping[str, Sequence[str]], name: str) -> tuple[str, ...]:
    return tuple(value.strip() for raw in params.get(name, ()) for value in raw.split(",") if value.strip())


def _one(params: Mapping[str, Sequence[str]], name: str) -> str | None:
    values = _values(params, name)
    if len(values) > 1:
        raise ApiError(400, f"{name} takes one value, got {', '.join(values)}")
    return values[0] if values else None


def _int(params: Mapping[str, Sequence[str]], name: str) -> int | None:
    value = _one(params, name)
    if value is None:
        return None
    try:
        return int(value)
    except ValueError as exc:
        raise ApiError(400, f"{name} must be an integer (epoch milliseconds for times), got {value!r}") from exc


def parse_query(params: Mapping[str, Sequence[str]]) -> JobQuery:
    """A `JobQuery` from query parameters (name -> every value given); 400 for anything unknown or malformed."""
    unknown = sorted(set(params) - set(LIST_PARAMETERS))
    if unknown:
        raise ApiError(400, f"unknown parameter(s) {', '.join(unknown)}; parameters are {', '.join(LIST_PARAMETERS)}")
    labels = []
    for label in _values(params, "label"):
        key, sep, value = label.partition("=")
        if not sep or not key:
            raise ApiError(400, f"label filter {label!r} must be key=value")
        labels.append((key, value))
    order = _one(params, "order") or "desc"
    if order not in ("asc", "desc"):
        raise ApiError(400, f"order must be asc or desc, got {order!r}")
    cursor = _one(params, "cursor")
    limit = _int(params, "limit")
    try:
        return JobQuery(
            queues=_values(params, "queue"),
            job_set=_one(params, "job_set"),
            states=tuple(state.lower() for state in _values(params, "state")),
            priority_classes=_values(params, "priority_class"),
            labels=tuple(labels),
            node=_one(params, "node"),
            submitted_from=_int(params, "submitted_from"),
            submitted_to=_int(params, "submitted_to"),
            sort=_one(params, "sort") or "submitted",
            descending=order == "desc",
            limit=100 if limit is None else limit,
            after=None if cursor is None else decode_cursor(cursor),
        )
    except ValueError as exc:
        raise ApiError(400, str(exc)) from exc


@dataclass
class JobQueries:
    reads: Reads
    partitions_total: int

    def _answer(self, **body: Any) -> dict[str, Any]:
        # Every partition answered (`Reads` refuses anything less), as one worker holding them all would.
        return {**body, "partitions": list(range(self.partitions_total)), "partitions_total": self.partitions_total}

    async def list_jobs(self, principal: Principal, query: JobQuery) -> dict[str, Any]:
        page = await self.reads.page(principal, query)
        return self._answer(
            jobs=[row.view() for row in page.rows],
            next_cursor=None if page.next_after is None else encode_cursor(page.next_after),
        )

    async def counts(self, principal: Principal, params: Mapping[str, Sequence[str]]) -> dict[str, Any]:
        unknown = sorted(set(params) - {"group_by", "queue"})
        if unknown:
            raise ApiError(400, f"unknown parameter(s) {', '.join(unknown)}; parameters are group_by, queue")
        group_by = _one(params, "group_by") or "queue"
        if group_by not in ("queue", "job_set"):
            raise ApiError(400, f"cannot group by {group_by!r}; groups are queue and job_set")
        groups = await self.reads.counts(principal, group_by, _values(params, "queue"))
        return self._answer(group_by=group_by, groups=groups)
