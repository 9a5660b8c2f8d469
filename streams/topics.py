"""The topics of the log: names, schemas, partitioning and retention, and their creation.

Topics are created explicitly before anything produces: a broker that auto-creates topics
(Tansu does, with 4 partitions) would otherwise give a source topic a partition count that
differs from its table's changelog, which Faust refuses; and a broker's defaults are wrong for
Flotilla: Kafka deletes records after 7 days, but `events` is the source of truth (kept for ever
unless `events_retention_ms` says otherwise), and tables need compacted topics. Every topic gets
the configured replication factor and `min.insync.replicas`, and room for Flotilla's largest record.
Topics that exist already are left as they are; a setting that differs from Flotilla's is logged
with the command that changes it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from aiokafka.admin import NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.errors import TopicAlreadyExistsError

from schemas import codec
from schemas.schema_registry import SchemaRegistryClient
from streams.config import MAX_MESSAGE_BYTES, Settings
from streams.kafka import kafka_clients

log = logging.getLogger(__name__)

_TOPIC_ALREADY_EXISTS = TopicAlreadyExistsError.errno


@dataclass(frozen=True)
class TopicSpec:
    name: str  # without the prefix
    compacted: bool = False
    single_partition: bool = False
    # The source of truth: retention.ms from the settings (for ever by default), not the broker's.
    keeps_history: bool = False
    schema: str | None = None  # the Avro schema of its values (schemas/), None for Flotilla's internal encodings


# The topic reference (keys, partitioning, retention, ordering) is schemas/README.md.
TOPICS: tuple[TopicSpec, ...] = (
    TopicSpec("submissions", schema="submit_request"),
    TopicSpec("events", keeps_history=True, schema="event_sequence"),
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


def topic_configs(settings: Settings, spec: TopicSpec) -> dict[str, str]:
    """The topic-level configuration Flotilla creates ``spec`` with."""
    configs = {
        "cleanup.policy": "compact" if spec.compacted else "delete",
        "min.insync.replicas": str(settings.min_insync_replicas),
        "max.message.bytes": str(MAX_MESSAGE_BYTES),
    }
    if spec.keeps_history:
        configs["retention.ms"] = str(settings.events_retention_ms)
    return configs


def wanted_topics(settings: Settings) -> dict[str, tuple[int, dict[str, str]]]:
    """Every topic Flotilla needs, by full name: its partition count and configuration."""
    wanted = {settings.topic(spec.name): (partitions_of(settings, spec), topic_configs(settings, spec)) for spec in TOPICS}
    wanted |= {changelog_name(settings, spec.name): (partitions_of(settings, spec), topic_configs(settings, spec)) for spec in CHANGELOGS}
    return wanted


def new_topics(settings: Settings) -> list[NewTopic]:
    return [
        NewTopic(name, partitions, settings.replication_factor, topic_configs=configs)
        for name, (partitions, configs) in wanted_topics(settings).items()
    ]


async def ensure_topics(settings: Settings) -> list[str]:
    """Create every missing topic; returns the names created. Existing topics are left alone, and
    each of their settings that differs from Flotilla's is logged as a warning (see `differences`)."""
    admin = kafka_clients(settings).admin()
    await admin.start()
    try:
        response = await admin.create_topics(new_topics(settings))
        created, existing = [], []
        for name, code, message in response.topic_errors:
            if code == 0:
                created.append(name)
            elif code == _TOPIC_ALREADY_EXISTS:
                existing.append(name)
            else:
                raise RuntimeError(f"cannot create topic {name}: error {code} {message or ''}".strip())
        if created:
            log.info("created topics: %s", ", ".join(created))
        if existing:
            for warning in differences(settings, await described_configs(admin, existing)):
                log.warning("%s", warning)
        return created
    finally:
        await admin.close()


async def described_configs(admin: Any, topics: list[str]) -> dict[str, dict[str, str]]:
    """Each topic's configuration as the broker describes it (DescribeConfigs)."""
    responses = await admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, name) for name in topics])
    described: dict[str, dict[str, str]] = {}
    for response in responses:
        for resource in response.to_object()["resources"]:
            if resource["error_code"] == 0:
                entries = resource["config_entries"]
                described[resource["resource_name"]] = {entry["config_names"]: entry["config_value"] for entry in entries}
    return described


def differences(settings: Settings, described: dict[str, dict[str, str]]) -> list[str]:
    """What differs between existing topics and Flotilla's settings for them, each with the command that changes it."""
    wanted = wanted_topics(settings)
    found = []
    for name, configs in sorted(described.items()):
        if name not in wanted:
            continue
        for key, value in wanted[name][1].items():
            if key in configs and configs[key] != value:
                command = f"kafka-configs.sh --bootstrap-server HOST:PORT --alter --entity-type topics --entity-name {name} --add-config"
                found.append(
                    f"topic {name} has {key}={configs[key]}, Flotilla's settings want {value}; to change it: {command} {key}={value}"
                )
    return found
