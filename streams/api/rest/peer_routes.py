"""POST /peer/v1/<op>: what another worker of the group asks this one (`streams.peers`, `streams.api.reads`).

Each op reads this worker's own partitions (`LocalReads`) for the caller whose credentials the
asking worker passed on: the caller is authenticated and checked here as on any public route, so
these routes show nobody anything the public API would not. While this worker's tables are being
recovered, or it no longer holds what it is asked about, it answers 503 and the asking worker
looks for the owner again.

`replies` is the exception: the ingest agent of another worker hands over the answers to
submissions made here (`streams.replies`). It carries no caller; an answer is taken only for a
request id this worker is waiting on, and request ids are random.
"""

from __future__ import annotations

import faust
from faust import web

from streams.api.errors import ApiError
from streams.api.local_reads import LocalReads, NotHere
from streams.api.rest.http import answers_errors, caller, json_body
from streams.auth import Authenticator
from streams.peers import PATH
from streams.replies import Replies


def register(app: faust.App, auth: Authenticator, local: LocalReads, replies: Replies) -> None:
    @app.page(f"{PATH}/{{op:{'|'.join(sorted(local.ops()))}}}")
    class PeerRead(web.View):
        @answers_errors
        async def post(self, request: web.Request, op: str) -> web.Response:
            principal = caller(auth, request)
            body = await json_body(request)
            try:
                return self.json(await local.answer(op, principal, body))
            except NotHere as exc:
                raise ApiError(503, str(exc)) from exc

    @app.page(f"{PATH}/replies")
    class Replies(web.View):
        @answers_errors
        async def post(self, request: web.Request) -> web.Response:
            answers = (await json_body(request)).get("answers")
            if not isinstance(answers, list) or not all(isinstance(a, dict) and "request_id" in a for a in answers):
                raise ApiError(400, "answers must be a list of {request_id, items | unavailable}")
            replies.received(answers)
            return self.json({"received": len(answers)})
