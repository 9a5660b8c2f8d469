"""Armada's own Python client (`armada_client.client.ArmadaClient`) against a running worker, over a real gRPC channel.

The worker has no executor, so submitted jobs stay queued until cancelled; the scheduling agent
still runs its cycles, which is what applies a job-set cancel. A second worker serves with a token
file, to show that callers without a valid token or outside a queue's owners are refused and
leave nothing on the log.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any, cast

import grpc
import pytest
from armada_client.armada import job_pb2, submit_pb2, submit_pb2_grpc
from armada_client.client import ArmadaClient
from armada_client.k8s.io.api.core.v1 import generated_pb2 as core
from armada_client.k8s.io.apimachinery.pkg.api.resource.generated_pb2 import Quantity
from armada_client.typings import JobState

from ops.broker import EmbeddedBroker
from schemas.codec import decode
from tests.integration.helpers import call
from tests.integration.workers import Worker, new_worker, poll

pytestmark = pytest.mark.integration

QUEUE = "grpc"


def pod(cpu: str = "100m", memory: str = "64Mi", **fields: Any) -> core.PodSpec:
    amounts = {"cpu": Quantity(string=cpu), "memory": Quantity(string=memory)}
    return core.PodSpec(
        restartPolicy="Never",
        containers=[
            core.Container(
                name="main",
                image="busybox:1.36",
                command=["sh", "-c"],
                args=["true"],
                resources=core.ResourceRequirements(requests=amounts, limits=amounts),
            )
        ],
        **fields,
    )


def code_of(call: Any) -> tuple[grpc.StatusCode, str]:
    with pytest.raises(grpc.RpcError) as raised:
        call()
    return raised.value.code(), raised.value.details() or ""


class Bearer(grpc.UnaryUnaryClientInterceptor, grpc.UnaryStreamClientInterceptor):
    """Adds `authorization: Bearer <token>` to every call, as an Armada client configured with a token does."""

    def __init__(self, token: str) -> None:
        self.token = token

    def _with_token(self, details: Any) -> Any:
        metadata = [*(details.metadata or []), ("authorization", f"Bearer {self.token}")]
        return details._replace(metadata=metadata)

    def intercept_unary_unary(self, continuation: Any, details: Any, request: Any) -> Any:
        return continuation(self._with_token(details), request)

    def intercept_unary_stream(self, continuation: Any, details: Any, request: Any) -> Any:
        return continuation(self._with_token(details), request)


@pytest.fixture(scope="module")
def client(worker: Worker) -> Iterator[ArmadaClient]:
    with grpc.insecure_channel(worker.grpc_target) as channel:
        armada = ArmadaClient(channel)
        armada.create_queue(armada.create_queue_request(QUEUE, priority_factor=1.0))
        yield armada


def submit(client: ArmadaClient, job_set: str, count: int) -> list[str]:
    items = [client.create_job_request_item(priority=1, pod_spec=pod(), namespace="default") for _ in range(count)]
    answer = client.submit_jobs(QUEUE, job_set, items)
    assert all(item.job_id and not item.error for item in answer.job_response_items), answer
    return [item.job_id for item in answer.job_response_items]


def states(client: ArmadaClient, job_ids: list[str]) -> dict[str, str]:
    return {job_id: submit_pb2.JobState.Name(state) for job_id, state in client.get_job_status(job_ids).job_states.items()}


def until_states(client: ArmadaClient, job_ids: list[str], state: str) -> None:
    poll(lambda: set(states(client, job_ids).values()) == {state}, 30, f"jobs {job_ids} {state}")


def test_health_and_queues(client: ArmadaClient) -> None:
    assert client.submit_health().status == 1  # SERVING
    assert client.event_health().status == 1
    assert client.get_queue(QUEUE).name == QUEUE
    assert code_of(lambda: client.create_queue(client.create_queue_request(QUEUE, 1.0)))[0] == grpc.StatusCode.ALREADY_EXISTS
    code, message = code_of(lambda: client.create_queue(client.create_queue_request("Not A Name", 1.0)))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "lower-case" in message
    code, message = code_of(lambda: client.get_queue("no-such-queue"))
    assert code == grpc.StatusCode.NOT_FOUND and "no-such-queue" in message

    # batch calls answer each queue's refusal in the response, as Armada does
    created = client.create_queues(
        [client.create_queue_request("batch-a", 2.0, group_owners=["ml"]), client.create_queue_request(QUEUE, 1.0)]
    )
    assert [(failed.queue.name, "already exists" in failed.error) for failed in created.failed_queues] == [(QUEUE, True)]
    updated = client.update_queues([client.create_queue_request("batch-a", 3.0), client.create_queue_request("batch-missing", 1.0)])
    assert [failed.queue.name for failed in updated.failed_queues] == ["batch-missing"]
    assert client.get_queue("batch-a").priority_factor == 3.0

    client.update_queue(client.create_queue_request("batch-a", 4.0, user_owners=["alice"]))
    queue = client.get_queue("batch-a")
    assert (queue.priority_factor, list(queue.user_owners)) == (4.0, ["alice"])
    assert {q.name for q in client.get_queues()} >= {QUEUE, "batch-a"}
    client.delete_queue("batch-a")
    assert code_of(lambda: client.get_queue("batch-a"))[0] == grpc.StatusCode.NOT_FOUND
    assert code_of(lambda: client.delete_queue("batch-a"))[0] == grpc.StatusCode.NOT_FOUND
    assert "batch-a" not in {q.name for q in client.get_queues()}


def test_the_submit_services_own_batch_queue_calls_answer_per_queue(worker: Worker, client: ArmadaClient) -> None:
    """Armada's Submit service also serves CreateQueues/UpdateQueues (ArmadaClient calls QueueService's); both failed
    with a TypeError until a helper of the Submit service stopped shadowing the queue calls' one."""
    with grpc.insecure_channel(worker.grpc_target) as channel:
        stub = submit_pb2_grpc.SubmitStub(channel)
        created = stub.CreateQueues(
            submit_pb2.QueueList(
                queues=[submit_pb2.Queue(name="submit-a", priority_factor=2.0), submit_pb2.Queue(name=QUEUE, priority_factor=1.0)]
            ),
            timeout=60,
        )
        assert [(failed.queue.name, "already exists" in failed.error) for failed in created.failed_queues] == [(QUEUE, True)]
        updated = stub.UpdateQueues(
            submit_pb2.QueueList(
                queues=[
                    submit_pb2.Queue(name="submit-a", priority_factor=5.0),
                    submit_pb2.Queue(name="submit-missing", priority_factor=1.0),
                ]
            ),
            timeout=60,
        )
        assert [failed.queue.name for failed in updated.failed_queues] == ["submit-missing"]
    assert client.get_queue("submit-a").priority_factor == 5.0
    client.delete_queue("submit-a")


