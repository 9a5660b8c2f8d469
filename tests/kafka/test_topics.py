"""The topics Flotilla creates, with their settings, and what it says about existing topics that differ."""

from __future__ import annotations

from dataclasses import replace

from streams.config import MAX_MESSAGE_BYTES, Settings
from streams.topics import differences, new_topics


def test_every_topic_is_created_with_the_replication_and_its_own_cleanup_and_retention() -> None:
    settings = Settings(broker="kafka://k:9092", partitions=6, replication_factor=3, min_insync_replicas=2)
    topics = {topic.name: topic for topic in new_topics(settings)}
    assert set(topics) == {
        "flotilla.submissions",
        "flotilla.events",
        "flotilla.job-states",
        "flotilla.job-specs",
        "flotilla.scheduler-feed",
        "flotilla.executor-commands",
        "flotilla.executor-reports",
        "flotilla.queues",
        "flotilla.rejected",
        "flotilla-client-ids-changelog",
        "flotilla-job-index-changelog",
        "flotilla-scheduler-index-changelog",
    }
    assert {topic.replication_factor for topic in topics.values()} == {3}
    assert {topic.topic_configs["min.insync.replicas"] for topic in topics.values()} == {"2"}
    assert {topic.topic_configs["max.message.bytes"] for topic in topics.values()} == {str(MAX_MESSAGE_BYTES)}
    compacted = {name for name, topic in topics.items() if topic.topic_configs["cleanup.policy"] == "compact"}
    assert compacted == {
        "flotilla.job-states",
        "flotilla.job-specs",
        "flotilla.queues",
        "flotilla-client-ids-changelog",
        "flotilla-job-index-changelog",
        "flotilla-scheduler-index-changelog",
    }
    # The source of truth is kept for ever unless configured; no other topic overrides the broker's retention.
    assert {name for name, topic in topics.items() if "retention.ms" in topic.topic_configs} == {"flotilla.events"}
    assert topics["flotilla.events"].topic_configs["retention.ms"] == "-1"
    assert (topics["flotilla.events"].num_partitions, topics["flotilla.queues"].num_partitions) == (6, 1)


def test_the_events_retention_is_configurable() -> None:
    settings = Settings(events_retention_ms=90 * 24 * 3600 * 1000)
    (events,) = [topic for topic in new_topics(settings) if topic.name == "flotilla.events"]
    assert events.topic_configs["retention.ms"] == "7776000000"


def test_an_existing_topic_that_differs_is_named_with_the_command_that_changes_it() -> None:
    settings = replace(Settings(), replication_factor=3, min_insync_replicas=2)
    described = {
        "flotilla.events": {"cleanup.policy": "delete", "retention.ms": "604800000", "min.insync.replicas": "2", "segment.ms": "1"},
        "flotilla.queues": {"cleanup.policy": "delete"},
        "flotilla.job-states": {"cleanup.policy": "compact", "min.insync.replicas": "2"},
        "someone-elses-topic": {"cleanup.policy": "delete"},
    }
    assert differences(settings, described) == [
        "topic flotilla.events has retention.ms=604800000, Flotilla's settings want -1; to change it: kafka-configs.sh"
        " --bootstrap-server HOST:PORT --alter --entity-type topics --entity-name flotilla.events --add-config retention.ms=-1",
        "topic flotilla.queues has cleanup.policy=delete, Flotilla's settings want compact; to change it: kafka-configs.sh"
        " --bootstrap-server HOST:PORT --alter --entity-type topics --entity-name flotilla.queues --add-config cleanup.policy=compact",
    ]
