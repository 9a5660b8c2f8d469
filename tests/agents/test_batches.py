"""`streams.agents.batches` in Faust (`agent.test_context()` on the memory store): messages waiting
are taken together, a batch is acknowledged only once its loop body has run, and an idle agent
sets no timers (Faust's `take_events` polled every `within`)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from streams.agents.batches import batches
from tests.kit.plane import agent_plane, running

WITHIN_S = 0.005


def test_messages_waiting_are_one_batch_acknowledged_after_its_body_and_an_idle_agent_sets_no_timers(tmp_path: Path) -> None:
    plane = agent_plane(tmp_path)
    taken: list[list[bytes | None]] = []
    acknowledged_before_body_ended: list[int] = []
    body_may_end = asyncio.Event()

    @plane.app.agent(plane.topics.submissions, name="batched", concurrency=1)
    async def batched(stream: Any) -> None:
        async for batch in batches(stream, 3, WITHIN_S):
            taken.append([event.message.value for event in batch])
            await body_may_end.wait()
            acknowledged_before_body_ended.append(sum(event.message.acked for event in batch))

    async def scenario() -> None:
        async with running(plane, "batched") as agent:
            for value in (b"a", b"b", b"c", b"d"):
                await agent.wrapper.put(value, wait=False)
            while not taken:
                await asyncio.sleep(0)
            assert taken == [[b"a", b"b", b"c"]]  # at most 3, in order
            body_may_end.set()
            await agent.settle(4)
            assert taken == [[b"a", b"b", b"c"], [b"d"]]
            assert acknowledged_before_body_ended == [0, 0]

            loop = asyncio.get_running_loop()
            scheduled = 0
            call_at = loop.call_at

            def counting_call_at(*args: Any, **kwargs: Any) -> asyncio.TimerHandle:
                nonlocal scheduled
                scheduled += 1
                return call_at(*args, **kwargs)

            loop.call_at = counting_call_at  # type: ignore[method-assign,assignment]  # counts the timers set while idle
            try:
                await asyncio.sleep(40 * WITHIN_S)  # one timer: this sleep's own
            finally:
                loop.call_at = call_at  # type: ignore[method-assign]
            assert scheduled == 1  # polling every WITHIN_S would have set about 40

            await agent.put(b"e")  # and an idle agent still takes a new message
            assert taken[-1] == [b"e"]

    asyncio.run(scenario())


def test_a_limit_given_as_a_callable_is_asked_for_each_batch(tmp_path: Path) -> None:
    """The job-state agent takes bigger batches while a restored log is refolded in its child process, and the usual ones after."""
    plane = agent_plane(tmp_path)
    taken: list[list[bytes | None]] = []
    limit = [2]

    @plane.app.agent(plane.topics.submissions, name="batched", concurrency=1)
    async def batched(stream: Any) -> None:
        async for batch in batches(stream, lambda: limit[0], WITHIN_S):
            taken.append([event.message.value for event in batch])
            limit[0] = 3

    async def scenario() -> None:
        async with running(plane, "batched") as agent:
            for value in (b"a", b"b", b"c", b"d", b"e", b"f"):
                await agent.wrapper.put(value, wait=False)
            await agent.settle(6)

    asyncio.run(scenario())

    assert taken == [[b"a", b"b"], [b"c", b"d", b"e"], [b"f"]]
