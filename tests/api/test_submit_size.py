"""How the API puts a submission on the log: refused at once (413) over the size limit, before it reaches
the log; else sent at once, keyed by its queue, with the address its answer comes back to."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import grpc
import pytest
from aiokafka.errors import KafkaTimeoutError

from schemas.codec import decode
from streams.api.errors import ApiError
from streams.api.grpc.errors import status_of
from streams.api.operations import Operations
from streams.auth import Permissions
from streams.auth.principal import ANONYMOUS
from streams.domain.admission import SubmissionLimits
from streams.domain.ids import IdFactory
from streams.domain.jobspec import job_item
from streams.replies import REPLY_TO, Replies
from tests.kit.jobs import QUEUE, item


def test_a_submission_over_the_size_limit_is_refused_before_the_log() -> None:
    queues: Any = {"team-a": QUEUE}
    # None for the parts a refused submission must not reach: using any of them would fail, so the refusal must come first
    ops = Operations(
        queues=queues,
        permissions=Permissions(),
        topics=None,  # type: ignore[arg-type]  # on purpose, see above
        replies=Replies(),
        ids=IdFactory.system(),
        reads=None,  # type: ignore[arg-type]  # on purpose, see above
        producer=None,  # type: ignore[arg-type]  # on purpose, see above
        submission_limits=SubmissionLimits(max_message_bytes=2_000),
    )
    items = [job_item(item()) for _ in range(50)]
    with pytest.raises(ApiError) as refused:
        asyncio.run(ops.submit(ANONYMOUS, "team-a", "set-1", items))
    assert refused.value.status == 413
    assert refused.value.reason.startswith("submission of ") and "over the limit of 2000 bytes" in refused.value.reason
    assert status_of(refused.value)[0] == grpc.StatusCode.RESOURCE_EXHAUSTED


def submitting(replies: Replies, producer: Any, **options: Any) -> Operations:
    """Operations that submit to queue team-a through ``producer``; no job is accepted, so none is read."""
    topics: Any = SimpleNamespace(submissions=SimpleNamespace(get_topic_name=lambda: "flotilla.submissions"))
    queues: Any = {"team-a": QUEUE}
    reads: Any = None
    return Operations(
        queues=queues,
        permissions=Permissions(),
        topics=topics,
        replies=replies,
        ids=IdFactory.system(),
        reads=reads,
        producer=producer,
        **options,
    )


def test_a_submission_goes_out_through_the_batch_path_keyed_by_its_queue_with_where_to_answer() -> None:
    """Not through Faust's `topic.send`, which let each call's one record linger 5 ms (`producer_linger_ms`)."""
    replies = Replies(me="http://worker-1:6066")
    sent: list[tuple[str, list[tuple[bytes | None, bytes | None]], list[tuple[str, bytes]]]] = []

    class Producer:
        async def send_keyed(self, topic: str, records: Any, headers: Any = ()) -> asyncio.Future[dict[int, int]]:
            sent.append((topic, list(records), list(headers)))
            for _, value in records:  # the ingest agent's answer: every item refused
                replies.resolve(decode("submit_request", value)["request_id"], [{"error": "refused"}])
            done: asyncio.Future[dict[int, int]] = asyncio.get_running_loop().create_future()
            done.set_result({0: 0})
            return done

    ops = submitting(replies, Producer())
    answer = asyncio.run(ops.submit(ANONYMOUS, "team-a", "set-1", [job_item(item())]))
    ((topic, records, headers),) = sent
    assert topic == "flotilla.submissions" and records[0][0] == b"team-a" and headers == [(REPLY_TO, b"http://worker-1:6066")]
    assert decode("submit_request", records[0][1])["request_id"] == answer.request_id and answer.items == [{"error": "refused"}]


def test_a_submission_the_log_does_not_take_is_answered_503_at_once_not_504_after_the_timeout() -> None:
    replies = Replies(me="http://worker-1:6066")

    class Producer:
        async def send_keyed(self, topic: str, records: Any, headers: Any = ()) -> asyncio.Future[dict[int, int]]:
            done: asyncio.Future[dict[int, int]] = asyncio.get_running_loop().create_future()
            done.set_exception(KafkaTimeoutError())
            return done

    ops = submitting(replies, Producer(), submit_timeout_s=3_600.0)

    async def submit() -> float:
        started = asyncio.get_running_loop().time()
        with pytest.raises(ApiError) as refused:
            await ops.submit(ANONYMOUS, "team-a", "set-1", [job_item(item())])
        assert refused.value.status == 503 and "did not acknowledge request" in refused.value.reason
        assert status_of(refused.value)[0] == grpc.StatusCode.UNAVAILABLE
        return asyncio.get_running_loop().time() - started

    assert asyncio.run(submit()) < 5.0, "refused when the broker refused, not at the hour's timeout"
