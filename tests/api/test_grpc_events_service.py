"""The Event servicer's refusals, which are all decided before any reading of the log: no broker needed."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import grpc
import pytest
from armada_client.armada import event_pb2

from streams.api.grpc.calls import Api
from streams.api.grpc.events import EventService
from streams.api.job_set_log import EventsTopic
from streams.api.operations import Operations
from streams.auth import Authenticator, Permissions, Principal
from streams.domain.ids import IdFactory
from streams.kafka import KafkaClients
from streams.replies import Replies

QUEUE = {"name": "research", "priority_factor": 1.0, "user_owners": ["alice"], "group_owners": [], "cordoned": False}


class Aborted(Exception):
    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(details)
        self.code, self.details = code, details


@dataclass
class Context:
    metadata: tuple[tuple[str, str], ...] = ()

    def invocation_metadata(self) -> tuple[tuple[str, str], ...]:
        return self.metadata

    async def abort(self, code: grpc.StatusCode, details: str) -> None:
        raise Aborted(code, details)


def service() -> EventService:
    auth = Authenticator.with_tokens({"alice-token": Principal("alice"), "bob-token": Principal("bob")})
    queues: Any = {"research": QUEUE}
    # Every refusal is decided before the jobs, the topics or the log are touched.
    nothing: Any = None
    ops = Operations(
        queues=queues, permissions=Permissions(), topics=nothing, replies=Replies(), ids=IdFactory.system(), reads=nothing, producer=nothing
    )
    api = Api(auth=auth, ops=ops, events=EventsTopic(KafkaClients("127.0.0.1:1"), "unused"), ready=lambda: True, stopping=lambda: False)
    return EventService(api)


def refusal(request: Any, token: str | None, method: str = "GetJobSetEvents") -> Aborted:
    metadata = (("authorization", f"Bearer {token}"),) if token else ()

    async def drain() -> None:
        async for _ in getattr(service(), method)(request, Context(metadata)):
            pass

    with pytest.raises(Aborted) as raised:
        asyncio.run(drain())
    return raised.value


REQUEST = event_pb2.JobSetRequest(queue="research", id="set", watch=True)


@pytest.mark.parametrize(
    "method, request_", [("GetJobSetEvents", REQUEST), ("Watch", event_pb2.WatchRequest(queue="research", job_set_id="set"))]
)
def test_no_or_a_bad_token_is_unauthenticated(method: str, request_: Any) -> None:
    for token in (None, "stolen"):
        refused = refusal(request_, token, method)
        assert refused.code == grpc.StatusCode.UNAUTHENTICATED
        assert refused.details


def test_a_caller_outside_the_queue_owners_may_not_watch() -> None:
    refused = refusal(REQUEST, "bob-token")
    assert refused.code == grpc.StatusCode.PERMISSION_DENIED
    assert "watch" in refused.details and "research" in refused.details


def test_an_unknown_queue_is_not_found_and_a_malformed_message_id_invalid() -> None:
    refused = refusal(event_pb2.JobSetRequest(queue="elsewhere", id="set"), "alice-token")
    assert (refused.code, "elsewhere" in refused.details) == (grpc.StatusCode.NOT_FOUND, True)
    refused = refusal(event_pb2.JobSetRequest(queue="research", id="set", from_message_id="last-tuesday"), "alice-token")
    assert refused.code == grpc.StatusCode.INVALID_ARGUMENT
    assert "last-tuesday" in refused.details
