"""Flotilla's job-set events as Armada's EventStreamMessages: every event kind, ids, resuming, re-deliveries."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass, field
from typing import Any

import pytest
from armada_client.armada import event_pb2
from armada_client.client import ArmadaClient
from armada_client.typings import EventType

from schemas.codec import decode, encode
from streams.api.grpc.event_mapping import JobSetEvents, Position, check_message_id, resume_ids
from streams.api.resume import ResumeAfter
from streams.scheduler.cycle import SCHEDULER_USER
from tests.kit.armada import inner, kind
from tests.schemas.samples import JOB_ID, JOB_SET, QUEUE, RUN_ID, T0, job_submitted

OTHER_JOB = "01HZ3M1Q8K4V6T9XW2B7C5D0EG"
RUN_2 = f"{JOB_ID}-2"


@dataclass
class Log:
    """A job set's log as the reader decodes it; event ids are ULIDs numbered in log order."""

    sequences: list[dict[str, Any]] = field(default_factory=list)
    count: int = 0

    def add(
        self, kind: str, payload: dict[str, Any], job_id: str | None = JOB_ID, user: str = "alice", groups: tuple[str, ...] = ("ml",)
    ) -> str:
        event_id = f"01HZ3N{self.count:020d}"
        self.count += 1
        record = {
            "queue": QUEUE,
            "job_set_id": JOB_SET,
            "user": user,
            "groups": list(groups),
            "events": [{"event_id": event_id, "created": T0 + self.count, "job_id": job_id, "payload": (f"flotilla.{kind}", payload)}],
        }
        self.sequences.append(decode("event_sequence", encode("event_sequence", record)))
        return event_id

    def positions(self) -> list[Position]:
        mapping = JobSetEvents()
        return [position for sequence in self.sequences for position in mapping.positions(sequence)]

    def messages(self) -> list[event_pb2.EventStreamMessage]:
        return [position.message for position in self.positions() if position.message is not None]

    def kinds(self) -> list[str]:
        return [kind(message) for message in self.messages()]

    def last(self) -> Any:
        """The inner event (e.g. a JobFailedEvent) of the last message."""
        return inner(self.messages()[-1])


def submitted(log: Log, job_id: str = JOB_ID, user: str = "alice") -> str:
    return log.add("JobSubmitted", job_submitted(), job_id=job_id, user=user, groups=("ml", "llm"))


def leased(log: Log, run_id: str = RUN_ID, job_id: str = JOB_ID, node: str = "gpu-node-17") -> str:
    payload = {
        "run_id": run_id,
        "executor": "cluster-eu-1",
        "node": node,
        "pool": "gpu-eu",
        "scheduled_at_priority": 1000,
        "cycle_id": None,
    }
    return log.add("JobLeased", payload, job_id=job_id, user=SCHEDULER_USER)


def run_failed(log: Log, category: str, run_id: str = RUN_ID, **fields: Any) -> str:
    payload = {
        "run_id": run_id,
        "reason": category.replace("_", " "),
        "message": "",
        "exit_code": None,
        "category": category,
        "retryable": True,
    }
    return log.add("JobRunFailed", {**payload, **fields}, user="executor:cluster-eu-1")


def running_job() -> Log:
    log = Log()
    submitted(log)
    leased(log)
    log.add("JobRunPending", {"run_id": RUN_ID}, user="executor:cluster-eu-1")
    log.add("JobRunRunning", {"run_id": RUN_ID, "node": "gpu-node-17"}, user="executor:cluster-eu-1")
    return log


# ---------------------------------------------------------------------------- the lifecycle of a job