def test_twenty_jobs_are_queued_and_details_describe_them(client: ArmadaClient) -> None:
    job_ids = submit(client, "twenty", 20)
    assert len(set(job_ids)) == 20
    assert states(client, job_ids) == {job_id: "QUEUED" for job_id in job_ids}
    assert states(client, ["no-such-job"]) == {"no-such-job": "UNKNOWN"}

    details = client.get_job_details(job_ids[:2]).job_details
    assert set(details) == set(job_ids[:2])
    first = details[job_ids[0]]
    assert (first.queue, first.jobset, first.namespace, first.state) == (QUEUE, "twenty", "default", submit_pb2.QUEUED)
    assert first.submitted_ts.seconds > 0 and not first.job_runs and first.latest_run_id == ""
    assert client.get_job_errors(job_ids[:3]).job_errors == {job_id: "" for job_id in job_ids[:3]}
    assert dict(client.get_job_run_details(["no-such-run"]).job_run_details) == {}
    active = client.job_stub.GetActiveQueues(job_pb2.GetActiveQueuesRequest())
    assert QUEUE in active.active_queues_by_pool["default"].queues


def test_a_pod_spec_reaches_the_job_whole(client: ArmadaClient, worker: Worker) -> None:
    """Volumes, security contexts and env.valueFrom travel with the job; nodeName is refused with the reason."""
    spec = pod(
        volumes=[core.Volume(name="scratch", volumeSource=core.VolumeSource(emptyDir=core.EmptyDirVolumeSource()))],
        securityContext=core.PodSecurityContext(runAsNonRoot=True),
    )
    spec.containers[0].env.append(
        core.EnvVar(name="NODE", valueFrom=core.EnvVarSource(fieldRef=core.ObjectFieldSelector(fieldPath="spec.nodeName")))
    )
    spec.containers[0].volumeMounts.append(core.VolumeMount(name="scratch", mountPath="/scratch"))
    pinned = pod(nodeName="node-7")
    answer = client.submit_jobs(QUEUE, "whole", [client.create_job_request_item(priority=1, pod_spec=p) for p in (spec, pinned)])
    whole, refused = answer.job_response_items
    assert whole.job_id and not whole.error
    assert not refused.job_id and "pod spec field nodeName is refused" in refused.error

    def stored() -> dict[str, Any] | None:
        return worker.job_specs().get(whole.job_id)

    manifest = json.loads(poll(stored, 30, "the job's spec on job-specs")["pod_spec"]["manifest"])
    assert manifest["volumes"] == [{"name": "scratch", "emptyDir": {}}] and manifest["securityContext"] == {"runAsNonRoot": True}
    assert manifest["containers"][0]["env"][-1] == {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}
    assert manifest["containers"][0]["volumeMounts"] == [{"name": "scratch", "mountPath": "/scratch"}]


