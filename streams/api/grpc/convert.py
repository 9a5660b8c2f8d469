"""Armada's protobuf messages to and from Flotilla's records: job items, pod specs, queues, job and run states.

Pure: what an Armada client sends becomes the snake_case shape of schemas/ (completed by
`streams.domain.jobspec`), and what Flotilla stores goes back as Armada's messages (a job's spec
through `job_message`, which the event stream shares). A pod spec travels whole, in Kubernetes'
JSON shape (`kubernetes`), and submission reads what Flotilla needs from it as it does for every
way in (`streams.domain.podspec`). A request Flotilla cannot express raises `ValueError` with the
reason.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from armada_client.armada import job_pb2, submit_pb2
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message
from google.protobuf.timestamp_pb2 import Timestamp

from streams.api.grpc.job_message import job_message, timestamp
from streams.auth.permissions import QUEUE_VERBS
from streams.domain import jobspec

# Armada's annotation for a job's id in an external system, which GetJobStatusUsingExternalJobUri looks up.
EXTERNAL_JOB_URI = "armadaproject.io/externalJobUri"

JOB_STATES: dict[str, submit_pb2.JobState.ValueType] = {
    "queued": submit_pb2.QUEUED,
    "leased": submit_pb2.LEASED,
    "pending": submit_pb2.PENDING,
    "running": submit_pb2.RUNNING,
    "succeeded": submit_pb2.SUCCEEDED,
    "failed": submit_pb2.FAILED,
    "cancelled": submit_pb2.CANCELLED,
    "preempted": submit_pb2.PREEMPTED,
}

RUN_STATES: dict[str, job_pb2.JobRunState.ValueType] = {
    "leased": job_pb2.RUN_STATE_LEASED,
    "pending": job_pb2.RUN_STATE_PENDING,
    "running": job_pb2.RUN_STATE_RUNNING,
    "succeeded": job_pb2.RUN_STATE_SUCCEEDED,
    "failed": job_pb2.RUN_STATE_FAILED,
    "preempted": job_pb2.RUN_STATE_PREEMPTED,
    "cancelled": job_pb2.RUN_STATE_CANCELLED,
    "lease_expired": job_pb2.RUN_STATE_LEASE_EXPIRED,
    "lease_returned": job_pb2.RUNS_STATE_LEASE_RETURNED,
}

# A job-set cancel filter names Armada states; these are Flotilla's states each one covers. As in
# Armada, only unfinished jobs can be cancelled, and PENDING covers a job leased but not yet running.
CANCELLABLE_BY_FILTER: dict[submit_pb2.JobState.ValueType, frozenset[str]] = {
    submit_pb2.QUEUED: frozenset({"queued"}),
    submit_pb2.LEASED: frozenset({"leased"}),
    submit_pb2.PENDING: frozenset({"leased", "pending"}),
    submit_pb2.RUNNING: frozenset({"running"}),
}
UNFINISHED = frozenset().union(*CANCELLABLE_BY_FILTER.values())


def job_state(state: str) -> submit_pb2.JobState.ValueType:
    return JOB_STATES.get(state, submit_pb2.UNKNOWN)


def run_state(state: str) -> job_pb2.JobRunState.ValueType:
    return RUN_STATES.get(state, job_pb2.RUN_STATE_UNKNOWN)


def filter_states(states: Iterable[submit_pb2.JobState.ValueType]) -> frozenset[str]:
    """Flotilla states a job-set cancel with this filter applies to; no states means every unfinished job."""
    chosen = list(states)
    if not chosen:
        return UNFINISHED
    refused = [
        submit_pb2.JobState.Name(state) if state in submit_pb2.JobState.values() else str(state)
        for state in chosen
        if state not in CANCELLABLE_BY_FILTER
    ]
    if refused:
        allowed = ", ".join(submit_pb2.JobState.Name(state) for state in CANCELLABLE_BY_FILTER)
        raise ValueError(f"a job-set cancel can filter on {allowed}, not {', '.join(refused)}")
    return frozenset().union(*(CANCELLABLE_BY_FILTER[state] for state in chosen))


# ---------------------------------------------------------------------------- submit: protobuf -> Avro


def _present(message: Message, name: str) -> Any:
    """A proto2 optional field's value, or None when it is unset."""
    return getattr(message, name) if message.HasField(name) else None


