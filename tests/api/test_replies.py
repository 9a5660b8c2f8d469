"""Answers reach the caller waiting for them, in process or on the worker its record names (reply-to)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from streams import replies as replies_module
from streams.archive.durable import ArchiveUnavailable
from streams.peers import PeerUnavailable
from streams.replies import REPLY_TO, Replies, reply_to

HERE, THERE = "http://127.0.0.1:1001", "http://127.0.0.1:1002"


def test_the_reply_to_header_is_read_from_either_header_shape() -> None:
    assert reply_to([("other", b"x"), (REPLY_TO, THERE.encode())]) == THERE
    assert reply_to({REPLY_TO: HERE.encode()}) == HERE
    assert reply_to(None) is None and reply_to([]) is None
    assert Replies(me=HERE).headers() == {REPLY_TO: HERE.encode()}


def test_an_answer_for_this_worker_or_for_nobody_in_particular_resolves_here() -> None:
    async def scenario() -> None:
        replies = Replies(me=HERE, send=None)
        mine, unaddressed = replies.expect("r1"), replies.expect("r2")
        replies.resolve("r1", [{"job_id": "J1"}], to=HERE)
        replies.resolve("r2", [{"job_id": "J2"}])
        assert (await mine, await unaddressed) == ([{"job_id": "J1"}], [{"job_id": "J2"}])

    asyncio.run(scenario())


def test_an_answer_for_another_worker_is_handed_over_and_resolves_its_caller_there() -> None:
    async def scenario() -> None:
        there = Replies(me=THERE)

        async def send(url: str, answers: list[dict[str, Any]]) -> None:
            assert url == THERE
            there.received(answers)

        here = Replies(me=HERE, send=send)
        done, failed = there.expect("r1"), there.expect("r2")
        here.resolve("r1", [{"job_id": "J1"}, {"error": "bad"}], to=THERE)
        here.fail("r2", ArchiveUnavailable("disk full"), to=THERE)
        assert await asyncio.wait_for(done, 1) == [{"job_id": "J1"}, {"error": "bad"}]
        with pytest.raises(ArchiveUnavailable, match="disk full"):
            await asyncio.wait_for(failed, 1)

    asyncio.run(scenario())


def test_a_worker_that_does_not_take_the_answers_is_tried_again_until_the_patience_is_over(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(replies_module, "SEND_PATIENCE_S", 0.5)
    monkeypatch.setattr(replies_module, "_RETRY_S", 0.01)

    async def scenario() -> None:
        tries: list[list[dict[str, Any]]] = []

        async def flaky(url: str, answers: list[dict[str, Any]]) -> None:
            tries.append(answers)
            if len(tries) < 3:
                raise PeerUnavailable("not yet")

        here = Replies(me=HERE, send=flaky)
        here.resolve("r1", ["a"], to=THERE)
        here.resolve("r2", ["b"], to=THERE)  # joins the queue while the first batch is tried
        while len(tries) < 3:
            await asyncio.sleep(0.01)
        assert [answer["request_id"] for answer in tries[-1]] == ["r1", "r2"]

        async def down(url: str, answers: list[dict[str, Any]]) -> None:
            raise PeerUnavailable("gone")

        gone = Replies(me=HERE, send=down)
        gone.resolve("r3", ["c"], to=THERE)
        await asyncio.sleep(0.8)
        assert gone._outgoing == {} and gone._senders == {}, "given up, nothing left behind"

    asyncio.run(scenario())
