"""Armada's SchedulerReporting messages as declared here (armada-client ships no stubs for them):
the wire bytes follow Armada's field numbers, so Armada's own clients and servers read them."""

from __future__ import annotations

from streams.api.grpc import reporting_pb


def test_requests_and_reports_encode_with_armadas_field_numbers() -> None:
    request = reporting_pb.SchedulingReportRequest(most_recent_for_queue=reporting_pb.MostRecentForQueue(queue_name="a"), verbosity=2)
    # field 1 (most_recent_for_queue) holding field 1 (queue_name) "a"; field 3 (verbosity) 2
    assert request.SerializeToString() == b"\x0a\x03\x0a\x01a\x18\x02"
    assert request.WhichOneof("filter") == "most_recent_for_queue"
    by_job = reporting_pb.SchedulingReportRequest(most_recent_for_job=reporting_pb.MostRecentForJob(job_id="j"))
    assert by_job.SerializeToString() == b"\x12\x03\x0a\x01j" and by_job.WhichOneof("filter") == "most_recent_for_job"
    assert reporting_pb.QueueReportRequest(queue_name="q", verbosity=1).SerializeToString() == b"\x0a\x01q\x10\x01"
    assert reporting_pb.JobReportRequest(job_id="j").SerializeToString() == b"\x0a\x01j"
    for answer in (reporting_pb.SchedulingReport, reporting_pb.QueueReport, reporting_pb.JobReport):
        assert answer.FromString(b"\x0a\x02ok").report == "ok"


def test_the_service_has_armadas_name_and_methods() -> None:
    assert reporting_pb.SERVICE == "schedulerobjects.SchedulerReporting"
    assert set(reporting_pb.METHODS) == {"GetSchedulingReport", "GetQueueReport", "GetJobReport"}
