"""The topics as the embedded broker created them: each with Flotilla's configuration, read back with
DescribeConfigs (Tansu stores and reports topic configs; it does not enforce retention or compaction),
and a warning naming what differs when the topics exist with other settings."""

from __future__ import annotations

import asyncio
import logging
import uuid

import pytest

from ops.broker import EmbeddedBroker
from streams.config import MAX_MESSAGE_BYTES, Settings
from streams.kafka import kafka_clients
from streams.topics import described_configs, ensure_topics, wanted_topics

pytestmark = pytest.mark.integration


async def describe(settings: Settings, topics: list[str]) -> tuple[dict[str, dict[str, str]], dict[str, int]]:
    admin = kafka_clients(settings).admin()
    await admin.start()
    try:
        partitions = {topic["topic"]: len(topic["partitions"]) for topic in await admin.describe_topics(topics)}
        return await described_configs(admin, topics), partitions
    finally:
        await admin.close()


def test_topics_are_created_with_their_configs_and_existing_ones_that_differ_are_named(
    broker: EmbeddedBroker, caplog: pytest.LogCaptureFixture
) -> None:
    prefix = f"it-configs-{uuid.uuid4().hex[:8]}."
    settings = Settings(broker=broker.url, topic_prefix=prefix, app_id=prefix.rstrip("."), partitions=3, events_retention_ms=86_400_000)
    created = asyncio.run(ensure_topics(settings))
    assert sorted(created) == sorted(wanted_topics(settings))

    configs, partitions = asyncio.run(describe(settings, created))
    events = configs[f"{prefix}events"]
    assert (events["cleanup.policy"], events["retention.ms"]) == ("delete", "86400000")
    for name in (f"{prefix}job-states", f"{prefix}queues", f"{settings.app_id}-client-ids-changelog"):
        assert configs[name]["cleanup.policy"] == "compact", name
    assert {config["min.insync.replicas"] for config in configs.values()} == {"1"}
    assert {config["max.message.bytes"] for config in configs.values()} == {str(MAX_MESSAGE_BYTES)}
    assert "retention.ms" not in configs[f"{prefix}submissions"]
    assert (partitions[f"{prefix}events"], partitions[f"{prefix}queues"], partitions[f"{prefix}scheduler-feed"]) == (3, 1, 1)

    # Started again with another retention: nothing is created or changed, and the difference is named.
    with caplog.at_level(logging.WARNING, logger="streams.topics"):
        assert asyncio.run(ensure_topics(Settings(**{**vars(settings), "events_retention_ms": -1}))) == []
    (warning,) = [record.getMessage() for record in caplog.records if record.name == "streams.topics"]
    assert warning.startswith(f"topic {prefix}events has retention.ms=86400000, Flotilla's settings want -1; to change it:")
    assert asyncio.run(describe(settings, [f"{prefix}events"]))[0][f"{prefix}events"]["retention.ms"] == "86400000"
