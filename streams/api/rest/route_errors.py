"""Requests that match no view (unknown path, method a view lacks) answered in the API's JSON error shape.

aiohttp answers them itself with a plain-text `404: Not Found`; clients and scripts that parse
every 4xx as `{"error": reason}` would then fail on the parse instead of showing the reason.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from aiohttp import web


@web.middleware
async def json_route_errors(request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]) -> web.StreamResponse:
    try:
        return await handler(request)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        reason = "no such endpoint" if exc.status == 404 else exc.reason.lower()
        headers = {"Allow": exc.headers["Allow"]} if "Allow" in exc.headers else None
        return web.json_response({"error": f"{reason}: {request.method} {request.path}"}, status=exc.status, headers=headers)
