"""A client of the Confluent Schema Registry REST API, the two calls the codec needs.

Any service speaking that API works (Confluent Schema Registry, Karapace, Redpanda, Apicurio's
compatibility endpoint). Credentials go in the URL (``https://user:secret@host``) and are sent as
HTTP basic authentication, as Confluent Cloud expects. Calls block: they happen at start-up
(registering) and once per unknown schema id (reading).
"""

from __future__ import annotations

import base64
import json
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from schemas.codec import SchemaError, UnknownSchemaId

CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"


class SchemaRegistryClient:
    def __init__(self, url: str, timeout_s: float = 10.0) -> None:
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise SchemaError(f"schema registry URL {url!r} is not an http(s) URL")
        self._headers = {"Content-Type": CONTENT_TYPE, "Accept": CONTENT_TYPE}
        if parts.username is not None:
            credentials = f"{urllib.parse.unquote(parts.username)}:{urllib.parse.unquote(parts.password or '')}"
            self._headers["Authorization"] = "Basic " + base64.b64encode(credentials.encode()).decode()
        netloc = parts.hostname + (f":{parts.port}" if parts.port else "")
        self.url = urllib.parse.urlunsplit((parts.scheme, netloc, parts.path.rstrip("/"), "", ""))
        self.timeout_s = timeout_s

    def register(self, subject: str, schema: str) -> int:
        """The id of ``schema`` (Avro JSON) under ``subject``, registering it if it is new there."""
        answer = self._call("POST", f"/subjects/{urllib.parse.quote(subject, safe='')}/versions", {"schema": schema, "schemaType": "AVRO"})
        return int(answer["id"])

    def schema(self, schema_id: int) -> str:
        """The Avro JSON of schema ``schema_id``."""
        try:
            answer = self._call("GET", f"/schemas/ids/{schema_id}")
        except SchemaError as exc:
            if isinstance(exc.__cause__, urllib.error.HTTPError) and exc.__cause__.code == 404:
                raise UnknownSchemaId(f"schema registry {self.url} has no schema id {schema_id}") from exc
            raise
        if answer.get("schemaType", "AVRO") != "AVRO":
            raise SchemaError(f"schema id {schema_id} in {self.url} is {answer['schemaType']}, not Avro")
        return str(answer["schema"])

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.url + path, data=data, method=method, headers=self._headers)
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                return dict(json.loads(response.read()))
        except urllib.error.HTTPError as exc:
            raise SchemaError(f"schema registry {self.url}: {method} {path} answered {exc.code}: {_reason(exc)}") from exc
        except (urllib.error.URLError, OSError, ValueError) as exc:
            raise SchemaError(f"schema registry {self.url}: {method} {path} failed: {exc}") from exc


def _reason(error: urllib.error.HTTPError) -> str:
    """The registry's own message (``{"error_code": ..., "message": ...}``), else the HTTP reason."""
    try:
        return str(json.loads(error.read())["message"])
    except (ValueError, KeyError, TypeError, OSError):
        return str(error.reason)
