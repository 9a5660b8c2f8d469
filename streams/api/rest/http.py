"""What every REST view shares: the caller, the JSON answer to a refusal, and request-body parsing.

A refusal is raised as `ApiError` (or the authentication layer's `Unauthenticated` and
`PermissionDenied`) wherever it is found and answered in one place, so every endpoint gives the
same `{"error": reason}` shape with a 4xx/5xx status.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from streams.api.errors import ApiError
from streams.auth import Authenticator, PermissionDenied, Principal, Unauthenticated

if TYPE_CHECKING:
    from aiohttp.web import StreamResponse
    from faust import web


# A view method: a response, or for a stream aiohttp's own.
Handler = Callable[..., Awaitable["web.Response | StreamResponse"]]


def answers_errors(handler: Handler) -> Handler:
    async def wrapped(self: web.View, request: web.Request, **kwargs: Any) -> web.Response | StreamResponse:
        try:
            return await handler(self, request, **kwargs)
        except ApiError as exc:
            return self.json({"error": exc.reason}, status=exc.status)
        except Unauthenticated as exc:
            return self.json({"error": str(exc)}, status=401, headers={"WWW-Authenticate": "Bearer"})
        except PermissionDenied as exc:
            return self.json({"error": str(exc)}, status=403)

    wrapped.__name__ = handler.__name__
    return wrapped


def query_lists(request: web.Request) -> dict[str, list[str]]:
    """Each query parameter with every value given for it (`?state=a&state=b`)."""
    query: Any = request.query  # the aiohttp driver hands views aiohttp's requests, whose query is a MultiDict
    return {name: query.getall(name) for name in query}


def caller(auth: Authenticator, request: web.Request) -> Principal:
    return auth.authenticate(request.headers.get("Authorization"))


async def json_body(request: web.Request, *, optional: bool = False) -> dict[str, Any]:
    """The body as a JSON object; with ``optional``, an empty body is ``{}`` (a bare `POST .../cancel`)."""
    raw = await request.read()
    if optional and not raw.strip():
        return {}
    try:
        body = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError, ValueError) as exc:
        raise ApiError(400, f"request body is not JSON: {exc}") from exc
    if not isinstance(body, dict):
        raise ApiError(400, "request body must be a JSON object")
    return body
