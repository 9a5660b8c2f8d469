"""The ingest agent in Faust (`agent.test_context()` on the memory store, see `tests.kit.plane`):
submit requests in, `event_sequence`s on `events`, rejections on `rejected`, the client-id table."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from schemas.codec import decode, encode
from streams.agents import ingest
from streams.domain.ids import job_partition
from streams.domain.partitioning import key_hash, partition_for
from streams.domain.validation import SubmitPolicy, validate_request
from streams.plane import ControlPlane
from streams.replies import REPLY_TO, Replies
from tests.kit.jobs import QUEUE, gang, item, request
from tests.kit.plane import agent_plane, running, sent

T = 1_717_000_000.0  # the messages' log time, epoch seconds


def plane_with_queue(tmp_path: Path) -> ControlPlane:
    plane = agent_plane(tmp_path)
    plane.queues.apply(b"team-a", encode("queue", QUEUE), 0)
    ingest.register(plane)
    return plane


def submission(*items: dict[str, Any], **envelope: Any) -> bytes:
    return encode("submit_request", request(*items, **envelope))


def sequences(plane: ControlPlane) -> list[tuple[str | None, dict[str, Any]]]:
    return [(s.text_key, decode("event_sequence", s.body)) for s in sent(plane, plane.topics.events)]


def rejections(plane: ControlPlane) -> list[tuple[str | None, dict[str, Any]]]:
    return [(s.text_key, decode("rejection", s.body)) for s in sent(plane, plane.topics.rejected)]


def counted(plane: ControlPlane, name: str, **labels: str) -> float:
    return plane.metrics.registry.get_sample_value(name, labels) or 0.0


def test_a_valid_request_becomes_one_sequence_of_submitted_jobs_and_is_answered(tmp_path: Path) -> None:
    async def scenario() -> None:
        plane = plane_with_queue(tmp_path)
        answer = plane.replies.expect("req-1")
        async with running(plane, "ingest") as agent:
            await agent.put(submission(item(client_id="train-1"), item(priority=2.0)), key=b"team-a", timestamp=T)

        [(key, sequence)] = sequences(plane)
        assert key == "team-a/set-1"
        assert (sequence["queue"], sequence["job_set_id"], sequence["user"]) == ("team-a", "set-1", "alice")
        assert [e["payload"][0] for e in sequence["events"]] == ["flotilla.JobSubmitted"] * 2
        assert {e["created"] for e in sequence["events"]} == {int(T * 1000)}  # the log's time, not the worker's clock
        first, second = sequence["events"]
        assert first["payload"][1]["client_id"] == "train-1" and second["payload"][1]["priority"] == 2.0
        assert answer.result() == [{"job_id": first["job_id"]}, {"job_id": second["job_id"]}]
        assert first["job_id"] != second["job_id"]
        # the client id is indexed, in the table and so on its changelog
        assert plane.client_ids["team-a/train-1"] == first["job_id"]
        [indexed] = sent(plane, "flotilla-client-ids-changelog")
        assert (indexed.key, indexed.value) == (b"team-a/train-1", first["job_id"].encode())
        assert rejections(plane) == []
        assert counted(plane, "flotilla_jobs_submitted_total", queue="team-a") == 2

    asyncio.run(scenario())


def test_the_submitted_events_are_the_bytes_their_validated_jobs_encode_to(tmp_path: Path) -> None:
    """Items read from the log are judged as they were read (`jobspec.is_complete`): what the agent sends
    is byte for byte what writing the jobs validated from the same request as plain dicts gives."""
    items = [item(client_id="a", labels={"team": "x"}), gang("g", "1"), item(pod_spec__termination_grace_period_seconds=30)]

    async def scenario() -> None:
        plane = plane_with_queue(tmp_path)
        async with running(plane, "ingest") as agent:
            await agent.put(submission(*items), key=b"team-a", timestamp=T)

        [sent_sequence] = sent(plane, plane.topics.events)
        sequence = decode("event_sequence", sent_sequence.body)
        assert sent_sequence.body == encode("event_sequence", sequence)
        judged = validate_request(decode("submit_request", submission(*items)), QUEUE, SubmitPolicy())
        assert [event["payload"][1] for event in sequence["events"]] == [result.job for result in judged]

    asyncio.run(scenario())


def test_a_malformed_message_is_rejected_with_its_bytes_and_a_reason(tmp_path: Path) -> None:
    async def scenario() -> None:
        plane = plane_with_queue(tmp_path)
        async with running(plane, "ingest") as agent:
            await agent.put(b"\x00not avro at all", key=b"team-a", timestamp=T)
            # the agent goes on with the next message
            await agent.put(submission(item()), key=b"team-a", timestamp=T)

        [(key, rejection)] = rejections(plane)
        assert key == "team-a" and rejection["request_key"] == "team-a"
        assert rejection["reason"].startswith("malformed submission: ")
        assert rejection["payload"] == b"\x00not avro at all"
        assert rejection["request_id"] is None and rejection["rejected_at"] == int(T * 1000)
        assert len(sequences(plane)) == 1
        assert counted(plane, "flotilla_submissions_total", outcome="malformed") == 1

    asyncio.run(scenario())


def test_every_item_for_an_unknown_queue_is_rejected_and_nothing_is_submitted(tmp_path: Path) -> None:
    async def scenario() -> None:
        plane = plane_with_queue(tmp_path)
        answer = plane.replies.expect("req-1")
        async with running(plane, "ingest") as agent:
            await agent.put(submission(item(client_id="x"), item(), queue="no-such-queue"), key=b"no-such-queue", timestamp=T)

        assert sequences(plane) == []
        rejected = rejections(plane)
        assert [(r["queue"], r["item_index"], r["client_id"]) for _, r in rejected] == [
            ("no-such-queue", 0, "x"),
            ("no-such-queue", 1, None),
        ]
        assert {r["reason"] for _, r in rejected} == {"queue 'no-such-queue' does not exist"}
        assert answer.result() == [{"error": "queue 'no-such-queue' does not exist"}] * 2
        assert "no-such-queue/x" not in plane.client_ids

    asyncio.run(scenario())


def test_a_request_without_items_is_rejected(tmp_path: Path) -> None:
    async def scenario() -> None:
        plane = plane_with_queue(tmp_path)
        async with running(plane, "ingest") as agent:
            await agent.put(submission(), key=b"team-a", timestamp=T)

        [(_, rejection)] = rejections(plane)
        assert (rejection["request_id"], rejection["reason"]) == ("req-1", "submit request has no items")
        assert sequences(plane) == []

    asyncio.run(scenario())


def test_a_repeated_client_id_is_answered_with_the_first_job_and_not_submitted_again(tmp_path: Path) -> None:
    async def scenario() -> None:
        plane = plane_with_queue(tmp_path)
        async with running(plane, "ingest") as agent:
            await agent.put(submission(item(client_id="train-1")), key=b"team-a", timestamp=T)
            second = plane.replies.expect("req-2")
            await agent.put(
                submission(item(client_id="train-1"), item(client_id="train-2"), request_id="req-2"), key=b"team-a", timestamp=T + 1
            )

        (_, first_sequence), (_, second_sequence) = sequences(plane)
        [original] = first_sequence["events"]
        [new] = second_sequence["events"]  # only train-2
        assert new["payload"][1]["client_id"] == "train-2"
        assert second.result() == [{"job_id": original["job_id"], "duplicate": True}, {"job_id": new["job_id"]}]
        assert plane.client_ids["team-a/train-1"] == original["job_id"]
        assert counted(plane, "flotilla_jobs_deduplicated_total", queue="team-a") == 1
        assert rejections(plane) == []

    asyncio.run(scenario())


def test_a_batch_written_in_parts_sends_answers_and_indexes_each_part(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Past `PART_MAX_JOBS` items the agent writes what it judged before it judges the next request."""
    monkeypatch.setattr(ingest, "PART_MAX_JOBS", 1)

    async def scenario() -> None:
        plane = plane_with_queue(tmp_path)
        answers = [plane.replies.expect(f"req-{n}") for n in (1, 2)]
        async with running(plane, "ingest") as agent:
            await agent.put(submission(item(client_id="train-1"), request_id="req-1"), key=b"team-a", timestamp=T)
            await agent.put(submission(item(client_id="train-1"), item(), request_id="req-2"), key=b"team-a", timestamp=T + 1)

        (_, first), (_, second) = sequences(plane)
        [original] = first["events"]
        assert answers[0].result() == [{"job_id": original["job_id"]}]
        assert answers[1].result() == [{"job_id": original["job_id"], "duplicate": True}, {"job_id": second["events"][0]["job_id"]}]
        assert plane.client_ids["team-a/train-1"] == original["job_id"]

    asyncio.run(scenario())


