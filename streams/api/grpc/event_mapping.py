"""A job set's Flotilla events as Armada's `EventStreamMessage`s, for the gRPC `Event` service.

Pure, so every mapping is tested without a broker. `JobSetEvents` is fed the job set's event
sequences in log order, always from the start of the log (a resumed stream too), because several
Armada fields come from earlier events: the executor, node and pool of a run from its lease, the
namespace and container of a job from its submission, who asked for a cancellation.

What each Flotilla event becomes (Armada's own choices where it has an equivalent; `created` is the
event's time, pod fields name the pod the Kubernetes executor creates for the run, in the job's
namespace, and `kubernetes_id` is the run id, as in Armada):

| Flotilla event | Armada messages |
|---|---|
| JobSubmitted | `submitted` (the job as accepted) then `queued` |
| JobValidated, JobRunSucceeded, SchedulingCycle | none: no Armada counterpart (the job-level event says it) |
| JobLeased | `leased` (cluster = executor, pool) |
| JobRunPending, JobRunRunning | `pending`, `running` (cluster, run, node, pod) |
| JobSucceeded | `succeeded` |
| JobRunFailed | `lease_expired` / `lease_returned` for those categories; none for a container failure, whose exit code, reason and message go into the `failed` of the JobFailed that follows |
| JobFailed | `failed`: reason, exit codes and container status of the first container (the one Flotilla runs and reports), cause, category |
| JobRequeued | `queued` (the job waits for a new lease) |
| JobCancelRequested | `cancelling` with requestor and reason |
| JobCancelled | `cancelled` with the reason; requestor is whoever asked |
| JobPreemptRequested | `preempting` with requestor and reason |
| JobPreempted | `preempted` (run, cluster, reason) |
| JobRunPreempted | `preempted` only if the run had not ended already: normally it is the executor confirming a JobPreempted |
| JobReprioritised of a job, asked by a user | `reprioritizing` then `reprioritized`: Flotilla applies the request as it folds it, so the request is also the change |
| JobReprioritised of a job, from the scheduler | `reprioritized`: the scheduler applying a job-set request to one job; requestor is who asked |
| JobCancelRequested / JobReprioritised without a job id | none: a job-set request, which Armada does not show; the scheduler's per-job `JobCancelled` / `JobReprioritised` that follow are shown |

Message ids: an event that becomes one message gives it the event's id (the id the REST stream
shows); an event that becomes several gives them `<event id>:0`, `<event id>:1`, ... A stream
resumes after any message id, and after any event id of the job set, meaning after everything that
event became, even if that was nothing. An event delivered twice (at least once delivery) is shown
once.
"""  # noqa: E501 - the table's rows cannot be wrapped

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from armada_client.armada import event_pb2
from ulid import ULID

from executor.backends.kubernetes.manifests import pod_name
from streams.api.grpc.job_message import job_message, timestamp
from streams.domain.jobs import event_kind
from streams.scheduler.cycle import SCHEDULER_USER

_MESSAGE_ID = re.compile(r"^(?P<event>[0-9A-Za-z]{26})(?::(?P<index>0|[1-9][0-9]{0,5}))?$")

# Armada's Cause for a container that ended with these reasons.
_CAUSES = {"oomkilled": "OOM", "evicted": "Evicted", "deadlineexceeded": "DeadlineExceeded"}

Message = event_pb2.EventMessage


def check_message_id(message_id: str) -> None:
    """Raises ValueError with the reason when ``message_id`` cannot be an id this stream gives out."""
    match = _MESSAGE_ID.match(message_id)
    try:
        ULID.from_str(match["event"] if match else "")
    except ValueError:
        raise ValueError(f"from_message_id {message_id!r} is not a message id: expected <event id> or <event id>:<n>") from None


@dataclass(frozen=True)
class Position:
    """A place in a job set's gRPC stream: a message, or none for an event without an Armada counterpart,
    which is kept so that its event id still resumes the stream."""

    message: event_pb2.EventStreamMessage | None
    resume_ids: tuple[str, ...]


