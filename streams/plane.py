"""The control plane's parts: the Faust app, its topics and tables, and the configuration they are built from.

`build_plane` makes every part from a `Settings` and nothing else; `streams.app` then binds the
agents and the API to the parts each one uses. No module holds a global app, so tests build as
many planes as they need (one per worker, or one on the `memory://` store per agent test).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import cast

import faust
from faust.tables import TableManager
from faust.types import TableT

from schemas.faust_codec import register_codecs
from streams.archive.archiver import Archiver
from streams.archive.durable import Durability, NotArchived
from streams.archive.refold import RefoldGate
from streams.archive.writer import ArchiveWriter
from streams.auth import Authenticator, Permissions
from streams.auth.setup import build_authenticator, build_permissions, credentials_configured
from streams.config import MAX_MESSAGE_BYTES, Settings
from streams.domain.admission import SubmissionLimits
from streams.domain.validation import SubmitPolicy
from streams.kafka import kafka_clients
from streams.metrics import Metrics
from streams.peers import Peers
from streams.replies import Replies
from streams.scheduler.config import CycleConfig
from streams.scheduler.config_file import SchedulerConfiguration
from streams.scheduler.config_file import load as load_scheduler_config
from streams.scheduler.view import ClusterView
from streams.tables.batched import BatchProducer, KafkaBatchProducer
from streams.tables.client_ids import client_ids_table
from streams.tables.job_index import JobIndexStore, job_index_table
from streams.tables.jobs import JobStore, job_specs_table, jobs_table
from streams.tables.manager import PromptTableManager
from streams.tables.queues import QueueReplica
from streams.tables.scheduler_index import scheduler_index_table
from streams.tables.types import TEXT_CODEC, register_text_codec


@dataclass
class Topics:
    submissions: faust.TopicT
    events: faust.TopicT
    rejected: faust.TopicT
    queues: faust.TopicT
    scheduler_feed: faust.TopicT
    executor_commands: faust.TopicT
    executor_reports: faust.TopicT


@dataclass
class ControlPlane:
    settings: Settings
    app: faust.App
    topics: Topics
    # Batched produce for the hot path (tables and topics alike), through the app's own producer.
    batch_producer: BatchProducer
    jobs: JobStore
    # Each job's row for queries, written with the jobs by the fold; partitioned like them.
    job_index: JobIndexStore
    client_ids: TableT
    queues: QueueReplica
    scheduler_index: TableT
    # The scheduler configuration file as resolved; its cycle settings and submission rules below.
    configuration: SchedulerConfiguration
    cycle_config: CycleConfig
    auth: Authenticator
    permissions: Permissions
    policy: SubmitPolicy
    submission_limits: SubmissionLimits = field(default_factory=SubmissionLimits)
    # Calls to the other workers of the group, and answers to callers waiting on any of them.
    peers: Peers = field(default_factory=Peers)
    replies: Replies = field(default_factory=Replies)
    metrics: Metrics = field(default_factory=Metrics)
    # The last cycle per pool and the executors, on the worker that schedules (the cycle's observer).
    cluster: ClusterView = field(default_factory=ClusterView)
    # The log archive's writer, when this worker keeps one; what writers await before they answer.
    archiver: Archiver | None = None
    durable: Durability = field(default_factory=NotArchived)
    refold: RefoldGate = field(default_factory=RefoldGate)

    @property
    def ready(self) -> bool:
        """Tables recovered (and after a restore, refolded), queues read up to date, no rebalance in progress: reads are current."""
        # Faust's TableManagerT interface leaves out the recovery its TableManager has.
        recovery = cast(TableManager, self.app.tables).recovery
        return recovery.completed.is_set() and self.queues.caught_up.is_set() and not self.app.rebalancing and self.refold.caught_up


def create_app(settings: Settings) -> faust.App:
    kafka = kafka_clients(settings)
    return faust.App(
        settings.app_id,
        broker=settings.broker,
        broker_credentials=kafka.faust_credentials(),
        store=settings.store,
        datadir=str(settings.data_dir),
        autodiscover=False,
        topic_partitions=settings.partitions,
        topic_replication_factor=settings.replication_factor,
        broker_session_timeout=settings.session_timeout_s,
        broker_rebalance_timeout=settings.rebalance_timeout_s,
        broker_heartbeat_interval=settings.heartbeat_interval_s,
        consumer_group_instance_id=settings.group_instance_id or None,
        consumer_auto_offset_reset="earliest",
        # Kafka transactions are optional (Tansu has none): handlers are idempotent instead.
        processing_guarantee=settings.processing_guarantee,
        web_enabled=True,
        web_bind=settings.web_host,
        web_host=settings.web_host,
        web_port=settings.web_port,
        canonical_url=settings.web_url,
        # Faust's /router and /table pages would show any table's contents to anyone, past authentication.
        web_router_enabled=False,
        web_tables_enabled=False,
        # Standby copies are kept by streams/tables/standby.py, in batches: Faust's cost a job's fold again.
        table_standby_replicas=0,
        producer_acks=-1,  # all in-sync replicas, as every Flotilla producer (streams/kafka.py)
        producer_linger_ms=5,
        producer_max_request_size=MAX_MESSAGE_BYTES,
        consumer_max_fetch_size=MAX_MESSAGE_BYTES,
        TableManager=PromptTableManager,
    )


def create_topics(app: faust.App, settings: Settings) -> Topics:
    def topic(name: str, value_serializer: str, partitions: int | None = None) -> faust.TopicT:
        return app.topic(
            settings.topic(name),
            key_serializer=TEXT_CODEC,
            value_serializer=value_serializer,
            partitions=partitions or settings.partitions,
        )

    return Topics(
        # Raw bytes: the agents decode themselves so that a malformed message is answered
        # (rejected with a reason) instead of being dropped by Faust's decoder.
        submissions=topic("submissions", "raw"),
        events=topic("events", "raw"),
        rejected=topic("rejected", "flotilla.rejection"),
        queues=topic("queues", "raw", partitions=1),
        scheduler_feed=topic("scheduler-feed", "raw", partitions=1),
        executor_commands=topic("executor-commands", "raw"),
        executor_reports=topic("executor-reports", "raw"),
    )


def create_archiver(settings: Settings) -> Archiver | None:
    if not settings.archive_dir:
        return None
    # The scheduler feed too: it is not derived from `events` (executor reports and ticks are on it
    # only) and a replay of it repeats every cycle (`flotilla audit --from-archive`). It is never restored.
    topics = {settings.topic("events"): settings.partitions, settings.topic("queues"): 1, settings.topic("scheduler-feed"): 1}
    writer = ArchiveWriter(Path(settings.archive_dir), codec=settings.archive_codec)
    return Archiver(writer, kafka_clients(settings), topics)


def build_plane(settings: Settings) -> ControlPlane:
    """Every part, with no agent or view bound yet. Reads the scheduler configuration file (raising
    ConfigFileError if it is wrong) and fetches the OIDC key set, if one is configured."""
    configuration = load_scheduler_config(settings.scheduler_config)
    register_codecs()
    register_text_codec()
    app = create_app(settings)
    cluster = ClusterView()
    archiver = create_archiver(settings)
    peers = Peers()
    return ControlPlane(
        settings=settings,
        app=app,
        topics=create_topics(app, settings),
        batch_producer=KafkaBatchProducer(app),
        jobs=JobStore(jobs_table(app, settings), job_specs_table(app, settings)),
        job_index=JobIndexStore(job_index_table(app, settings)),
        client_ids=client_ids_table(app, settings),
        queues=QueueReplica(settings),
        scheduler_index=scheduler_index_table(app, settings),
        configuration=configuration,
        cycle_config=replace(configuration.cycle, observe=cluster.observe),
        cluster=cluster,
        auth=build_authenticator(settings),
        permissions=build_permissions(settings),
        # With callers authenticated, the ingest agent checks queue ownership too (direct producers included).
        policy=replace(configuration.policy, check_ownership=credentials_configured(settings)),
        submission_limits=SubmissionLimits(
            queue_rate=settings.submission_queue_rate,
            queue_burst=settings.submission_queue_burst,
            user_rate=settings.submission_user_rate,
            user_burst=settings.submission_user_burst,
            max_message_bytes=settings.max_submission_bytes,
        ),
        archiver=archiver,
        peers=peers,
        replies=Replies(me=settings.web_url, send=peers.send_answers),
        durable=archiver.durability if archiver is not None and settings.acknowledge_when_archived else NotArchived(),
    )
