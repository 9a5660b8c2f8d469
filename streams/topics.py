"""The topics of the log: names, schemas, partitioning and retention, and their creation.

Topics are created explicitly before anything produces: a broker that auto-creates topics
(Tansu does, with 4 partitions) would otherwise give a source topic a partition count that
differs from its table's changelog, which Faust refuses.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import TopicAlreadyExistsError

from streams.config import Settings

log = logging.getLogger(__name__)

_TOPIC_ALREADY_EXISTS = TopicAlreadyExistsError.errno


@dataclass(frozen=True)
class TopicSpec:
    name: str  # without the prefix
    compacted: bool = False
    single_partition: bool = False


# Values are Avro (schemas/) except on scheduler-feed: submissions submit_request, events
# event_sequence, job-states job_state, executor-commands executor_command, executor-reports
# executor_report, queues queue, rejected rejection.
TOPICS: tuple[TopicSpec, ...] = (
    TopicSpec("submissions"),
    TopicSpec("events"),
    TopicSpec("job-states", compacted=True),
    TopicSpec("scheduler-feed", single_partition=True),
    TopicSpec("executor-commands"),
    TopicSpec("executor-reports"),
    TopicSpec("queues", compacted=True, single_partition=True),
    TopicSpec("rejected"),
)

# Table changelogs (Faust's names, `<app id>-<table>-changelog`), created with the partition count
# of their source topics. The jobs table's changelog is the public `job-states` topic instead, so
# each job state is produced once.
CHANGELOGS: tuple[TopicSpec, ...] = (
    TopicSpec("client-ids", compacted=True),
    TopicSpec("job-index", compacted=True),
    TopicSpec("scheduler-index", compacted=True, single_partition=True),
)


def changelog_name(settings: Settings, table: str) -> str:
    return f"{settings.app_id}-{table}-changelog"


def partitions_of(settings: Settings, spec: TopicSpec) -> int:
    return 1 if spec.single_partition else settings.partitions


def new_topics(settings: Settings) -> list[NewTopic]:
    wanted = [
        NewTopic(
            settings.topic(spec.name),
            partitions_of(settings, spec),
            settings.replication_factor,
            topic_configs={"cleanup.policy": "compact" if spec.compacted else "delete"},
        )
        for spec in TOPICS
    ]
    wanted += [
        NewTopic(
            changelog_name(settings, spec.name),
            partitions_of(settings, spec),
            settings.replication_factor,
            topic_configs={"cleanup.policy": "compact"},
        )
        for spec in CHANGELOGS
    ]
    return wanted


async def ensure_topics(settings: Settings) -> list[str]:
    """Create every missing topic; returns the names created. Existing topics are left alone."""
    admin = AIOKafkaAdminClient(bootstrap_servers=settings.bootstrap)
    await admin.start()
    try:
        response = await admin.create_topics(new_topics(settings))
        created = []
        for name, code, message in response.topic_errors:
            if code == 0:
                created.append(name)
            elif code != _TOPIC_ALREADY_EXISTS:
                raise RuntimeError(f"cannot create topic {name}: error {code} {message or ''}".strip())
        if created:
            log.info("created topics: %s", ", ".join(created))
        return created
    finally:
        await admin.close()