def resume_ids(position: Position) -> tuple[str, ...]:
    """What `streams.api.resume.ResumeAfter` matches a `from_message_id` against."""
    return position.resume_ids


@dataclass
class _Run:
    executor: str = ""
    node: str = ""
    pool: str = ""
    attempted: bool = False  # reached pending or running: Armada's `run_attempted`
    ended: bool = False


@dataclass
class _Job:
    namespace: str = ""
    container: str = ""
    latest_run: str | None = None
    failure: Mapping[str, Any] | None = None  # the latest run's JobRunFailed payload
    cancel_requestor: str | None = None
    preempt_requestor: str | None = None


@dataclass(frozen=True)
class _Event:
    job_id: str
    queue: str
    job_set_id: str
    user: str
    groups: tuple[str, ...]
    created_ms: int

    def common(self) -> dict[str, Any]:
        return {"job_id": self.job_id, "job_set_id": self.job_set_id, "queue": self.queue, "created": timestamp(self.created_ms)}


def _with_message(reason: str, message: str | None) -> str:
    return f"{reason}: {message}" if message else reason


def _cause(reason: str, category: str) -> event_pb2.Cause.ValueType:
    if category == "deadline_exceeded":
        return event_pb2.Cause.Value("DeadlineExceeded")
    return event_pb2.Cause.Value(_CAUSES.get(reason.replace("_", "").lower(), "Error"))