# Go structs that Kubernetes' protobufs give a field of their own and its JSON shape inlines.
_EMBEDDED = frozenset(
    {
        ("k8s.io.api.core.v1.Volume", "volumeSource"),
        ("k8s.io.api.core.v1.Probe", "handler"),
        ("k8s.io.api.core.v1.EphemeralContainer", "ephemeralContainerCommon"),
    }
)
_QUANTITY = "k8s.io.apimachinery.pkg.api.resource.Quantity"
_INT_OR_STRING = "k8s.io.apimachinery.pkg.util.intstr.IntOrString"
_TIMES = frozenset({"k8s.io.apimachinery.pkg.apis.meta.v1.Time", "k8s.io.apimachinery.pkg.apis.meta.v1.MicroTime"})


def kubernetes(message: Message) -> dict[str, Any]:
    """A Kubernetes object (a PodSpec) in its API's JSON shape, as kubectl and the API server take it,
    from the generated protobuf message: every field set, with quantities, int-or-strings and times
    as Kubernetes writes them and embedded structs inlined (protobuf's own JSON mapping differs)."""
    found: dict[str, Any] = {}
    for field, value in message.ListFields():
        json_name, embedded, convert = _PLANS.get(field) or _plan(field)
        converted = value if convert is None else convert(value)
        if embedded:
            found.update(converted)
        else:
            found[json_name] = converted
    return found


# How a field of a message is converted: its JSON name, whether its struct is inlined, and the
# conversion of its value (None: taken as it is). Worked out once per field: every item of every
# submission asks again, and the descriptors' questions cost more than the conversion (the
# schema's fields bound the entries).
_Plan = tuple[str, bool, Callable[[Any], Any] | None]
_PLANS: dict[FieldDescriptor, _Plan] = {}


def _plan(field: FieldDescriptor) -> _Plan:
    owner = field.containing_type
    assert owner is not None  # a field of a message
    plan = (field.json_name, (owner.full_name, field.name) in _EMBEDDED, _converter(field))
    _PLANS[field] = plan
    return plan


def _converter(field: FieldDescriptor) -> Callable[[Any], Any] | None:
    if field.message_type is not None and field.message_type.GetOptions().map_entry:
        entry = _single(field.message_type.fields_by_name["value"])
        if entry is None:
            return _dict
        return lambda value: {key: entry(value[key]) for key in value}
    single = _single(field)
    if field.is_repeated:
        if single is None:
            return list
        return lambda value: [single(item) for item in value]
    return single


def _single(field: FieldDescriptor) -> Callable[[Any], Any] | None:
    """How one value of the field converts; None for a scalar, taken as it is."""
    if field.message_type is None:
        return None
    name = field.message_type.full_name
    if name == _QUANTITY:
        return _quantity
    if name == _INT_OR_STRING:
        return _int_or_string
    if name in _TIMES:
        return _time
    return kubernetes


def _dict(value: Mapping[Any, Any]) -> dict[Any, Any]:
    """A protobuf map as a dict. Its keys are iterated in C, and looked up in C; `dict(value)` and
    `value.items()` go through `collections.abc`'s Python views (~2x the time, on every item's maps)."""
    return {key: value[key] for key in value}


def _quantity(value: Any) -> Any:
    return value.string


def _int_or_string(value: Any) -> Any:
    return value.strVal if value.type == 1 else value.intVal