def test_a_job_run_to_success_is_submitted_queued_leased_pending_running_succeeded() -> None:
    log = running_job()
    log.add("JobRunSucceeded", {"run_id": RUN_ID}, user="executor:cluster-eu-1")
    log.add("JobSucceeded", {"run_id": RUN_ID}, user="executor:cluster-eu-1")

    assert log.kinds() == ["submitted", "queued", "leased", "pending", "running", "succeeded"]
    for message in log.messages():
        event = ArmadaClient.unmarshal_event_response(message)
        assert (event.message.job_id, event.message.job_set_id, event.message.queue) == (JOB_ID, JOB_SET, QUEUE)
    [_, _, lease, pending, running, success] = [ArmadaClient.unmarshal_event_response(m).message for m in log.messages()]
    assert isinstance(lease, event_pb2.JobLeasedEvent) and isinstance(pending, event_pb2.JobPendingEvent)
    assert isinstance(running, event_pb2.JobRunningEvent) and isinstance(success, event_pb2.JobSucceededEvent)
    assert (lease.cluster_id, lease.pool) == ("cluster-eu-1", "gpu-eu")
    assert lease.created.ToMilliseconds() == T0 + 2
    pod = ("cluster-eu-1", RUN_ID, f"flotilla-{RUN_ID.lower()}", "ml-research")
    assert (pending.cluster_id, pending.kubernetes_id, pending.pod_name, pending.pod_namespace) == pod
    assert pending.pool == "gpu-eu"
    assert (running.cluster_id, running.kubernetes_id, running.pod_name, running.pod_namespace) == pod
    assert (running.node_name, running.pool) == ("gpu-node-17", "gpu-eu")
    assert (success.cluster_id, success.kubernetes_id, success.pod_name, success.node_name) == (pod[0], pod[1], pod[2], "gpu-node-17")


def test_submitted_carries_the_job_as_accepted_and_queued_follows_it() -> None:
    log = Log()
    submitted(log)
    [submit, queued] = log.messages()
    job = submit.message.submitted.job
    assert submit.message.submitted.created.ToMilliseconds() == T0 + 1
    assert (job.id, job.queue, job.job_set_id, job.client_id) == (JOB_ID, QUEUE, JOB_SET, "finetune-7b-run-42-rank-0")
    assert (job.owner, list(job.queue_ownership_user_groups)) == ("alice", ["ml", "llm"])
    assert (job.namespace, job.priority) == ("ml-research", 2.5)
    assert dict(job.labels) == {"team": "llm", "experiment": "finetune-7b"}
    assert job.annotations["armadaproject.io/gangId"]
    spec = job.pod_spec
    assert [c.name for c in spec.containers] == ["trainer", "metrics-sidecar"]
    assert spec.containers[0].resources.limits["nvidia.com/gpu"].string == "8"
    assert [c.name for c in spec.initContainers] == ["fetch-weights"]
    assert spec.tolerations[1].tolerationSeconds == 300
    terms = spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms
    assert list(terms[0].matchExpressions[0].values) == ["eu-west-1a", "eu-west-1b"]
    assert (spec.priorityClassName, spec.restartPolicy, spec.terminationGracePeriodSeconds) == ("armada-preemptible", "Never", 60)
    assert [(s.name, list(s.ports)) for s in job.services] == [("rdzv", [29500]), ("", [8080])]
    assert len(job.ingress) == 1
    assert queued.message.queued.job_id == JOB_ID


def test_a_container_failure_is_one_failed_event_with_exit_code_reason_and_container_status() -> None:
    log = running_job()
    run_failed(log, "container_error", reason="OOMKilled", message="container trainer exceeded 60Gi", exit_code=137, retryable=False)
    log.add(
        "JobFailed", {"reason": "OOMKilled", "message": "container trainer exceeded 60Gi", "exit_code": 137}, user="executor:cluster-eu-1"
    )

    assert log.kinds()[-2:] == ["running", "failed"], "the run failure itself is said by the job's failed event"
    failed = log.last()
    assert failed.reason == "OOMKilled: container trainer exceeded 60Gi"
    assert dict(failed.exit_codes) == {"trainer": 137}
    [status] = failed.container_statuses
    assert (status.name, status.exitCode, status.reason, status.message) == ("trainer", 137, "OOMKilled", "container trainer exceeded 60Gi")
    assert status.cause == failed.cause == event_pb2.Cause.Value("OOM")
    assert (failed.cluster_id, failed.kubernetes_id, failed.node_name, failed.pod_namespace) == (
        "cluster-eu-1",
        RUN_ID,
        "gpu-node-17",
        "ml-research",
    )
    assert (failed.failure_category, failed.retryable) == ("container_error", False)