def test_the_same_message_ingested_again_yields_the_same_jobs(tmp_path: Path) -> None:
    """At-least-once: after a crash the message comes again at its offset, and its ids are the same."""

    async def scenario() -> None:
        plane = plane_with_queue(tmp_path)
        message = submission(item(client_id="train-1"), item())
        async with running(plane, "ingest") as agent:
            await agent.put(message, key=b"team-a", timestamp=T, offset=7)
            await agent.put(message, key=b"team-a", timestamp=T, offset=7)
            await agent.put(message, key=b"team-a", timestamp=T, offset=8)  # a new submission of the same items

        first, again, other = (sequence for _, sequence in sequences(plane))
        assert again == first
        # at another offset the client id is known: train-1 is a duplicate, the other item a new job
        [new] = other["events"]
        assert new["payload"][1]["client_id"] is None
        assert new["job_id"] not in {e["job_id"] for e in first["events"]}
        assert plane.client_ids["team-a/train-1"] == first["events"][0]["job_id"]

    asyncio.run(scenario())


def test_job_ids_lead_to_their_job_sets_partition_and_an_answer_goes_where_its_record_asks(tmp_path: Path) -> None:
    """The API of another worker put its address on the record: the answer is handed to it, not kept here."""

    async def scenario() -> None:
        handed: list[tuple[str, list[dict[str, Any]]]] = []

        async def send(url: str, answers: list[dict[str, Any]]) -> None:
            handed.append((url, answers))

        plane = agent_plane(tmp_path)
        plane.queues.apply(b"team-a", encode("queue", QUEUE), 0)
        plane.replies = Replies(me="http://this-worker:8080", send=send)
        ingest.register(plane)
        waiting_here = plane.replies.expect("req-1")
        async with running(plane, "ingest") as agent:
            headers = {REPLY_TO: b"http://other-worker:8080"}
            await agent.put(submission(item(), item(), item()), key=b"team-a", timestamp=T, headers=headers)
            while not handed:
                await asyncio.sleep(0.01)

        [(_, sequence)] = sequences(plane)
        job_ids = [event["job_id"] for event in sequence["events"]]
        assert handed == [("http://other-worker:8080", [{"request_id": "req-1", "items": [{"job_id": j} for j in job_ids]}])]
        assert not waiting_here.done()
        route = key_hash(b"team-a/set-1")
        for partitions in range(1, 9):
            assert {job_partition(job_id, partitions) for job_id in job_ids} == {partition_for(route, partitions)}

    asyncio.run(scenario())
