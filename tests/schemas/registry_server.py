"""A small Schema-Registry-compatible HTTP server for tests (no registry package runs here).

It speaks the part of the Confluent Schema Registry REST API that producers and deserializers use:
register a schema under a subject (`POST /subjects/<subject>/versions`), look one up
(`POST /subjects/<subject>`), fetch one by id (`GET /schemas/ids/<id>`), list subjects and
versions. Ids are global and one per distinct schema, as in Confluent's registry, so the same
schema registered under two subjects has one id. No compatibility checks, no auth.
"""

from __future__ import annotations

import json
import re
import threading
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"


@dataclass
class RegistryState:
    schemas: list[str] = field(default_factory=list)  # id - 1 -> schema text as registered first
    ids: dict[str, int] = field(default_factory=dict)  # normalised schema -> id
    subjects: dict[str, list[int]] = field(default_factory=dict)  # subject -> ids of its versions
    requests: list[str] = field(default_factory=list)  # "METHOD path", for assertions
    lock: threading.Lock = field(default_factory=threading.Lock)

    def register(self, subject: str, schema: str) -> tuple[int, int]:
        """(id, version) of ``schema`` under ``subject``."""
        key = json.dumps(json.loads(schema), sort_keys=True)
        with self.lock:
            if key not in self.ids:
                self.schemas.append(schema)
                self.ids[key] = len(self.schemas)
            schema_id = self.ids[key]
            versions = self.subjects.setdefault(subject, [])
            if schema_id not in versions:
                versions.append(schema_id)
            return schema_id, versions.index(schema_id) + 1


def _handler(state: RegistryState) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _answer(self, status: int, body: Any) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", CONTENT_TYPE)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _not_found(self, code: int, message: str) -> None:
            self._answer(404, {"error_code": code, "message": message})

        def _body(self) -> dict[str, Any]:
            return dict(json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}"))

        def do_GET(self) -> None:
            path = urllib.parse.urlsplit(self.path).path
            state.requests.append(f"GET {path}")
            if match := re.fullmatch(r"/schemas/ids/(\d+)", path):
                schema_id = int(match.group(1))
                if not 0 < schema_id <= len(state.schemas):
                    return self._not_found(40403, "Schema not found")
                return self._answer(200, {"schema": state.schemas[schema_id - 1]})
            if path == "/subjects":
                return self._answer(200, sorted(state.subjects))
            if match := re.fullmatch(r"/subjects/([^/]+)/versions(?:/(latest|\d+))?", path):
                subject = urllib.parse.unquote(match.group(1))
                versions = state.subjects.get(subject)
                if versions is None:
                    return self._not_found(40401, f"Subject '{subject}' not found.")
                if match.group(2) is None:
                    return self._answer(200, list(range(1, len(versions) + 1)))
                number = len(versions) if match.group(2) == "latest" else int(match.group(2))
                if not 0 < number <= len(versions):
                    return self._not_found(40402, "Version not found.")
                schema_id = versions[number - 1]
                return self._answer(200, {"subject": subject, "version": number, "id": schema_id, "schema": state.schemas[schema_id - 1]})
            return self._not_found(404, f"no route {path}")

        def do_POST(self) -> None:
            path = urllib.parse.urlsplit(self.path).path
            state.requests.append(f"POST {path}")
            body = self._body()
            if body.get("schemaType", "AVRO") != "AVRO":
                return self._answer(422, {"error_code": 42201, "message": "only Avro schemas here"})
            if match := re.fullmatch(r"/subjects/([^/]+)/versions", path):
                schema_id, _ = state.register(urllib.parse.unquote(match.group(1)), body["schema"])
                return self._answer(200, {"id": schema_id})
            if match := re.fullmatch(r"/subjects/([^/]+)", path):
                subject = urllib.parse.unquote(match.group(1))
                known = state.ids.get(json.dumps(json.loads(body["schema"]), sort_keys=True))
                versions = state.subjects.get(subject, [])
                if known is None or known not in versions:
                    return self._not_found(40403, "Schema not found")
                version = versions.index(known) + 1
                return self._answer(200, {"subject": subject, "version": version, "id": known, "schema": state.schemas[known - 1]})
            return self._not_found(404, f"no route {path}")

    return Handler


@contextmanager
def running_registry() -> Iterator[tuple[str, RegistryState]]:
    """A registry on a free port of 127.0.0.1: yields its URL and its state."""
    state = RegistryState()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(state))
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), name="schema-registry", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", state
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