def test_a_plain_non_zero_exit_is_cause_error_and_a_deadline_is_deadline_exceeded() -> None:
    log = running_job()
    run_failed(log, "container_error", reason="Error", exit_code=3, retryable=False)
    log.add("JobFailed", {"reason": "Error", "message": "", "exit_code": 3})
    assert (log.last().cause, dict(log.last().exit_codes)) == (event_pb2.Cause.Value("Error"), {"trainer": 3})

    log = running_job()
    run_failed(log, "deadline_exceeded", reason="deadline_exceeded", message="ran for longer than 60 s", retryable=False)
    log.add("JobFailed", {"reason": "deadline_exceeded", "message": "ran for longer than 60 s", "exit_code": None})
    failed = log.last()
    assert failed.cause == event_pb2.Cause.Value("DeadlineExceeded")
    assert dict(failed.exit_codes) == {}, "no exit code was reported"
    assert failed.container_statuses[0].cause == event_pb2.Cause.Value("DeadlineExceeded")


def test_a_returned_lease_is_lease_returned_then_queued_and_the_next_run_is_leased_afresh() -> None:
    log = running_job()
    run_failed(log, "lease_returned", reason="lease returned", message="node drained")
    log.add("JobRequeued", {"run_id": RUN_ID, "reason": "run returned", "avoid_nodes": ["gpu-node-17"]}, user=SCHEDULER_USER)
    leased(log, run_id=RUN_2, node="gpu-node-3")

    assert log.kinds()[-3:] == ["lease_returned", "queued", "leased"]
    returned = log.messages()[-3].message.lease_returned
    assert (returned.cluster_id, returned.kubernetes_id, returned.reason) == ("cluster-eu-1", RUN_ID, "lease returned: node drained")
    assert returned.run_attempted, "the run had reached pending"


def test_a_lease_taken_back_before_the_run_started_was_not_attempted() -> None:
    log = Log()
    submitted(log)
    leased(log)
    run_failed(log, "lease_returned")
    assert log.messages()[-1].message.lease_returned.run_attempted is False


def test_an_expired_lease_is_lease_expired_and_running_out_of_attempts_fails_the_job() -> None:
    log = running_job()
    run_failed(log, "lease_expired", message="executor cluster-eu-1 has not reported for 60 s")
    log.add(
        "JobFailed",
        {"reason": "max_runs_exceeded", "message": "3 runs were returned or expired (limit 3)", "exit_code": None},
        user=SCHEDULER_USER,
    )

    assert log.kinds()[-2:] == ["lease_expired", "failed"]
    failed = log.last()
    assert failed.reason == "max_runs_exceeded: 3 runs were returned or expired (limit 3)"
    assert (failed.failure_category, failed.cause) == ("max_runs_exceeded", event_pb2.Cause.Value("Error"))
    assert list(failed.container_statuses) == [], "no container ended"
    assert (failed.cluster_id, failed.kubernetes_id) == ("cluster-eu-1", RUN_ID)


def test_a_run_taken_back_twice_is_said_once() -> None:
    log = running_job()
    run_failed(log, "lease_returned")
    run_failed(log, "lease_expired")
    assert log.kinds().count("lease_returned") + log.kinds().count("lease_expired") == 1


def test_a_run_cancelled_or_preempted_by_the_executor_says_nothing_of_its_own() -> None:
    for category in ("cancelled", "preempted", "executor_error"):
        log = running_job()
        run_failed(log, category, retryable=False)
        assert log.kinds()[-1] == "running", category


# ---------------------------------------------------------------------------- requests


def test_cancelling_a_job_is_cancelling_then_cancelled_with_the_requestor_and_reasons() -> None:
    log = running_job()
    log.add("JobCancelRequested", {"reason": "wrong data"}, user="bob")
    log.add("JobCancelled", {"run_id": RUN_ID, "reason": "cancelled on request: wrong data"}, user=SCHEDULER_USER)
    log.add(
        "JobRunFailed",
        {"run_id": RUN_ID, "reason": "cancelled", "message": "", "exit_code": None, "category": "cancelled", "retryable": False},
    )

    assert log.kinds()[-2:] == ["cancelling", "cancelled"]
    [cancelling, cancelled] = [m.message for m in log.messages()[-2:]]
    assert (cancelling.cancelling.requestor, cancelling.cancelling.reason) == ("bob", "wrong data")
    assert (cancelled.cancelled.requestor, cancelled.cancelled.reason) == ("bob", "cancelled on request: wrong data")


