"""The control plane assembled: its parts (`streams.plane`) with every agent and API bound to them.

This is the one module that knows every agent and view; each of them is handed only the parts it
uses, by its own `register`.
"""

from __future__ import annotations

from streams.agents import executor_reports, ingest, job_state, scheduler
from streams.api.grpc.server import GrpcServer
from streams.api.job_queries import JobQueries
from streams.api.local_reads import LocalReads
from streams.api.operations import Operations
from streams.api.owners import Owners
from streams.api.reads import Reads
from streams.api.rest import routes
from streams.config import Settings
from streams.domain.ids import IdFactory
from streams.kafka import kafka_clients
from streams.metrics import ObservedCollector
from streams.observing import observed
from streams.plane import ControlPlane, build_plane
from streams.tables.standby import Standbys

# How soon after a rebalance's recovery the job index is rebuilt (reads and the fold would otherwise do it first).
JOB_INDEX_REBUILD_CHECK_S = 0.5


def create_control_plane(settings: Settings) -> ControlPlane:
    plane = build_plane(settings)
    plane.app.service(plane.queues)  # type: ignore[arg-type]  # Faust types only classes; it takes instances too
    plane.app.on_partitions_assigned.connect(plane.job_index.forget)
    plane.app.on_partitions_revoked.connect(plane.job_index.forget)
    standbys = Standbys(
        plane.app,
        [plane.jobs.table, plane.jobs.specs, plane.job_index.table, plane.client_ids, plane.scheduler_index],
        kafka_clients(settings),
        settings.web_url,
    )
    plane.app.service(standbys)  # type: ignore[arg-type]  # an instance, as above
    plane.app.on_partitions_revoked.connect(standbys.stop_following)
    plane.app.on_partitions_assigned.connect(standbys.follow_assignment)

    @plane.app.timer(JOB_INDEX_REBUILD_CHECK_S)
    async def rebuild_job_index() -> None:
        """Rebuild the job index once the tables are recovered after a rebalance, so no request waits for it."""
        if plane.ready:
            plane.job_index.rebuild()

    if plane.archiver is not None:
        plane.app.service(plane.archiver)  # type: ignore[arg-type]  # an instance, as above
    ingest.register(plane)
    job_state.register(plane)
    executor_reports.register(plane)
    scheduling = scheduler.register(plane)
    plane.cluster.index = lambda: scheduling.index
    plane.metrics.registry.register(ObservedCollector(observed(plane)))
    plane.app.service(plane.peers)  # type: ignore[arg-type]  # an instance, as above
    owners = Owners(
        app=plane.app,
        partitions=settings.partitions,
        jobs_topic=plane.jobs.table.changelog_topic.get_topic_name(),
        scheduler_topic=plane.scheduler_index.changelog_topic.get_topic_name(),
        me=settings.web_url,
    )
    local = LocalReads(
        jobs=plane.jobs,
        index=plane.job_index,
        queues=plane.queues,
        permissions=plane.permissions,
        cluster=plane.cluster,
        ready=lambda: plane.ready,
        partitions=owners.local,
        me=settings.web_url,
    )
    reads = Reads(local=local, owners=owners, peers=plane.peers, partitions=settings.partitions, timeout_s=settings.route_timeout_s)
    ops = Operations(
        queues=plane.queues,
        permissions=plane.permissions,
        topics=plane.topics,
        replies=plane.replies,
        ids=IdFactory.system(),
        reads=reads,
        producer=plane.batch_producer,
        submit_timeout_s=settings.submit_timeout_s,
        submission_limits=plane.submission_limits,
        durable=plane.durable,
    )
    routes.register(plane, ops, JobQueries(reads=reads, partitions_total=settings.partitions), reads)
    plane.app.service(GrpcServer.for_plane(plane, ops))  # type: ignore[arg-type]  # an instance, as above
    return plane