@dataclass
class JobSetEvents:
    """The facts earlier events established, and the mapping of each new event with them."""

    _jobs: dict[str, _Job] = field(default_factory=dict)
    _runs: dict[str, _Run] = field(default_factory=dict)
    _seen: set[str] = field(default_factory=set)
    # Who made the latest job-set request of each kind: the requestor of the per-job events it leads to.
    _job_set_requestors: dict[str, str] = field(default_factory=dict)

    def positions(self, sequence: Mapping[str, Any]) -> list[Position]:
        """The stream positions of a decoded `event_sequence`, in order."""
        positions: list[Position] = []
        for event in sequence["events"]:
            event_id = event["event_id"]
            if event_id in self._seen:
                continue
            self._seen.add(event_id)
            kind, payload = event["payload"]
            context = _Event(
                job_id=event["job_id"] or "",
                queue=sequence["queue"],
                job_set_id=sequence["job_set_id"],
                user=sequence["user"],
                groups=tuple(sequence.get("groups") or ()),
                created_ms=event["created"],
            )
            handler = _HANDLERS.get(event_kind(kind))
            messages = handler(self, context, payload) if handler is not None else []
            positions += _numbered(event_id, messages)
        return positions

    # ------------------------------------------------------------------ facts

    def _job(self, job_id: str) -> _Job:
        # A job whose submission is no longer on the log (retention) still gets its events, with fewer fields.
        return self._jobs.setdefault(job_id, _Job())

    def _run(self, run_id: str | None) -> _Run:
        return self._runs.setdefault(run_id or "", _Run())

    def _pod(self, event: _Event, run_id: str) -> dict[str, Any]:
        run = self._run(run_id)
        return {
            "cluster_id": run.executor,
            "kubernetes_id": run_id,
            "pod_number": 0,
            "pod_name": pod_name(run_id),
            "pod_namespace": self._job(event.job_id).namespace,
        }

    def _requestor(self, own: str | None, job_set_kind: str, event: _Event) -> str:
        return own or self._job_set_requestors.get(job_set_kind) or event.user

    # ------------------------------------------------------------------ one handler per event kind

    def _submitted(self, event: _Event, payload: Mapping[str, Any]) -> list[Message]:
        containers = payload["pod_spec"].get("containers") or [{}]
        self._jobs[event.job_id] = _Job(namespace=payload["namespace"], container=containers[0].get("name", ""))
        job = job_message(
            job_id=event.job_id,
            queue=event.queue,
            job_set_id=event.job_set_id,
            owner=event.user,
            groups=event.groups,
            created_ms=event.created_ms,
            spec=payload,
        )
        return [
            Message(submitted=event_pb2.JobSubmittedEvent(**event.common(), job=job)),
            Message(queued=event_pb2.JobQueuedEvent(**event.common())),
        ]

    def _leased(self, event: _Event, payload: Mapping[str, Any]) -> list[Message]:
        self._runs[payload["run_id"]] = _Run(executor=payload["executor"], node=payload["node"], pool=payload.get("pool") or "")
        job = self._job(event.job_id)
        job.latest_run, job.failure = payload["run_id"], None
        return [Message(leased=event_pb2.JobLeasedEvent(**event.common(), cluster_id=payload["executor"], pool=payload.get("pool") or ""))]

    def _pending(self, event: _Event, payload: Mapping[str, Any]) -> list[Message]:
        run = self._run(payload["run_id"])
        run.attempted = True
        return [Message(pending=event_pb2.JobPendingEvent(**event.common(), **self._pod(event, payload["run_id"]), pool=run.pool))]

    def _running(self, event: _Event, payload: Mapping[str, Any]) -> list[Message]:
        run = self._run(payload["run_id"])
        run.attempted = True
        run.node = payload.get("node") or run.node
        pod = self._pod(event, payload["run_id"])
        return [Message(running=event_pb2.JobRunningEvent(**event.common(), **pod, node_name=run.node, pool=run.pool))]

    def _succeeded(self, event: _Event, payload: Mapping[str, Any]) -> list[Message]:
        run = self._run(payload["run_id"])
        run.ended = True
        pod = self._pod(event, payload["run_id"])
        return [Message(succeeded=event_pb2.JobSucceededEvent(**event.common(), **pod, node_name=run.node))]

    def _run_failed(self, event: _Event, payload: Mapping[str, Any]) -> list[Message]:
        run_id = payload.get("run_id")
        if run_id is None:
            return []
        job = self._job(event.job_id)
        if run_id == job.latest_run:
            job.failure = payload
        run = self._run(run_id)
        category = payload["category"]
        if run.ended or category not in ("lease_expired", "lease_returned"):
            return []
        run.ended = True
        if category == "lease_expired":
            return [Message(lease_expired=event_pb2.JobLeaseExpiredEvent(**event.common()))]
        returned = event_pb2.JobLeaseReturnedEvent(
            **event.common(),
            cluster_id=run.executor,
            reason=_with_message(payload["reason"], payload.get("message")),
            kubernetes_id=run_id,
            pod_number=0,
            run_attempted=run.attempted,
        )
        return [Message(lease_returned=returned)]

    def _failed(self, event: _Event, payload: Mapping[str, Any]) -> list[Message]:
        job = self._job(event.job_id)
        failure = job.failure or {}
        reason = _with_message(payload["reason"], payload.get("message"))
        exit_code = payload.get("exit_code") if payload.get("exit_code") is not None else failure.get("exit_code")
        category = failure["category"] if failure and not failure["retryable"] else payload["reason"]
        cause = _cause(payload["reason"], category)
        fields: dict[str, Any] = {"reason": reason, "cause": cause, "failure_category": category, "retryable": False}
        if job.latest_run is not None:
            run = self._run(job.latest_run)
            run.ended = True
            fields.update(self._pod(event, job.latest_run), node_name=run.node)
        if exit_code is not None or category in ("container_error", "deadline_exceeded"):
            status = event_pb2.ContainerStatus(
                name=job.container, exitCode=exit_code or 0, message=payload.get("message") or "", reason=payload["reason"], cause=cause
            )
            fields["container_statuses"] = [status]
            if exit_code is not None:
                fields["exit_codes"] = {job.container: exit_code}
        return [Message(failed=event_pb2.JobFailedEvent(**event.common(), **fields))]

    def _requeued(self, event: _Event, payload: Mapping[str, Any]) -> list[Message]:
        return [Message(queued=event_pb2.JobQueuedEvent(**event.common()))]

    def _cancel_requested(self, event: _Event, payload: Mapping[str, Any]) -> list[Message]:
        if not event.job_id:
            self._job_set_requestors["cancel"] = event.user
            return []
        self._job(event.job_id).cancel_requestor = event.user
        return [Message(cancelling=event_pb2.JobCancellingEvent(**event.common(), requestor=event.user, reason=payload["reason"]))]

    def _cancelled(self, event: _Event, payload: Mapping[str, Any]) -> list[Message]:
        if payload.get("run_id"):
            self._run(payload["run_id"]).ended = True
        requestor = self._requestor(self._job(event.job_id).cancel_requestor, "cancel", event)
        return [Message(cancelled=event_pb2.JobCancelledEvent(**event.common(), requestor=requestor, reason=payload["reason"]))]

    def _preempt_requested(self, event: _Event, payload: Mapping[str, Any]) -> list[Message]:
        self._job(event.job_id).preempt_requestor = event.user
        return [Message(preempting=event_pb2.JobPreemptingEvent(**event.common(), requestor=event.user, reason=payload["reason"]))]

    def _preempted(self, event: _Event, payload: Mapping[str, Any]) -> list[Message]:
        run = self._run(payload["run_id"])
        if run.ended:
            return []
        run.ended = True
        preempted = event_pb2.JobPreemptedEvent(
            **event.common(),
            cluster_id=run.executor,
            run_id=payload["run_id"],
            reason=payload["reason"],
            preempting_job_id=payload.get("preemptor_job_id") or "",
            requestor=self._job(event.job_id).preempt_requestor or event.user,
        )
        return [Message(preempted=preempted)]

    def _reprioritised(self, event: _Event, payload: Mapping[str, Any]) -> list[Message]:
        priority = payload["new_priority"]
        if not event.job_id:
            self._job_set_requestors["reprioritise"] = event.user
            return []
        if event.user == SCHEDULER_USER:
            requestor = self._requestor(None, "reprioritise", event)
            return [Message(reprioritized=event_pb2.JobReprioritizedEvent(**event.common(), new_priority=priority, requestor=requestor))]
        return [
            Message(reprioritizing=event_pb2.JobReprioritizingEvent(**event.common(), new_priority=priority, requestor=event.user)),
            Message(reprioritized=event_pb2.JobReprioritizedEvent(**event.common(), new_priority=priority, requestor=event.user)),
        ]


