"""A stub of the REST API on a real local port, so commands run through the real client."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True)
class Answer:
    status: int
    body: bytes
    content_type: str = "application/json"


@dataclass
class StubApi:
    """Answers `(method, path)` with a canned answer and records every request it got."""

    url: str = ""
    answers: dict[tuple[str, str], Answer] = field(default_factory=dict)
    requests: list[tuple[str, str, Any]] = field(default_factory=list)
    authorizations: list[str | None] = field(default_factory=list)  # each request's Authorization header

    def answer(self, method: str, path: str, status: int, body: Any) -> None:
        self.answers[(method, path)] = Answer(status, json.dumps(body).encode())

    def stream(self, path: str, body: bytes) -> None:
        self.answers[("GET", path)] = Answer(200, body, "text/event-stream")


@contextmanager
def serving() -> Iterator[StubApi]:
    """A stub answering on 127.0.0.1 (its `url` set) until the block ends."""
    stub = StubApi()

    class Handler(BaseHTTPRequestHandler):
        def _reply(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            stub.requests.append((self.command, self.path, json.loads(raw) if raw else None))
            stub.authorizations.append(self.headers.get("Authorization"))
            answer = stub.answers.get((self.command, self.path), Answer(404, b'{"error": "no such stub"}'))
            self.send_response(answer.status)
            self.send_header("Content-Type", answer.content_type)
            self.send_header("Content-Length", str(len(answer.body)))
            self.end_headers()
            self.wfile.write(answer.body)

        do_GET = do_POST = do_PUT = do_DELETE = _reply

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    stub.url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield stub
    finally:
        server.shutdown()
        server.server_close()
