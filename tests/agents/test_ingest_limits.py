"""The ingest agent's submission limits in Faust: a flood from one queue or user is answered on
`rejected` and holds up no one else; a message over the size limit is refused unread."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from schemas.codec import decode, encode
from streams.agents import ingest
from streams.plane import ControlPlane
from tests.kit.jobs import QUEUE, item, request
from tests.kit.plane import agent_plane, running, sent

T = 1_717_000_000.0  # the messages' log time, epoch seconds


def plane_with_queues(tmp_path: Path, **settings: Any) -> ControlPlane:
    plane = agent_plane(tmp_path, **settings)
    for name in ("team-a", "team-b"):
        plane.queues.apply(name.encode(), encode("queue", {**QUEUE, "name": name}), 0)
    ingest.register(plane)
    return plane


def submission(jobs: int, request_id: str, queue: str = "team-a", user: str = "alice") -> bytes:
    return encode("submit_request", request(*[item() for _ in range(jobs)], request_id=request_id, queue=queue, user=user))


def submitted_jobs(plane: ControlPlane) -> dict[str, int]:
    """Jobs submitted, per queue."""
    counts: dict[str, int] = {}
    for message in sent(plane, plane.topics.events):
        sequence = decode("event_sequence", message.body)
        counts[sequence["queue"]] = counts.get(sequence["queue"], 0) + len(sequence["events"])
    return counts


def rejections(plane: ControlPlane) -> list[dict[str, Any]]:
    return [decode("rejection", s.body) for s in sent(plane, plane.topics.rejected)]


def test_a_flooding_queue_is_answered_on_rejected_and_others_go_on(tmp_path: Path) -> None:
    async def scenario() -> None:
        plane = plane_with_queues(tmp_path, submission_queue_rate=10.0, submission_queue_burst=20)
        refused = plane.replies.expect("flood-3")
        async with running(plane, "ingest") as agent:
            for n in range(4):  # 4 x 8 jobs in the same second: the third and fourth do not fit the burst of 20
                await agent.put(submission(8, f"flood-{n}"), key=b"team-a", timestamp=T)
            await agent.put(submission(8, "other-queue", queue="team-b"), key=b"team-b", timestamp=T)
            await agent.put(submission(8, "a-second-later"), key=b"team-a", timestamp=T + 1)  # 4 + 10 tokens

        assert submitted_jobs(plane) == {"team-a": 24, "team-b": 8}
        assert [(r["request_id"], r["queue"], r["item_index"]) for r in rejections(plane)] == [
            ("flood-2", "team-a", None),
            ("flood-3", "team-a", None),
        ]
        reason = "queue 'team-a' is over its submission limit of 10 jobs/s (bursts of 20): 8 jobs submitted, 4 admissible now; retry later"
        assert {r["reason"] for r in rejections(plane)} == {reason}
        assert refused.result() == [{"error": reason}] * 8  # an API caller hears it at once
        assert plane.metrics.registry.get_sample_value("flotilla_submissions_total", {"outcome": "limited"}) == 2

    asyncio.run(scenario())


def test_a_flooding_user_is_limited_over_queues(tmp_path: Path) -> None:
    async def scenario() -> None:
        plane = plane_with_queues(tmp_path, submission_queue_rate=0.0, submission_user_rate=1.0, submission_user_burst=10)
        async with running(plane, "ingest") as agent:
            await agent.put(submission(6, "a", queue="team-a"), key=b"team-a", timestamp=T)
            await agent.put(submission(6, "b", queue="team-b"), key=b"team-b", timestamp=T)
            await agent.put(submission(6, "bob", queue="team-b", user="bob"), key=b"team-b", timestamp=T)

        assert submitted_jobs(plane) == {"team-a": 6, "team-b": 6}
        [refused] = rejections(plane)
        assert refused["request_id"] == "b" and refused["reason"].startswith("user 'alice' is over its submission limit")

    asyncio.run(scenario())


def test_a_message_over_the_size_limit_is_rejected_unread_and_the_next_one_ingested(tmp_path: Path) -> None:
    async def scenario() -> None:
        plane = plane_with_queues(tmp_path, max_submission_bytes=10_000)
        big = submission(200, "big")  # ~ 19 KB of small jobs
        assert len(big) > 10_000
        async with running(plane, "ingest") as agent:
            await agent.put(big, key=b"team-a", timestamp=T)
            await agent.put(submission(1, "small"), key=b"team-a", timestamp=T)

        [refused] = rejections(plane)
        assert refused["reason"] == (
            f"submission of {len(big)} bytes is over the limit of 10000 bytes; split it into smaller requests "
            "(this rejection keeps its first 1024 bytes)"
        )
        assert refused["payload"] == big[:1024] and refused["request_id"] is None and refused["request_key"] == "team-a"
        assert submitted_jobs(plane) == {"team-a": 1}
        assert plane.metrics.registry.get_sample_value("flotilla_submissions_total", {"outcome": "oversized"}) == 1

    asyncio.run(scenario())