def _numbered(event_id: str, messages: list[Message]) -> list[Position]:
    if not messages:
        return [Position(None, (event_id,))]
    if len(messages) == 1:
        return [Position(event_pb2.EventStreamMessage(id=event_id, message=messages[0]), (event_id,))]
    last = len(messages) - 1
    return [
        Position(
            event_pb2.EventStreamMessage(id=f"{event_id}:{index}", message=message),
            (f"{event_id}:{index}", event_id) if index == last else (f"{event_id}:{index}",),
        )
        for index, message in enumerate(messages)
    ]


_HANDLERS: dict[str, Callable[[JobSetEvents, _Event, Mapping[str, Any]], list[Message]]] = {
    "JobSubmitted": JobSetEvents._submitted,
    "JobLeased": JobSetEvents._leased,
    "JobRunPending": JobSetEvents._pending,
    "JobRunRunning": JobSetEvents._running,
    "JobSucceeded": JobSetEvents._succeeded,
    "JobRunFailed": JobSetEvents._run_failed,
    "JobFailed": JobSetEvents._failed,
    "JobRequeued": JobSetEvents._requeued,
    "JobCancelRequested": JobSetEvents._cancel_requested,
    "JobCancelled": JobSetEvents._cancelled,
    "JobPreemptRequested": JobSetEvents._preempt_requested,
    "JobPreempted": JobSetEvents._preempted,
    "JobRunPreempted": JobSetEvents._preempted,
    "JobReprioritised": JobSetEvents._reprioritised,
}
