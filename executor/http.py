"""An executor's HTTP endpoints: `/health`, `/metrics` and `/runs/{run_id}/logs` (for the control plane's UI and API).

Bound to 127.0.0.1 unless told otherwise: run output can hold anything a job printed, so only the
control plane (which checks its callers' permissions) should reach it.
"""

from __future__ import annotations

import re

from aiohttp import web

from executor.observed import CONTENT_TYPE
from executor.runtime import Executor

MAX_LOG_BYTES = 8 * 1024 * 1024
_RUN_ID = re.compile(r"^[0-9A-Za-z][0-9A-Za-z_.-]{0,127}$")


def application(executor: Executor) -> web.Application:
    async def health(request: web.Request) -> web.Response:
        ready = executor.ready.is_set()
        return web.json_response({"status": "ok" if ready else "starting", "executor": executor.executor_id}, status=200 if ready else 503)

    async def metrics(request: web.Request) -> web.Response:
        return web.Response(body=executor.metrics.exposition(), content_type=CONTENT_TYPE.split(";")[0], charset="utf-8")

    async def logs(request: web.Request) -> web.Response:
        run_id = request.match_info["run_id"]
        try:
            limit = min(MAX_LOG_BYTES, max(1, int(request.query.get("limit_bytes", MAX_LOG_BYTES))))
        except ValueError:
            return web.json_response({"error": "limit_bytes must be an integer"}, status=400)
        output = await executor.backend.logs(run_id, limit) if _RUN_ID.match(run_id) else None
        if output is None:
            return web.json_response({"error": f"executor {executor.executor_id} keeps no log of run {run_id}"}, status=404)
        return web.Response(body=output, content_type="text/plain", charset="utf-8")

    app = web.Application()
    app.router.add_get("/health", health)
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/runs/{run_id}/logs", logs)
    return app


async def serve(executor: Executor, host: str, port: int) -> tuple[web.AppRunner, int]:
    """Start serving; returns the runner (to clean up) and the port bound (``port`` 0: any free one)."""
    runner = web.AppRunner(application(executor), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    server = site._server  # aiohttp keeps the bound socket there; the port is needed when 0 was asked
    bound = server.sockets[0].getsockname()[1] if server is not None and server.sockets else port  # type: ignore[attr-defined]
    return runner, int(bound)
