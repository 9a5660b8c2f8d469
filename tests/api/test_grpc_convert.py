"""Armada's protobuf messages to Flotilla's records and back: job items, queues, job and run states, errors."""

from __future__ import annotations

import json
from typing import Any

import grpc
import pytest
from armada_client.armada import job_pb2, submit_pb2
from armada_client.k8s.io.api.core.v1 import generated_pb2 as core
from armada_client.k8s.io.apimachinery.pkg.api.resource.generated_pb2 import Quantity
from armada_client.k8s.io.apimachinery.pkg.util.intstr import generated_pb2 as intstr
from hypothesis import given
from hypothesis import strategies as st

from schemas.codec import encode
from streams.api.errors import ApiError
from streams.api.grpc.convert import (
    EXTERNAL_JOB_URI,
    MAX_PORT,
    UNFINISHED,
    filter_states,
    job_details,
    job_error,
    job_item,
    job_state,
    queue_message,
    queue_record,
    run_state,
)
from streams.api.grpc.errors import status_of
from streams.api.grpc.submit import convert_items
from streams.api.operations import JobFinished, QueueExists
from streams.auth import PermissionDenied, Unauthenticated
from streams.domain import jobspec
from streams.domain.podspec import read_fields
from streams.domain.queues import validate_queue
from streams.domain.states import JOB_STATES, RUN_STATES
from streams.domain.validation import SubmitPolicy, validate_item


def quantities(**amounts: str) -> dict[str, Quantity]:
    return {name.replace("_", "."): Quantity(string=amount) for name, amount in amounts.items()}


def container(name: str = "main", **resources: str) -> core.Container:
    amounts = quantities(**(resources or {"cpu": "1", "memory": "64Mi"}))
    return core.Container(
        name=name,
        image="busybox:1.36",
        command=["sh", "-c"],
        args=["echo hi"],
        workingDir="/tmp",
        env=[core.EnvVar(name="A", value="1")],
        ports=[core.ContainerPort(containerPort=8080, name="http")],
        resources=core.ResourceRequirements(requests=amounts, limits=amounts),
    )


def pod(**fields: Any) -> core.PodSpec:
    return core.PodSpec(restartPolicy="Never", containers=[container()], **fields)


def test_a_request_item_becomes_the_avro_item_with_quantities_as_strings() -> None:
    spec = pod(
        nodeSelector={"disk": "ssd"},
        tolerations=[core.Toleration(key="gpu", operator="Exists", effect="NoSchedule", tolerationSeconds=30)],
        terminationGracePeriodSeconds=5,
        activeDeadlineSeconds=600,
        priorityClassName="armada-preemptible",
        serviceAccountName="runner",
        affinity=core.Affinity(
            nodeAffinity=core.NodeAffinity(
                requiredDuringSchedulingIgnoredDuringExecution=core.NodeSelector(
                    nodeSelectorTerms=[
                        core.NodeSelectorTerm(matchExpressions=[core.NodeSelectorRequirement(key="zone", operator="In", values=["a", "b"])])
                    ]
                )
            )
        ),
        initContainers=[container("init", cpu="100m", memory="1Gi", nvidia_com_gpu="1")],
    )
    item = submit_pb2.JobSubmitRequestItem(
        priority=3,
        namespace="team",
        client_id="c-1",
        labels={"app": "x"},
        annotations={"armadaproject.io/gangId": "g"},
        pod_specs=[spec],
        services=[submit_pb2.ServiceConfig(type=submit_pb2.Headless, ports=[80], name="svc")],
        ingress=[submit_pb2.IngressConfig(ports=[443], tls_enabled=True, cert_name="cert", use_clusterIP=True)],
        external_job_uri="airflow://dag/task",
    )
    converted = job_item(item)
    encode("submit_request", {"request_id": "r", "queue": "q", "job_set_id": "s", "user": "u", "groups": [], "items": [converted]})
    assert converted["client_id"] == "c-1" and converted["priority"] == 3.0 and converted["namespace"] == "team"
    assert converted["labels"] == {"app": "x"}
    assert converted["annotations"] == {"armadaproject.io/gangId": "g", EXTERNAL_JOB_URI: "airflow://dag/task"}
    assert converted["services"] == [{"type": "Headless", "ports": [80], "name": "svc"}]
    assert converted["ingresses"] == [{"ports": [443], "annotations": {}, "tls_enabled": True, "cert_name": "cert", "use_cluster_ip": True}]
    pod_spec = jobspec.pod_spec(read_fields(json.loads(converted["pod_spec"]["manifest"])))  # what submission reads, as for every way in
    main = pod_spec["containers"][0]
    assert main["resources"] == {"requests": {"cpu": "1", "memory": "64Mi"}, "limits": {"cpu": "1", "memory": "64Mi"}}
    assert main["env"] == [{"name": "A", "value": "1"}] and main["working_dir"] == "/tmp"
    assert main["ports"] == [{"container_port": 8080, "protocol": "TCP", "name": "http"}]
    assert pod_spec["init_containers"][0]["resources"]["requests"] == {"cpu": "100m", "memory": "1Gi", "nvidia.com.gpu": "1"}
    assert pod_spec["node_selector"] == {"disk": "ssd"}
    assert pod_spec["tolerations"] == [
        {"key": "gpu", "operator": "Exists", "value": None, "effect": "NoSchedule", "toleration_seconds": 30}
    ]
    assert pod_spec["affinity"] == {
        "node_affinity": {"required": [{"match_expressions": [{"key": "zone", "operator": "In", "values": ["a", "b"]}]}]}
    }
    assert (pod_spec["termination_grace_period_seconds"], pod_spec["active_deadline_seconds"]) == (5, 600)
    assert (pod_spec["priority_class_name"], pod_spec["restart_policy"], pod_spec["service_account_name"]) == (
        "armada-preemptible",
        "Never",
        "runner",
    )


