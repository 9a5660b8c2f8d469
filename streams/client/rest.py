"""A small client of the REST API for the command line (standard library only: fast to start)."""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

_NO_TOKEN_HINT = "; no token was sent: give one with --token, $FLOTILLA_TOKEN or a context in the config file"


class ClientError(Exception):
    """The server refused the call or could not be reached; the message is for the user."""

    def __init__(self, message: str, status: int | None = None, body: Any = None) -> None:
        super().__init__(message)
        self.status = status
        self.body = body


@dataclass(frozen=True)
class JobSummary:
    """A row of a jobs list (GET /api/v1/jobs)."""

    job_id: str
    queue: str
    job_set: str
    state: str
    priority: float
    priority_class: str
    submitted: int  # epoch ms
    last_transition: int  # epoch ms
    runs: int
    executor: str | None
    node: str | None
    labels: dict[str, str]
    reason: str | None
    cancel_requested: bool


@dataclass(frozen=True)
class JobPage:
    """A page of jobs; ``next_cursor`` continues the list, None on its last page. The answering worker
    covers ``partitions`` of ``partitions_total``."""

    jobs: list[JobSummary]
    next_cursor: str | None
    partitions: list[int]
    partitions_total: int


@dataclass(frozen=True)
class JobCounts:
    """Jobs per state of a queue, or of one of its job sets (``job_set``)."""

    queue: str
    job_set: str | None
    counts: dict[str, int]


@dataclass(frozen=True)
class Client:
    """``token``, when given, goes with every request as `Authorization: Bearer <token>`."""

    url: str
    timeout_s: float = 60.0
    token: str | None = None

    def _headers(self, **extra: str) -> dict[str, str]:
        return {**extra, **({"Authorization": f"Bearer {self.token}"} if self.token else {})}

    def call(self, method: str, path: str, body: Any = None, *, accept: tuple[int, ...] = ()) -> Any:
        """JSON in, JSON out; statuses outside 2xx and `accept` raise ClientError with the server's reason."""
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            f"{self.url}{path}", data=data, method=method, headers=self._headers(**{"Content-Type": "application/json"})
        )
        try:
            response = self._open(request)
        except ClientError as exc:
            if exc.status in accept:
                return exc.body
            raise
        with response:
            try:
                return json.loads(response.read() or b"null")
            except OSError as exc:
                raise ClientError(f"lost the connection to Flotilla at {self.url}: {exc}") from exc

    def events(self, path: str) -> Iterator[ServerEvent]:
        """The server-sent events of a GET, as they arrive; ends when the server ends the stream."""
        request = urllib.request.Request(f"{self.url}{path}", headers=self._headers(Accept="text/event-stream"))
        with self._open(request) as response:
            try:
                yield from parse_sse(line.decode() for line in response)
            except OSError as exc:
                raise ClientError(f"lost the connection to Flotilla at {self.url}: {exc}") from exc

    def _open(self, request: urllib.request.Request) -> Any:
        try:
            return urllib.request.urlopen(request, timeout=self.timeout_s)
        except urllib.error.HTTPError as exc:
            payload = _json_or_text(exc.read())
            reason = payload.get("error") if isinstance(payload, dict) else payload
            hint = _NO_TOKEN_HINT if exc.code == 401 and not self.token else ""
            raise ClientError(f"{reason or exc.reason} (HTTP {exc.code}){hint}", exc.code, payload) from exc
        except (urllib.error.URLError, OSError) as exc:
            raise ClientError(f"cannot reach Flotilla at {self.url}: {getattr(exc, 'reason', exc)}") from exc

    # ------------------------------------------------------------------ the job query API

    def list_jobs(
        self,
        *,
        queues: Iterable[str] = (),
        job_set: str | None = None,
        states: Iterable[str] = (),
        priority_classes: Iterable[str] = (),
        labels: dict[str, str] | None = None,
        node: str | None = None,
        submitted_from: int | None = None,
        submitted_to: int | None = None,
        sort: str = "submitted",
        order: str = "desc",
        limit: int = 100,
        cursor: str | None = None,
    ) -> JobPage:
        """One page of the jobs that match every filter given (any of several values of one filter)."""
        params: list[tuple[str, str]] = [("queue", q) for q in queues] + [("state", s) for s in states]
        params += [("priority_class", p) for p in priority_classes] + [("label", f"{k}={v}") for k, v in (labels or {}).items()]
        optional = {"job_set": job_set, "node": node, "submitted_from": submitted_from, "submitted_to": submitted_to, "cursor": cursor}
        params += [(name, str(value)) for name, value in optional.items() if value is not None]
        params += [("sort", sort), ("order", order), ("limit", str(limit))]
        answer = self.call("GET", f"/api/v1/jobs?{urllib.parse.urlencode(params)}")
        return JobPage(
            jobs=[JobSummary(**row) for row in answer["jobs"]],
            next_cursor=answer["next_cursor"],
            partitions=answer["partitions"],
            partitions_total=answer["partitions_total"],
        )

    def job_counts(self, *, group_by: str = "queue", queues: Iterable[str] = ()) -> list[JobCounts]:
        """Jobs per state for each queue (``group_by="queue"``) or job set (``"job_set"``) of ``queues`` (all when empty)."""
        params = [("group_by", group_by)] + [("queue", q) for q in queues]
        answer = self.call("GET", f"/api/v1/job-counts?{urllib.parse.urlencode(params)}")
        return [JobCounts(group["queue"], group.get("job_set"), group["counts"]) for group in answer["groups"]]


@dataclass(frozen=True)
class ServerEvent:
    """One server-sent event: `id`, `event` and the `data` lines joined."""

    id: str | None
    event: str
    data: str


def parse_sse(lines: Iterable[str]) -> Iterator[ServerEvent]:
    """Server-sent events from the lines of a `text/event-stream` body (comments are skipped)."""
    fields: dict[str, str] = {}
    data: list[str] = []
    for raw in lines:
        line = raw.rstrip("\r\n")
        if not line:
            if data:
                yield ServerEvent(id=fields.get("id"), event=fields.get("event", "message"), data="\n".join(data))
            fields, data = {}, []
            continue
        if line.startswith(":"):
            continue
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "data":
            data.append(value)
        elif name in ("id", "event"):
            fields[name] = value


def _json_or_text(raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except ValueError:
        return raw.decode(errors="replace")