def test_a_client_id_submits_once(client: ArmadaClient) -> None:
    item = client.create_job_request_item(priority=1, pod_spec=pod(), client_id="grpc-once")
    first = client.submit_jobs(QUEUE, "dedup", [item]).job_response_items[0].job_id
    again = client.submit_jobs(QUEUE, "dedup", [item]).job_response_items[0].job_id
    assert first and again == first


def test_bad_specs_get_errors_per_item(client: ArmadaClient) -> None:
    items = [
        client.create_job_request_item(priority=1, pod_spec=pod()),
        client.create_job_request_item(priority=1, pod_spec=pod(cpu="lots")),
        client.create_job_request_item(priority=1),  # no pod spec
        submit_pb2.JobSubmitRequestItem(priority=1, pod_specs=[pod(), pod()]),
        client.create_job_request_item(priority=1, pod_spec=pod(priorityClassName="no-such-class")),
    ]
    answers = client.submit_jobs(QUEUE, "bad", items).job_response_items
    assert len(answers) == 5
    assert answers[0].job_id and not answers[0].error
    for index, text in ((1, "lots"), (2, "pod_spec is missing"), (3, "exactly one pod"), (4, "no-such-class")):
        assert not answers[index].job_id and text in answers[index].error, (index, answers[index])
    # a request the client cannot fix item by item is refused whole, with its reason
    code, message = code_of(lambda: client.submit_jobs(QUEUE, "bad", []))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "empty" in message
    answers = client.submit_jobs("no-such-queue", "bad", [items[0]]).job_response_items
    assert "does not exist" in answers[0].error