def _time(value: Any) -> str:
    return datetime.fromtimestamp(value.seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# The largest port; ingest refuses ports outside 1..MAX_PORT whichever way they came.
MAX_PORT = 65_535


def job_item(item: submit_pb2.JobSubmitRequestItem) -> dict[str, Any]:
    """The complete Avro `JobItem` for an Armada request item; ValueError for one Flotilla cannot run.

    The item is of the schema's types by construction (`Operations.submit`'s ``typed``): every value comes
    from a protobuf field of the same type, or is built here, and the one protobuf type wider than its
    Avro type, a port's uint32, is refused above `MAX_PORT`, well within an Avro int."""
    specs = list(item.pod_specs)
    if item.HasField("pod_spec"):
        if specs:
            raise ValueError("set pod_spec or pod_specs, not both")
        specs = [item.pod_spec]
    if len(specs) > 1:
        raise ValueError(f"a job runs exactly one pod, but this item has {len(specs)} pod specs")
    spec = None
    if specs:
        # The whole pod spec travels as its manifest; submission derives what Flotilla reads from it.
        manifest = kubernetes(specs[0])
        if item.required_node_labels:
            # The deprecated field means what PodSpec.nodeSelector means; the pod spec's own entries win.
            manifest["nodeSelector"] = {**_dict(item.required_node_labels), **manifest.get("nodeSelector", {})}
        spec = {"manifest": manifest}
    annotations = _dict(item.annotations)
    if item.external_job_uri:
        annotations[EXTERNAL_JOB_URI] = item.external_job_uri
    return jobspec.job_item(
        {
            "client_id": item.client_id,
            "priority": item.priority,
            "namespace": item.namespace,
            "labels": _dict(item.labels),
            "annotations": annotations,
            "pod_spec": spec,
            "services": [
                {"type": submit_pb2.ServiceType.Name(s.type), "ports": _ports(s.ports), "name": s.name or None} for s in item.services
            ],
            "ingresses": [
                {
                    "ports": _ports(i.ports),
                    "annotations": _dict(i.annotations),
                    "tls_enabled": i.tls_enabled,
                    "cert_name": i.cert_name or None,
                    "use_cluster_ip": i.use_clusterIP,
                }
                for i in item.ingress
            ],
        }
    )


def _ports(ports: Iterable[int]) -> list[int]:
    """A port is a uint32 here and an Avro int in the item: one above `MAX_PORT` is refused at once (see `job_item`)."""
    found = list(ports)
    if found and max(found) > MAX_PORT:
        raise ValueError(f"port {max(found)} is not in 1..{MAX_PORT}")
    return found


# ---------------------------------------------------------------------------- job details: Avro -> protobuf


def _when(epoch_ms: int | None) -> Timestamp | None:
    return None if epoch_ms is None else timestamp(epoch_ms)


def job_spec_message(job: dict[str, Any]) -> submit_pb2.Job:
    """The job as submitted, with the priority it has now. Job states do not keep the submitter, so no owner."""
    return job_message(
        job_id=job["job_id"],
        queue=job["queue"],
        job_set_id=job["job_set_id"],
        owner="",
        groups=(),
        created_ms=job["submitted"],
        spec={**job["spec"], "priority": job["priority"]},
    )


def run_details(job: dict[str, Any], run: dict[str, Any]) -> job_pb2.JobRunDetails:
    return job_pb2.JobRunDetails(
        run_id=run["run_id"],
        job_id=job["job_id"],
        state=run_state(run["state"]),
        cluster=run["executor"] or "",
        node=run["node"] or "",
        leased_ts=_when(run["leased_at"]),
        # Flotilla records when a run started running, not when its pod became pending.
        started_ts=_when(run["started_at"]),
        finished_ts=_when(run["finished_at"]),
    )


def job_details(job: dict[str, Any], *, expand_job_spec: bool, expand_job_run: bool) -> job_pb2.JobDetails:
    runs = job["runs"]
    cancelled = job["state"] == "cancelled"
    return job_pb2.JobDetails(
        job_id=job["job_id"],
        queue=job["queue"],
        jobset=job["job_set_id"],
        namespace=job["spec"]["namespace"],
        state=job_state(job["state"]),
        submitted_ts=_when(job["submitted"]),
        cancel_ts=_when(job["last_transition"]) if cancelled else None,
        cancel_reason=(job["reason"] or "") if cancelled else "",
        last_transition_ts=_when(job["last_transition"]),
        latest_run_id=runs[-1]["run_id"] if runs else "",
        job_spec=job_spec_message(job) if expand_job_spec else None,
        job_runs=[run_details(job, run) for run in runs] if expand_job_run else [],
    )


def job_error(job: dict[str, Any]) -> str:
    """Why a failed job failed (its reason, else its last run's); empty for any other job, as in Armada."""
    if job["state"] != "failed":
        return ""
    last_run_reason = next((run["reason"] for run in reversed(job["runs"]) if run["reason"]), None)
    return job["reason"] or last_run_reason or "failed"


# ---------------------------------------------------------------------------- queues


def queue_record(queue: submit_pb2.Queue) -> dict[str, Any]:
    """The raw queue dict `streams.domain.queues.validate_queue` checks; ValueError for what Flotilla cannot hold."""
    users, groups = list(queue.user_owners), list(queue.group_owners)
    for permission in queue.permissions:
        # Flotilla's owners hold every queue verb; a grant of only some verbs has no Flotilla equivalent.
        missing = sorted(QUEUE_VERBS - {verb.lower() for verb in permission.verbs})
        if missing:
            raise ValueError(f"queue permissions must grant every verb ({', '.join(sorted(QUEUE_VERBS))}); missing {', '.join(missing)}")
        for subject in permission.subjects:
            kind = subject.kind.lower()
            if kind not in ("user", "group"):
                raise ValueError(f"permission subject kind {subject.kind!r} must be User or Group")
            (users if kind == "user" else groups).append(subject.name)
    if queue.resource_limits:
        raise ValueError("resource_limits is deprecated in Armada and not supported; use resource_limits_by_priority_class_name")
    return {
        "name": queue.name,
        # Armada's default when a client leaves it unset.
        "priority_factor": queue.priority_factor or 1.0,
        "user_owners": list(dict.fromkeys(users)),
        "group_owners": list(dict.fromkeys(groups)),
        "cordoned": queue.cordoned,
        "labels": dict(queue.labels),
        "resource_limits_by_priority_class_name": {
            priority_class: {
                "maximum_resource_fraction": dict(limits.maximum_resource_fraction),
                "maximum_resource_fraction_by_pool": {
                    pool: dict(by_pool.maximum_resource_fraction) for pool, by_pool in limits.maximum_resource_fraction_by_pool.items()
                },
            }
            for priority_class, limits in queue.resource_limits_by_priority_class_name.items()
        },
    }


def queue_message(queue: dict[str, Any]) -> submit_pb2.Queue:
    subjects = [submit_pb2.Queue.Permissions.Subject(kind="User", name=user) for user in queue["user_owners"]] + [
        submit_pb2.Queue.Permissions.Subject(kind="Group", name=group) for group in queue["group_owners"]
    ]
    return submit_pb2.Queue(
        name=queue["name"],
        priority_factor=queue["priority_factor"],
        user_owners=queue["user_owners"],
        group_owners=queue["group_owners"],
        cordoned=queue["cordoned"],
        labels=queue["labels"],
        permissions=[submit_pb2.Queue.Permissions(subjects=subjects, verbs=sorted(QUEUE_VERBS))] if subjects else [],
        resource_limits_by_priority_class_name={
            priority_class: submit_pb2.PriorityClassResourceLimits(
                maximum_resource_fraction=limits["maximum_resource_fraction"],
                maximum_resource_fraction_by_pool={
                    pool: submit_pb2.PriorityClassPoolResourceLimits(maximum_resource_fraction=fractions)
                    for pool, fractions in limits["maximum_resource_fraction_by_pool"].items()
                },
            )
            for priority_class, limits in queue["resource_limits_by_priority_class_name"].items()
        },
    )
