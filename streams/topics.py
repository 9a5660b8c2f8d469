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

from schemas import codec
from schemas.schema_registry import SchemaRegistryClient
from streams.config import Settings

log = logging.getLogger(__name__)

_TOPIC_ALREADY_EXISTS = TopicAlreadyExistsError.errno


@dataclass(frozen=True)
class TopicSpec:
    name: str  # without the prefix
    compacted: bool = False
    single_partition: bool = False
    schema: str | None = None  # the Avro schema of its values (schemas/), None for Flotilla's internal encodings


# The topic reference (keys, partitioning, retention, ordering) is schemas/README.md.
TOPICS: tuple[TopicSpec, ...] = (
    TopicSpec("submissions", schema="submit_request"),
    TopicSpec("events", schema="event_sequence"),
    TopicSpec("job-states", compacted=True, schema="job_state"),
    TopicSpec("job-specs", compacted=True, schema="job_submitted"),
    TopicSpec("scheduler-feed", single_partition=True),
    TopicSpec("executor-commands", schema="executor_command"),
    TopicSpec("executor-reports", schema="executor_report"),
    TopicSpec("queues", compacted=True, single_partition=True, schema="queue"),
    TopicSpec("rejected", schema="rejection"),
)

# Table changelogs (Faust's names, `<app id>-<table>-changelog`), created with the partition count
# of their source topics. The jobs and job-specs tables' changelogs are the public `job-states` and
# `job-specs` topics instead, so each job state and spec is produced once.
CHANGELOGS: tuple[TopicSpec, ...] = (
    TopicSpec("client-ids", compacted=True),
    TopicSpec("job-index", compacted=True),
    TopicSpec("scheduler-index", compacted=True, single_partition=True),
)


def value_subjects(settings: Settings) -> dict[str, str]:
    """Schema name -> registry subject of the topic carrying it (Confluent's TopicNameStrategy)."""
    return {spec.schema: f"{settings.topic(spec.name)}-value" for spec in TOPICS if spec.schema}


def use_configured_framing(settings: Settings) -> None:
    """Write the Confluent wire format, with the schemas registered, if a schema registry is configured.

    Every process that writes Flotilla records calls this at start-up, so a registry that is
    unreachable or refuses a schema (an incompatible change) stops it there, not at its first message.
    """
    if settings.schema_registry_url:
        ids = codec.use_schema_registry(SchemaRegistryClient(settings.schema_registry_url), value_subjects(settings))
        log.info("schemas registered at %s: %s", settings.schema_registry_url, ", ".join(f"{n} id {i}" for n, i in ids.items()))


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