def test_a_job_set_request_shows_only_as_the_per_job_events_the_scheduler_writes_for_it() -> None:
    log = Log()
    submitted(log)
    submitted(log, job_id=OTHER_JOB)
    log.add("JobCancelRequested", {"reason": "abandon"}, job_id=None, user="carol")
    log.add("JobCancelled", {"run_id": None, "reason": "cancelled on request: abandon"}, user=SCHEDULER_USER)
    log.add("JobCancelled", {"run_id": None, "reason": "cancelled on request: abandon"}, job_id=OTHER_JOB, user=SCHEDULER_USER)

    assert log.kinds()[4:] == ["cancelled", "cancelled"]
    assert [m.message.cancelled.requestor for m in log.messages()[4:]] == ["carol", "carol"]
    assert [m.message.cancelled.job_id for m in log.messages()[4:]] == [JOB_ID, OTHER_JOB]


def test_reprioritising_a_job_is_reprioritizing_and_reprioritized_a_job_set_only_reprioritized() -> None:
    log = Log()
    submitted(log)
    log.add("JobReprioritised", {"new_priority": 5.0}, user="bob")
    log.add("JobReprioritised", {"new_priority": 7.0}, job_id=None, user="carol")
    log.add("JobReprioritised", {"new_priority": 7.0}, user=SCHEDULER_USER)

    assert log.kinds()[2:] == ["reprioritizing", "reprioritized", "reprioritized"]
    [asking, applied, job_set] = [inner(m) for m in log.messages()[2:]]
    assert (asking.new_priority, asking.requestor, applied.new_priority, applied.requestor) == (5.0, "bob", 5.0, "bob")
    assert (job_set.new_priority, job_set.requestor) == (7.0, "carol")


def test_preempting_a_job_is_preempting_then_one_preempted_with_its_run() -> None:
    log = running_job()
    log.add("JobPreemptRequested", {"reason": "make room"}, user="bob")
    log.add("JobPreempted", {"run_id": RUN_ID, "reason": "preempted on request"}, user=SCHEDULER_USER)
    log.add("JobRunPreempted", {"run_id": RUN_ID, "reason": "preempted", "preemptor_job_id": None}, user="executor:cluster-eu-1")

    assert log.kinds()[-2:] == ["preempting", "preempted"], "the executor's confirmation adds no second preempted"
    preempting, preempted = log.messages()[-2].message.preempting, log.last()
    assert (preempting.requestor, preempting.reason) == ("bob", "make room")
    assert (preempted.run_id, preempted.cluster_id, preempted.reason, preempted.requestor) == (
        RUN_ID,
        "cluster-eu-1",
        "preempted on request",
        "bob",
    )


def test_a_run_preempted_without_a_decision_before_it_is_still_preempted_with_its_preemptor() -> None:
    log = running_job()
    log.add("JobRunPreempted", {"run_id": RUN_ID, "reason": "evicted", "preemptor_job_id": OTHER_JOB}, user="executor:cluster-eu-1")
    assert (log.last().reason, log.last().preempting_job_id) == ("evicted", OTHER_JOB)


def test_events_without_an_armada_counterpart_have_a_position_but_no_message() -> None:
    log = Log()
    submitted(log)
    validated = log.add("JobValidated", {"pools": ["gpu-eu"]}, user="ingest")
    cycle = {"cycle_id": "c", "cycle_time": T0, "seed": 1, "feed_offsets": {}, "decisions": []}
    scheduling = log.add("SchedulingCycle", cycle, job_id=None, user=SCHEDULER_USER)
    positions = log.positions()
    assert [p.resume_ids for p in positions[2:]] == [(validated,), (scheduling,)]
    assert [p.message for p in positions[2:]] == [None, None]