def test_cancel_jobs_and_job_sets(client: ArmadaClient) -> None:
    single = submit(client, "cancel-one", 2)
    result = client.cancel_jobs(QUEUE, "cancel-one", single[0])
    assert list(result.cancelled_ids) == [single[0]]
    until_states(client, [single[0]], "CANCELLED")
    assert states(client, [single[1]]) == {single[1]: "QUEUED"}
    # a job named under another job set is not this request's to cancel
    assert list(client.cancel_jobs(QUEUE, "elsewhere", single[1]).cancelled_ids) == []

    # a filter that matches none of the job set's jobs cancels nothing; one that matches cancels them
    filtered = submit(client, "cancel-filtered", 3)
    client.cancel_jobset(QUEUE, "cancel-filtered", [JobState.RUNNING])
    client.cancel_jobset(QUEUE, "cancel-filtered", [JobState.QUEUED])
    until_states(client, filtered, "CANCELLED")
    code, message = code_of(lambda: client.cancel_jobset(QUEUE, "cancel-filtered", [JobState.SUCCEEDED]))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "SUCCEEDED" in message

    whole = submit(client, "cancel-set", 5)
    client.cancel_jobset(QUEUE, "cancel-set", [])
    until_states(client, whole, "CANCELLED")
    details = client.get_job_details([whole[0]]).job_details[whole[0]]
    assert details.state == submit_pb2.CANCELLED and details.cancel_ts.seconds > 0
    assert states(client, [single[1]]) == {single[1]: "QUEUED"}


def test_a_running_filter_leaves_queued_jobs_alone(client: ArmadaClient, worker: Worker) -> None:
    job_ids = submit(client, "filter-running", 2)
    client.cancel_jobset(QUEUE, "filter-running", [JobState.RUNNING, JobState.PENDING])
    # the filtered cancel writes one event per matching job: none here
    kinds = [
        event["payload"][0]
        for record in worker.read(worker.topic("events"))
        if (record.key or b"").decode() == f"{QUEUE}/filter-running"
        for event in decode("event_sequence", record.value)["events"]
    ]
    assert kinds == ["flotilla.JobSubmitted"] * 2
    assert states(client, job_ids) == {job_id: "QUEUED" for job_id in job_ids}


def test_reprioritise_and_preempt(client: ArmadaClient) -> None:
    job_ids = submit(client, "reprioritise", 3)
    answer = client.reprioritize_jobs(new_priority=7, job_ids=job_ids[:1] + ["no-such-job"], job_set_id="reprioritise", queue=QUEUE)
    assert answer.reprioritization_results[job_ids[0]] == ""
    assert "not found" in answer.reprioritization_results["no-such-job"]

    # the client's get_job_details expands runs, not the spec: ask the stub for the spec
    def priorities() -> dict[str, float]:
        found = client.job_stub.GetJobDetails(job_pb2.JobDetailsRequest(job_ids=job_ids, expand_job_spec=True)).job_details
        return {job_id: found[job_id].job_spec.priority for job_id in job_ids}

    poll(lambda: priorities()[job_ids[0]] == 7.0, 30, "priority 7 on the first job")
    client.reprioritize_jobs(new_priority=2, job_ids=None, job_set_id="reprioritise", queue=QUEUE)
    poll(lambda: set(priorities().values()) == {2.0}, 30, "priority 2 on the whole job set")
    code, message = code_of(lambda: client.reprioritize_jobs(new_priority=-1, job_ids=job_ids, job_set_id="reprioritise", queue=QUEUE))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and ">= 0" in message

    # armada_client annotates Empty, but PreemptJobs answers a PreemptionResult (its stub's deserializer)
    preempted = cast(submit_pb2.PreemptionResult, client.preempt_jobs(QUEUE, "reprioritise", job_ids[0]))
    assert dict(preempted.preemption_results) == {job_ids[0]: ""}
    request = submit_pb2.JobPreemptRequest(queue=QUEUE, job_set_id="", job_ids=[job_ids[0]])  # the client checks this itself
    code, message = code_of(lambda: client.submit_stub.PreemptJobs(request))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "job_set_id" in message


# --------------------------------------------------------------------------- authentication

TOKENS = {
    "admin-token": {"user": "root", "groups": ["admins"]},
    "alice-token": {"user": "alice", "groups": []},
    "bob-token": {"user": "bob", "groups": ["other"]},
}


