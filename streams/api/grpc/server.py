"""The gRPC server: Armada's services on `web_host:grpc_port`, started and stopped with the Faust worker.

It runs on the worker's own event loop (grpc.aio), so servicers call the same operations, tables
and producers as the REST views with no thread hand-off. Port reuse is off: a second worker on
the same port fails to start instead of silently sharing the port's calls.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import grpc
from armada_client.armada import event_pb2_grpc, job_pb2_grpc, submit_pb2_grpc
from mode import Service

from streams.api.grpc import reporting_pb
from streams.api.grpc.calls import Api
from streams.api.grpc.events import EventService
from streams.api.grpc.jobs import JobsService
from streams.api.grpc.queues import QueueService
from streams.api.grpc.reporting import SchedulerReportingService
from streams.api.grpc.submit import SubmitService
from streams.api.job_set_log import EventsTopic
from streams.api.operations import Operations
from streams.api.scheduler_reports import SchedulerReports

if TYPE_CHECKING:
    from streams.plane import ControlPlane

log = logging.getLogger(__name__)

# Stopping waits this long for calls in flight (a submission waits for the ingest agent); open event streams are cut.
STOP_GRACE_S = 5.0


class GrpcServer(Service):
    def __init__(self, address: str, api: Api, reports: SchedulerReports, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.address = address
        self.api = api
        self.reports = reports
        self._server: grpc.aio.Server | None = None

    @classmethod
    def for_plane(cls, plane: ControlPlane, ops: Operations) -> GrpcServer:
        settings = plane.settings
        api = Api(
            auth=plane.auth,
            ops=ops,
            events=EventsTopic.of(settings),
            ready=lambda: plane.ready,
            stopping=lambda: plane.app.should_stop,
        )
        return cls(f"{settings.web_host}:{settings.grpc_port}", api, SchedulerReports(settings, plane.configuration, ops))

    async def on_start(self) -> None:
        server = grpc.aio.server(options=[("grpc.so_reuseport", 0)])
        api = self.api
        submit_pb2_grpc.add_SubmitServicer_to_server(SubmitService(api), server)
        submit_pb2_grpc.add_QueueServiceServicer_to_server(QueueService(api), server)
        job_pb2_grpc.add_JobsServicer_to_server(JobsService(api), server)
        event_pb2_grpc.add_EventServicer_to_server(EventService(api), server)
        server.add_generic_rpc_handlers((reporting_pb.handler(SchedulerReportingService(api, self.reports)),))
        server.add_insecure_port(self.address)  # raises RuntimeError when the port is taken
        await server.start()
        self._server = server
        log.info("gRPC API (Armada's Submit, QueueService, Jobs, Event, SchedulerReporting) on %s", self.address)

    async def on_stop(self) -> None:
        if self._server is not None:
            await self._server.stop(STOP_GRACE_S)
