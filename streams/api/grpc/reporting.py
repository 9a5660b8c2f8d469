"""Armada's SchedulerReporting service, answered from the log for any past cycle.

As in Armada a report is one text: `GetJobReport` is the job's story (`flotilla explain`),
`GetQueueReport` the queue in a cycle, `GetSchedulingReport` a cycle per pool and queue (or,
with Armada's deprecated filters, the report of one queue or job). Armada answers for the last
round only; here the call's metadata may name an earlier cycle: ``flotilla-cycle`` (its id) or
``flotilla-at`` (the last cycle at or before a time, epoch ms or ISO 8601).
"""

from __future__ import annotations

from typing import Any

import grpc

from streams.api.errors import ApiError
from streams.api.grpc import reporting_pb
from streams.api.grpc.calls import Api
from streams.api.grpc.errors import answers_errors
from streams.api.scheduler_reports import SchedulerReports, parse_at
from streams.replay.report_text import job_report_text, queue_report_text, scheduling_report_text

CYCLE_KEY, AT_KEY = "flotilla-cycle", "flotilla-at"


def _cycle(context: grpc.aio.ServicerContext) -> tuple[str | None, int | None]:
    metadata = {key.lower(): value for key, value in context.invocation_metadata() or ()}
    cycle, at = metadata.get(CYCLE_KEY) or None, metadata.get(AT_KEY) or None
    if cycle and at:
        raise ApiError(400, f"give {CYCLE_KEY} or {AT_KEY}, not both")
    return (str(cycle) if cycle else None), parse_at(str(at) if at else None)


class SchedulerReportingService:
    def __init__(self, api: Api, reports: SchedulerReports) -> None:
        self.api, self.reports = api, reports

    @answers_errors
    async def GetJobReport(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        if not request.job_id:
            raise ValueError("job_id is required")
        report = await self.reports.job(self.api.caller(context), request.job_id)
        return reporting_pb.JobReport(report=job_report_text(report))

    @answers_errors
    async def GetQueueReport(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        if not request.queue_name:
            raise ValueError("queue_name is required")
        report = await self.reports.queue(self.api.caller(context), request.queue_name, *_cycle(context))
        return reporting_pb.QueueReport(report=queue_report_text(report))

    @answers_errors
    async def GetSchedulingReport(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        principal = self.api.caller(context)
        which = request.WhichOneof("filter")
        if which == "most_recent_for_queue":
            report = await self.reports.queue(principal, request.most_recent_for_queue.queue_name, *_cycle(context))
            return reporting_pb.SchedulingReport(report=queue_report_text(report))
        if which == "most_recent_for_job":
            story = await self.reports.job(principal, request.most_recent_for_job.job_id)
            return reporting_pb.SchedulingReport(report=job_report_text(story))
        report = await self.reports.scheduling(principal, *_cycle(context))
        return reporting_pb.SchedulingReport(report=scheduling_report_text(report))