# ---------------------------------------------------------------------------- ids and resuming


def test_ids_are_the_event_id_or_event_id_and_index_and_all_distinct() -> None:
    log = Log()
    submit = submitted(log)
    lease = leased(log)
    assert [m.id for m in log.messages()] == [f"{submit}:0", f"{submit}:1", lease]
    log = running_job()
    log.add("JobReprioritised", {"new_priority": 1.0}, user="bob")
    ids = [m.id for m in log.messages()]
    assert len(set(ids)) == len(ids)


def _resume(log: Log, after: str) -> list[str]:
    resume: ResumeAfter[Position] = ResumeAfter(after, answers_to=resume_ids)
    return [p.message.id for p in resume.admit(log.positions()) if p.message is not None]


def test_resuming_after_any_message_id_or_event_id_sends_what_follows() -> None:
    log = Log()
    submit = submitted(log)
    validated = log.add("JobValidated", {"pools": []}, user="ingest")
    lease = leased(log)

    assert _resume(log, f"{submit}:0") == [f"{submit}:1", lease]
    assert _resume(log, f"{submit}:1") == [lease]
    assert _resume(log, submit) == [lease], "an event id resumes after everything it became"
    assert _resume(log, validated) == [lease], "even an event that became no message"
    assert _resume(log, lease) == []
    assert _resume(log, f"{lease}:0") == [], "not an id this stream gave out: nothing is admitted"


def test_a_redelivered_event_is_shown_once() -> None:
    log = running_job()
    log.sequences.append(log.sequences[2])  # the lease, delivered again
    assert log.kinds() == ["submitted", "queued", "leased", "pending", "running"]


def test_message_ids_are_checked_before_any_reading() -> None:
    check_message_id("01HZ3N00000000000000000004")
    check_message_id("01HZ3N00000000000000000004:12")
    for bad in (
        "nope",
        "01HZ3N00000000000000000004:",
        "01HZ3N00000000000000000004:-1",
        "01HZ3N00000000000000000004:01",
        "81HZ3N00000000000000000004",
    ):
        with pytest.raises(ValueError, match="is not a message id"):
            check_message_id(bad)


def test_every_message_unmarshals_with_the_armada_client() -> None:
    log = running_job()
    log.add("JobCancelRequested", {"reason": ""}, user="bob")
    log.add("JobPreemptRequested", {"reason": ""}, user="bob")
    run_failed(log, "lease_expired")
    log.add("JobRequeued", {"run_id": RUN_ID, "reason": "lease expired", "avoid_nodes": []}, user=SCHEDULER_USER)
    log.add("JobReprioritised", {"new_priority": 2.0}, user="bob")
    log.add("JobCancelled", {"run_id": None, "reason": "cancelled on request"}, user=SCHEDULER_USER)
    types = [ArmadaClient.unmarshal_event_response(message).type for message in log.messages()]
    assert types[-7:] == [
        EventType.cancelling,
        EventType.preempting,
        EventType.lease_expired,
        EventType.queued,
        EventType.reprioritizing,
        EventType.reprioritized,
        EventType.cancelled,
    ]


def test_the_mapping_imports_neither_faust_nor_aiokafka() -> None:
    code = (
        "import sys, streams.api.grpc.event_mapping; print(sorted({m.split('.')[0] for m in sys.modules} & {'faust', 'aiokafka', 'mode'}))"
    )
    found = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert found == "[]"


def test_fields_a_job_does_not_set_stay_unset_in_its_pod_spec() -> None:
    log = Log()
    bare = {
        **job_submitted(),
        "pod_spec": {"containers": [{"name": "main", "image": "busybox", "resources": {"requests": {"cpu": "1"}, "limits": {}}}]},
    }
    log.add("JobSubmitted", bare)
    spec = log.messages()[0].message.submitted.job.pod_spec
    assert not spec.HasField("affinity") and not spec.HasField("terminationGracePeriodSeconds")
    assert not spec.containers[0].HasField("workingDir")
    assert spec.priorityClassName == "armada-preemptible", "Flotilla's priority class, where Armada keeps it"
    assert spec.containers[0].resources.requests["cpu"].string == "1"
