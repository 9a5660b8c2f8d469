"""Calls between workers: one worker asks another for what only that one holds.

Every call is a JSON POST to `/peer/v1/<op>` on the other worker's web server, at the canonical
URL the group's assignment gives for it, and carries the original caller's credentials: the
worker answering authenticates and authorises the caller itself, so the peer routes open nothing
the public API does not (`streams/api/rest/peer_routes.py` serves them).

A worker that is gone, recovering its tables or no longer owns what it was asked about answers
`PeerUnavailable`: the caller finds the owner again and retries until its own deadline. A refusal
(401, 403, 404, ...) is the answer and is passed on as it is.
"""

from __future__ import annotations

from typing import Any

import aiohttp
from mode import Service

PATH = "/peer/v1"
# A worker that does not accept a connection within this long is taken as gone for this attempt.
CONNECT_TIMEOUT_S = 2.0
# Statuses that mean "not now" rather than "no".
_RETRYABLE = frozenset({502, 503, 504})


class PeerUnavailable(Exception):
    """The other worker cannot answer now; ask again once the group has settled."""


class PeerRefused(Exception):
    """The other worker answered with a refusal (the caller's answer, not a routing problem)."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


class Peers(Service):
    """The HTTP client one worker uses for every call to another (one connection pool)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._session: aiohttp.ClientSession | None = None

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession()
        return self._session

    async def on_stop(self) -> None:
        if self._session is not None:
            await self._session.close()

    async def post(
        self, url: str, op: str, body: dict[str, Any], credentials: str | None = None, timeout_s: float = 10.0
    ) -> dict[str, Any]:
        """``op``'s answer from the worker at ``url``; PeerUnavailable or PeerRefused otherwise."""
        headers = {"Authorization": credentials} if credentials else {}
        timeout = aiohttp.ClientTimeout(total=timeout_s, sock_connect=CONNECT_TIMEOUT_S)
        try:
            async with self._client().post(f"{url}{PATH}/{op}", json=body, headers=headers, timeout=timeout) as response:
                status = response.status
                answer = await response.json(content_type=None)
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            raise PeerUnavailable(f"worker {url} did not answer {op}: {exc or type(exc).__name__}") from exc
        if status == 200 and isinstance(answer, dict):
            return answer
        reason = str(answer.get("error") if isinstance(answer, dict) else answer) or f"HTTP {status}"
        if status in _RETRYABLE:
            raise PeerUnavailable(f"worker {url} cannot answer {op} now: {reason}")
        raise PeerRefused(status, reason)

    async def send_answers(self, url: str, answers: list[dict[str, Any]]) -> None:
        """Hand submission answers to the worker whose callers wait for them (`streams.replies`)."""
        await self.post(url, "replies", {"answers": answers})