@pytest.fixture(scope="module")
def secured(broker: EmbeddedBroker, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Worker]:
    import yaml

    home = tmp_path_factory.mktemp("grpc-auth")
    token_file = home / "tokens.yaml"
    token_file.write_text(yaml.safe_dump(TOKENS))
    started = new_worker(broker, home / "worker", "grpc-auth")
    started.extra_env["FLOTILLA_AUTH_TOKEN_FILE"] = str(token_file)
    try:
        yield started.start()
    finally:
        started.stop()


def as_user(worker: Worker, token: str) -> tuple[grpc.Channel, ArmadaClient]:
    channel = grpc.intercept_channel(grpc.insecure_channel(worker.grpc_target), Bearer(token))
    return channel, ArmadaClient(channel)


def test_only_valid_tokens_and_queue_owners_get_through(secured: Worker) -> None:
    admin_channel, admin = as_user(secured, "admin-token")
    alice_channel, alice = as_user(secured, "alice-token")
    bob_channel, bob = as_user(secured, "bob-token")
    bad_channel, stranger = as_user(secured, "not-a-token")
    anonymous_channel = grpc.insecure_channel(secured.grpc_target)
    try:
        admin.create_queue(admin.create_queue_request("owned", 1.0, user_owners=["alice"]))
        admin.create_queue(admin.create_queue_request("admins-own", 1.0))
        assert list(admin.get_queue("admins-own").user_owners) == ["root"]  # the creator, as in Armada

        for caller in (stranger, ArmadaClient(anonymous_channel)):
            code, message = code_of(caller.get_queues)
            assert code == grpc.StatusCode.UNAUTHENTICATED and message
            code, message = code_of(lambda c=caller: c.submit_jobs("owned", "s", [c.create_job_request_item(pod_spec=pod())]))
            assert code == grpc.StatusCode.UNAUTHENTICATED and message

        code, message = code_of(lambda: bob.submit_jobs("owned", "bobs", [bob.create_job_request_item(pod_spec=pod())]))
        assert code == grpc.StatusCode.PERMISSION_DENIED and "bob" in message
        code, message = code_of(lambda: bob.cancel_jobset("owned", "alices", []))
        assert code == grpc.StatusCode.PERMISSION_DENIED and "cancel" in message
        code, message = code_of(lambda: bob.create_queue(bob.create_queue_request("bobs", 1.0)))
        assert code == grpc.StatusCode.PERMISSION_DENIED and "admin" in message
        assert code_of(lambda: alice.delete_queue("owned"))[0] == grpc.StatusCode.PERMISSION_DENIED

        answer = alice.submit_jobs("owned", "alices", [alice.create_job_request_item(pod_spec=pod())])
        job_id = answer.job_response_items[0].job_id
        assert job_id, answer
        assert code_of(lambda: bob.get_job_status([job_id]))[0] == grpc.StatusCode.PERMISSION_DENIED
        assert code_of(lambda: bob.cancel_jobs("owned", "alices", job_id))[0] == grpc.StatusCode.PERMISSION_DENIED
        assert states(alice, [job_id]) == {job_id: "QUEUED"}

        # the REST API refuses the same callers the same way
        status, body = call(secured.client, "GET", "/api/v1/queues")
        assert status == 401 and body["error"]
        assert call(secured.client, "GET", "/health")[0] == 200

        submissions = [decode("submit_request", r.value) for r in secured.read(secured.topic("submissions"))]
        assert [(s["queue"], s["user"]) for s in submissions] == [("owned", "alice")]
        sequences = [decode("event_sequence", r.value) for r in secured.read(secured.topic("events"))]
        assert {s["user"] for s in sequences} == {"alice"}
        assert all(s["job_set_id"] == "alices" for s in sequences)
    finally:
        for channel in (admin_channel, alice_channel, bob_channel, bad_channel, anonymous_channel):
            channel.close()