def test_every_map_of_a_converted_item_is_a_plain_dict_of_the_maps_entries() -> None:
    """Protobuf maps are copied key by key (`convert._dict`), each value converted as its field says."""
    item = submit_pb2.JobSubmitRequestItem(
        labels={"app": "x", "tier": "2"},
        annotations={"a": "1"},
        required_node_labels={"disk": "ssd"},
        pod_spec=pod(nodeSelector={"zone": "a"}),
        ingress=[submit_pb2.IngressConfig(ports=[443], annotations={"b": "2"})],
    )
    converted = job_item(item)
    maps = [converted["labels"], converted["annotations"], converted["ingresses"][0]["annotations"]]
    assert all(type(found) is dict for found in maps) and maps == [{"app": "x", "tier": "2"}, {"a": "1"}, {"b": "2"}]
    spec = manifest(item)
    assert spec["nodeSelector"] == {"disk": "ssd", "zone": "a"}
    assert spec["containers"][0]["resources"] == {"requests": {"cpu": "1", "memory": "64Mi"}, "limits": {"cpu": "1", "memory": "64Mi"}}


def manifest(item: submit_pb2.JobSubmitRequestItem) -> dict[str, Any]:
    return json.loads(job_item(item)["pod_spec"]["manifest"])


def test_the_pod_spec_travels_whole_in_kubernetes_json_shape() -> None:
    """Fields Flotilla does not read reach the manifest as the Kubernetes API writes them: embedded
    structs inlined, quantities, int-or-strings and 64-bit integers as plain values."""
    probe = core.Probe(handler=core.ProbeHandler(httpGet=core.HTTPGetAction(path="/ready", port=intstr.IntOrString(type=0, intVal=8080))))
    main = container()
    main.env.append(core.EnvVar(name="POD", valueFrom=core.EnvVarSource(fieldRef=core.ObjectFieldSelector(fieldPath="metadata.name"))))
    main.volumeMounts.append(core.VolumeMount(name="scratch", mountPath="/scratch"))
    main.readinessProbe.CopyFrom(probe)
    main.securityContext.CopyFrom(core.SecurityContext(runAsUser=1000, readOnlyRootFilesystem=True))
    spec = core.PodSpec(
        restartPolicy="Never",
        containers=[main],
        volumes=[
            core.Volume(
                name="scratch", volumeSource=core.VolumeSource(emptyDir=core.EmptyDirVolumeSource(sizeLimit=Quantity(string="1Gi")))
            )
        ],
        securityContext=core.PodSecurityContext(fsGroup=2000),
        terminationGracePeriodSeconds=5,
    )
    found = manifest(submit_pb2.JobSubmitRequestItem(pod_spec=spec))
    assert found["volumes"] == [{"name": "scratch", "emptyDir": {"sizeLimit": "1Gi"}}]
    assert found["securityContext"] == {"fsGroup": 2000} and found["terminationGracePeriodSeconds"] == 5
    (only,) = found["containers"]
    assert only["env"] == [{"name": "A", "value": "1"}, {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]
    assert only["volumeMounts"] == [{"name": "scratch", "mountPath": "/scratch"}]
    assert only["readinessProbe"] == {"httpGet": {"path": "/ready", "port": 8080}}
    assert only["securityContext"] == {"runAsUser": 1000, "readOnlyRootFilesystem": True}
    assert only["resources"] == {"requests": {"cpu": "1", "memory": "64Mi"}, "limits": {"cpu": "1", "memory": "64Mi"}}
    named_port = core.Probe(handler=core.ProbeHandler(tcpSocket=core.TCPSocketAction(port=intstr.IntOrString(type=1, strVal="http"))))
    spec.containers[0].livenessProbe.CopyFrom(named_port)
    assert manifest(submit_pb2.JobSubmitRequestItem(pod_spec=spec))["containers"][0]["livenessProbe"] == {"tcpSocket": {"port": "http"}}


def test_unset_fields_take_flotillas_defaults() -> None:
    converted = job_item(submit_pb2.JobSubmitRequestItem(pod_spec=pod()))
    assert converted["client_id"] is None and converted["namespace"] == "default" and converted["priority"] == 0.0
    assert set(json.loads(converted["pod_spec"]["manifest"])) == {"restartPolicy", "containers"}
    payload, _ = validate_item(converted, SubmitPolicy())
    assert payload is not None
    spec = payload["pod_spec"]
    assert spec["termination_grace_period_seconds"] == 1 and spec["affinity"] is None and spec["priority_class_name"] == "armada-default"
    assert job_item(submit_pb2.JobSubmitRequestItem())["pod_spec"] is None  # refused by validation, with its reason


def test_required_node_labels_join_the_node_selector_which_wins() -> None:
    item = submit_pb2.JobSubmitRequestItem(pod_spec=pod(nodeSelector={"zone": "a"}), required_node_labels={"zone": "b", "disk": "ssd"})
    assert manifest(item)["nodeSelector"] == {"zone": "a", "disk": "ssd"}


def test_items_flotilla_cannot_run_are_answered_per_item() -> None:
    both = submit_pb2.JobSubmitRequestItem(pod_spec=pod(), pod_specs=[pod()])
    two = submit_pb2.JobSubmitRequestItem(pod_specs=[pod(), pod()])
    good = submit_pb2.JobSubmitRequestItem(pod_specs=[pod()])
    answers = convert_items([good, both, two])
    assert isinstance(answers[0], dict)
    assert answers[1] == "item 1: set pod_spec or pod_specs, not both"
    assert answers[2] == "item 2: a job runs exactly one pod, but this item has 2 pod specs"


TEXT = st.text(st.characters(codec="utf-8"), max_size=4)  # protobuf strings are UTF-8
MAPS = st.dictionaries(TEXT, TEXT, max_size=2)


@given(
    priority=st.floats(),
    text=TEXT,
    labels=MAPS,
    ports=st.lists(st.one_of(st.integers(0, MAX_PORT + 1), st.integers(2**31 - 2, 2**32 - 1)), max_size=3),  # an Avro int ends at 2**31 - 1
    flag=st.booleans(),
)
def test_an_item_of_any_protobuf_values_is_of_the_schemas_types_or_refused(
    priority: float, text: str, labels: dict[str, str], ports: list[int], flag: bool
) -> None:
    """What lets gRPC submissions skip the request's validation (`Operations.submit`'s ``typed``)."""
    item = submit_pb2.JobSubmitRequestItem(
        priority=priority,
        namespace=text,
        client_id=text,
        labels=labels,
        annotations=labels,
        required_node_labels=labels,
        pod_spec=pod(),
        services=[submit_pb2.ServiceConfig(type=submit_pb2.NodePort, ports=ports, name=text)],
        ingress=[submit_pb2.IngressConfig(ports=ports, annotations=labels, tls_enabled=flag, cert_name=text, use_clusterIP=flag)],
        external_job_uri=text,
    )
    try:
        converted = job_item(item)
    except ValueError as exc:
        assert max(ports) > MAX_PORT and "is not in 1..65535" in str(exc)
        return
    request = {"request_id": "r", "queue": "q", "job_set_id": text, "user": text, "groups": [text], "items": [converted]}
    assert encode("submit_request", request, validate_record=False) == encode("submit_request", request)


def test_every_flotilla_state_has_its_armada_state() -> None:
    assert {name: submit_pb2.JobState.Name(job_state(name)) for name in JOB_STATES} == {
        "queued": "QUEUED",
        "leased": "LEASED",
        "pending": "PENDING",
        "running": "RUNNING",
        "succeeded": "SUCCEEDED",
        "failed": "FAILED",
        "cancelled": "CANCELLED",
        "preempted": "PREEMPTED",
    }
    assert job_state("no such state") == submit_pb2.UNKNOWN
    assert {name: job_pb2.JobRunState.Name(run_state(name)) for name in RUN_STATES} == {
        "leased": "RUN_STATE_LEASED",
        "pending": "RUN_STATE_PENDING",
        "running": "RUN_STATE_RUNNING",
        "succeeded": "RUN_STATE_SUCCEEDED",
        "failed": "RUN_STATE_FAILED",
        "preempted": "RUN_STATE_PREEMPTED",
        "cancelled": "RUN_STATE_CANCELLED",
        "lease_expired": "RUN_STATE_LEASE_EXPIRED",
        "lease_returned": "RUNS_STATE_LEASE_RETURNED",
    }


def test_a_job_set_filter_names_the_unfinished_states_it_cancels() -> None:
    assert filter_states([]) == UNFINISHED == {"queued", "leased", "pending", "running"}
    assert filter_states([submit_pb2.QUEUED]) == {"queued"}
    assert filter_states([submit_pb2.PENDING]) == {"leased", "pending"}
    assert filter_states([submit_pb2.QUEUED, submit_pb2.RUNNING]) == {"queued", "running"}
    with pytest.raises(ValueError, match="not SUCCEEDED, CANCELLED"):
        filter_states([submit_pb2.QUEUED, submit_pb2.SUCCEEDED, submit_pb2.CANCELLED])


def test_a_queue_round_trips_with_owners_as_armada_permissions() -> None:
    message = submit_pb2.Queue(
        name="team-a",
        priority_factor=2,
        user_owners=["alice"],
        group_owners=["ml"],
        cordoned=True,
        labels={"cost-centre": "7"},
        permissions=[
            submit_pb2.Queue.Permissions(
                subjects=[submit_pb2.Queue.Permissions.Subject(kind="User", name="bob")],
                verbs=["submit", "cancel", "preempt", "reprioritize", "watch"],
            )
        ],
        resource_limits_by_priority_class_name={
            "armada-default": submit_pb2.PriorityClassResourceLimits(
                maximum_resource_fraction={"cpu": 0.5},
                maximum_resource_fraction_by_pool={
                    "gpu": submit_pb2.PriorityClassPoolResourceLimits(maximum_resource_fraction={"cpu": 0.25})
                },
            )
        },
    )
    record, reason = validate_queue(queue_record(message))
    assert reason is None and record is not None
    assert record["user_owners"] == ["alice", "bob"] and record["group_owners"] == ["ml"]
    assert record["priority_factor"] == 2.0 and record["cordoned"] and record["labels"] == {"cost-centre": "7"}
    assert record["resource_limits_by_priority_class_name"]["armada-default"]["maximum_resource_fraction_by_pool"] == {"gpu": {"cpu": 0.25}}
    back = queue_message(record)
    assert list(back.user_owners) == ["alice", "bob"] and back.cordoned and back.priority_factor == 2.0
    assert {(s.kind, s.name) for s in back.permissions[0].subjects} == {("User", "alice"), ("User", "bob"), ("Group", "ml")}
    assert back.resource_limits_by_priority_class_name["armada-default"].maximum_resource_fraction["cpu"] == 0.5
    assert queue_record(submit_pb2.Queue(name="x"))["priority_factor"] == 1.0


def test_queue_grants_flotilla_cannot_hold_are_refused() -> None:
    partial = submit_pb2.Queue.Permissions(subjects=[submit_pb2.Queue.Permissions.Subject(kind="User", name="u")], verbs=["watch"])
    with pytest.raises(ValueError, match="missing cancel, preempt, reprioritize, submit"):
        queue_record(submit_pb2.Queue(name="q", permissions=[partial]))
    robot = submit_pb2.Queue.Permissions(
        subjects=[submit_pb2.Queue.Permissions.Subject(kind="ServiceAccount", name="r")],
        verbs=["submit", "cancel", "preempt", "reprioritize", "watch"],
    )
    with pytest.raises(ValueError, match="must be User or Group"):
        queue_record(submit_pb2.Queue(name="q", permissions=[robot]))


def stored_job(state: str, **fields: Any) -> dict[str, Any]:
    spec, reason = validate_item(job_item(submit_pb2.JobSubmitRequestItem(pod_specs=[pod()], namespace="ns", priority=1)), SubmitPolicy())
    assert spec is not None, reason
    run = {
        "run_id": "run-1",
        "executor": "local",
        "node": "node-1",
        "state": "failed",
        "exit_code": 3,
        "reason": "exit code 3",
        "leased_at": 1_000,
        "started_at": 2_000,
        "finished_at": 3_000,
    }
    return {
        "job_id": "job-1",
        "queue": "q",
        "job_set_id": "s",
        "client_id": None,
        "state": state,
        "priority": 4.0,
        "priority_class": "armada-default",
        "submitted": 500,
        "last_transition": 3_000,
        "cancel_requested": False,
        "preempt_requested": False,
        "spec": spec,
        "runs": [run],
        "reason": None,
        "recent_event_ids": [],
        **fields,
    }


def test_job_details_carry_the_spec_and_runs_when_asked() -> None:
    details = job_details(stored_job("failed"), expand_job_spec=True, expand_job_run=True)
    assert (details.job_id, details.queue, details.jobset, details.namespace) == ("job-1", "q", "s", "ns")
    assert details.state == submit_pb2.FAILED and details.latest_run_id == "run-1"
    assert details.submitted_ts.ToMilliseconds() == 500 and details.last_transition_ts.ToMilliseconds() == 3_000
    assert not details.HasField("cancel_ts")
    assert details.job_spec.priority == 4.0  # the priority it has now, not the submitted one
    assert details.job_spec.pod_spec.containers[0].resources.requests["memory"].string == "64Mi"
    (run,) = details.job_runs
    assert (run.run_id, run.cluster, run.node, run.state) == ("run-1", "local", "node-1", job_pb2.RUN_STATE_FAILED)
    assert run.finished_ts.ToMilliseconds() == 3_000
    bare = job_details(stored_job("queued", runs=[]), expand_job_spec=False, expand_job_run=False)
    assert not bare.HasField("job_spec") and not bare.job_runs and bare.latest_run_id == ""
    cancelled = job_details(stored_job("cancelled", reason="cancelled on request: done"), expand_job_spec=False, expand_job_run=False)
    assert cancelled.cancel_reason == "cancelled on request: done" and cancelled.cancel_ts.ToMilliseconds() == 3_000


def test_only_a_failed_job_has_an_error() -> None:
    assert job_error(stored_job("failed", reason="max attempts reached")) == "max attempts reached"
    assert job_error(stored_job("failed")) == "exit code 3"
    assert job_error(stored_job("succeeded")) == "" and job_error(stored_job("queued", runs=[])) == ""


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (Unauthenticated("invalid token"), grpc.StatusCode.UNAUTHENTICATED),
        (PermissionDenied("not an owner"), grpc.StatusCode.PERMISSION_DENIED),
        (QueueExists("q"), grpc.StatusCode.ALREADY_EXISTS),
        (ApiError(400, "bad priority"), grpc.StatusCode.INVALID_ARGUMENT),
        (ApiError(404, "job 'x' not found"), grpc.StatusCode.NOT_FOUND),
        (JobFinished({"job_id": "j", "state": "succeeded"}, "cancel"), grpc.StatusCode.FAILED_PRECONDITION),
        (ApiError(504, "not processed in time"), grpc.StatusCode.DEADLINE_EXCEEDED),
        (ValueError("queue is required"), grpc.StatusCode.INVALID_ARGUMENT),
        (KeyError("boom"), grpc.StatusCode.INTERNAL),
    ],
)
def test_every_refusal_has_a_code_and_a_message(error: Exception, code: grpc.StatusCode) -> None:
    found, message = status_of(error)
    assert found == code
    assert message and message.strip()
