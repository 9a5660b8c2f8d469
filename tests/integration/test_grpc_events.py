"""Armada's Event service against a running Flotilla: the official client reads job sets over a real channel.

One worker (real broker) with a fake executor; jobs are submitted and cancelled through REST, and
every event is read through `armada_client.client.ArmadaClient` and the generated stub.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import grpc
import pytest
from armada_client.armada import event_pb2, health_pb2, job_pb2, submit_pb2
from armada_client.client import ArmadaClient
from armada_client.k8s.io.api.core.v1 import generated_pb2 as core
from armada_client.k8s.io.apimachinery.pkg.api.resource.generated_pb2 import Quantity

from executor.backends.fake import RUNTIME_ANNOTATION
from ops.broker import EmbeddedBroker
from tests.integration.helpers import broker_connections
from tests.integration.pipeline import Executors, cancel_job_set, fake_item, new_queue, submit_jobs, wait_states
from tests.integration.workers import Worker, poll, running_worker
from tests.kit.armada import inner, kind

pytestmark = pytest.mark.integration

LIFECYCLE = ["submitted", "queued", "leased", "pending", "running", "succeeded"]


@pytest.fixture(scope="module")
def worker(broker: EmbeddedBroker, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Worker]:
    with running_worker(broker, tmp_path_factory, "grpc-events", FLOTILLA_SCHEDULE_PERIOD_S="0.5") as started:
        yield started


@pytest.fixture(scope="module")
def executors(worker: Worker, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Executors]:
    started = Executors(worker, tmp_path_factory.mktemp("grpc-events-executors"))
    started.fake("fake-grpc-events", nodes=2)
    try:
        yield started
    finally:
        started.stop_all()


@pytest.fixture(scope="module")
def channel(worker: Worker) -> Iterator[grpc.Channel]:
    with grpc.insecure_channel(worker.grpc_target) as opened:
        yield opened


@pytest.fixture(scope="module")
def client(channel: grpc.Channel) -> ArmadaClient:
    return ArmadaClient(channel, event_timeout=timedelta(seconds=30))


def job_of(message: event_pb2.EventStreamMessage) -> str:
    return inner(message).job_id


@dataclass
class Reader:
    """Reads a stream on a thread, as an application would, so the test can watch what has arrived."""

    stream: Iterator[event_pb2.EventStreamMessage]
    messages: list[event_pb2.EventStreamMessage] = field(default_factory=list)
    ended: str | None = None  # "end" when the server ended the stream, else the status code that ended it

    def __post_init__(self) -> None:
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        try:
            for message in self.stream:
                self.messages.append(message)
            self.ended = "end"
        except grpc.RpcError as exc:
            self.ended = exc.code().name

    def wait_for(self, count: int, timeout: float, what: str) -> list[event_pb2.EventStreamMessage]:
        return poll(lambda: list(self.messages) if len(self.messages) >= count else None, timeout, what, 0.1)


def read_all(client: ArmadaClient, queue: str, job_set: str, count: int, from_id: str | None = None) -> list[event_pb2.EventStreamMessage]:
    """The first ``count`` messages through the client's resilient stream, which is then closed."""
    stream = client.get_job_events_stream(queue, job_set, from_message_id=from_id)
    try:
        return Reader(stream).wait_for(count, 60, f"{count} events of {queue}/{job_set}")[:count]
    finally:
        client.unwatch_events(stream)


def test_a_job_set_run_to_success_is_read_in_order_resumed_and_replayed_without_watch(
    worker: Worker, executors: Executors, client: ArmadaClient
) -> None:
    queue = new_queue(worker, f"grpc-events-{uuid.uuid4().hex[:8]}")
    job_ids = submit_jobs(worker, queue, "done", [fake_item(executors.selector, runtime_s=0.5) for _ in range(3)])
    wait_states(worker, job_ids, {"succeeded"}, 90, "3 jobs succeeded")

    messages = read_all(client, queue, "done", 6 * len(job_ids))
    events = [ArmadaClient.unmarshal_event_response(message) for message in messages]
    for job_id in job_ids:
        assert [event.type.value for event in events if event.message.job_id == job_id] == LIFECYCLE
    assert {(event.message.queue, event.message.job_set_id) for event in events} == {(queue, "done")}
    ids = [message.id for message in messages]
    assert len(set(ids)) == len(ids)
    running = next(event.message for event in events if event.type.value == "running")
    assert isinstance(running, event_pb2.JobRunningEvent)
    assert (running.cluster_id, running.node_name) != ("", "")

    resumed = read_all(client, queue, "done", len(ids) - 3, from_id=ids[2])
    assert [message.id for message in resumed] == ids[3:]

    request = event_pb2.JobSetRequest(queue=queue, id="done", watch=False, errorIfMissing=True)
    assert [message.id for message in client.event_stub.GetJobSetEvents(request, timeout=60)] == ids, "without watch the stream ends"


def test_live_events_arrive_and_a_cancelled_job_set_shows_cancelled_events(worker: Worker, client: ArmadaClient) -> None:
    queue = new_queue(worker, f"grpc-live-{uuid.uuid4().hex[:8]}")
    # No node has this label: the jobs stay queued until cancelled.
    job_ids = submit_jobs(worker, queue, "stuck", [fake_item({"flotilla.io/nowhere": "true"}) for _ in range(3)])
    stream = client.get_job_events_stream(queue, "stuck")
    reader = Reader(stream)
    try:
        reader.wait_for(6, 60, "submitted and queued of each job")
        cancel_job_set(worker, queue, "stuck")
        cancelled = [m for m in reader.wait_for(9, 60, "3 live cancelled events")[6:]]
        assert [kind(m) for m in cancelled] == ["cancelled"] * 3, "a job-set cancel shows as the per-job cancellations"
        assert sorted(job_of(m) for m in cancelled) == sorted(job_ids)
        assert all("test over" in m.message.cancelled.reason for m in cancelled)
        assert reader.ended is None, "the stream stays open for more"
    finally:
        client.unwatch_events(stream)


def test_watch_is_the_same_stream(worker: Worker, client: ArmadaClient) -> None:
    queue = new_queue(worker, f"grpc-watch-{uuid.uuid4().hex[:8]}")
    submit_jobs(worker, queue, "w", [fake_item({"flotilla.io/nowhere": "true"})])
    watched = client.event_stub.Watch(event_pb2.WatchRequest(queue=queue, job_set_id="w"))
    try:
        messages = Reader(watched).wait_for(2, 60, "submitted and queued")
    finally:
        watched.cancel()
    assert [kind(m) for m in messages] == ["submitted", "queued"]
    assert [m.id for m in messages] == [m.id for m in read_all(client, queue, "w", 2)]


def test_refusals_have_a_code_and_a_reason(worker: Worker, client: ArmadaClient) -> None:
    queue = new_queue(worker, f"grpc-refused-{uuid.uuid4().hex[:8]}")
    submit_jobs(worker, queue, "s", [fake_item({"flotilla.io/nowhere": "true"})])

    def refusal(**fields: Any) -> grpc.RpcError:
        request = event_pb2.JobSetRequest(**{"queue": queue, "id": "s", "watch": False, **fields})
        with pytest.raises(grpc.RpcError) as raised:
            list(client.event_stub.GetJobSetEvents(request, timeout=60))
        return raised.value

    for refused, code, words in [
        (refusal(queue="no-such-queue"), grpc.StatusCode.NOT_FOUND, "no-such-queue"),
        (refusal(id="never-submitted", errorIfMissing=True), grpc.StatusCode.NOT_FOUND, "does not exist"),
        (refusal(from_message_id="01HZ3N00000000000000000004"), grpc.StatusCode.NOT_FOUND, "01HZ3N00000000000000000004"),
        (refusal(from_message_id="yesterday"), grpc.StatusCode.INVALID_ARGUMENT, "not a message id"),
    ]:
        details = refused.details()
        assert refused.code() == code, details
        assert details is not None and words in details
    assert client.event_health().status == health_pb2.HealthCheckResponse.SERVING


def test_a_stream_the_client_cancels_closes_its_consumer(worker: Worker, client: ArmadaClient) -> None:
    queue = new_queue(worker, f"grpc-cancel-{uuid.uuid4().hex[:8]}")
    submit_jobs(worker, queue, "c", [fake_item({"flotilla.io/nowhere": "true"})])
    assert worker.process is not None
    pid, port = worker.process.pid, int(worker.bootstrap.rsplit(":", 1)[1])
    idle = broker_connections(pid, port)
    stream = client.get_job_events_stream(queue, "c")
    Reader(stream).wait_for(2, 60, "submitted and queued")
    assert broker_connections(pid, port) > idle, "the stream reads the log with a consumer of its own"
    client.unwatch_events(stream)
    poll(lambda: broker_connections(pid, port) <= idle, 5, "the stream's consumer to close its broker connections")


def test_armada_client_journey(worker: Worker, executors: Executors, client: ArmadaClient) -> None:
    """The issue's journey, every call through ArmadaClient: queue, 20 jobs read to success, a job set of
    queued jobs cancelled, reprioritise, status and details, queue deleted."""

    def items(count: int, selector: dict[str, str]) -> list[submit_pb2.JobSubmitRequestItem]:
        amounts = {"cpu": Quantity(string="1"), "memory": Quantity(string="1Gi")}
        spec = core.PodSpec(
            restartPolicy="Never",
            nodeSelector=selector,
            containers=[
                core.Container(name="main", image="busybox:1.36", resources=core.ResourceRequirements(requests=amounts, limits=amounts))
            ],
        )
        return [
            client.create_job_request_item(priority=1, pod_spec=spec, namespace="default", annotations={RUNTIME_ANNOTATION: "0.5"})
            for _ in range(count)
        ]

    def job_states(job_ids: list[str]) -> set[str]:
        answer = client.get_job_status(job_ids).job_states
        assert set(answer) == set(job_ids)
        return {submit_pb2.JobState.Name(state) for state in answer.values()}

    def job_ids_of(answer: submit_pb2.JobSubmitResponse) -> list[str]:
        assert all(item.job_id and not item.error for item in answer.job_response_items), answer
        return [item.job_id for item in answer.job_response_items]

    queue = f"journey-{uuid.uuid4().hex[:8]}"
    client.create_queue(client.create_queue_request(queue, priority_factor=1.0))
    assert client.get_queue(queue).name == queue

    done = job_ids_of(client.submit_jobs(queue, "twenty", items(20, executors.selector)))
    assert len(set(done)) == 20
    stream = client.get_job_events_stream(queue, "twenty")
    reader = Reader(stream)
    try:
        poll(lambda: sum(kind(m) == "succeeded" for m in reader.messages) == 20 or None, 120, "20 succeeded events on the stream")
    finally:
        client.unwatch_events(stream)
    for job_id in done:
        assert [kind(m) for m in reader.messages if job_of(m) == job_id] == LIFECYCLE
    # The stream reads the log; job status reads the fold, which may be a moment behind it.
    poll(lambda: job_states(done) == {"SUCCEEDED"} or None, 30, "20 jobs SUCCEEDED in get_job_status")
    details = client.get_job_details(done[:1]).job_details[done[0]]
    assert (details.queue, details.jobset, details.state) == (queue, "twenty", submit_pb2.SUCCEEDED)
    assert details.job_runs and details.job_runs[0].node

    # No node has this label: the jobs stay queued until cancelled.
    stuck = job_ids_of(client.submit_jobs(queue, "stuck", items(5, {"flotilla.io/nowhere": "true"})))
    answer = client.reprioritize_jobs(new_priority=7, job_ids=[stuck[0]], job_set_id="stuck", queue=queue)
    assert dict(answer.reprioritization_results) == {stuck[0]: ""}
    # ArmadaClient.get_job_details leaves the spec out; the stub asks for it.
    with_spec = job_pb2.JobDetailsRequest(job_ids=stuck[:1], expand_job_spec=True)
    poll(
        lambda: client.job_stub.GetJobDetails(with_spec).job_details[stuck[0]].job_spec.priority == 7 or None,
        30,
        "the new priority in the job's spec",
    )
    stream = client.get_job_events_stream(queue, "stuck")
    reader = Reader(stream)
    try:
        client.cancel_jobset(queue=queue, job_set_id="stuck", filter_states=[])
        poll(lambda: sum(kind(m) == "cancelled" for m in reader.messages) == 5 or None, 60, "5 cancelled events on the stream")
    finally:
        client.unwatch_events(stream)
    assert sorted(job_of(m) for m in reader.messages if kind(m) == "cancelled") == sorted(stuck)
    assert [kind(m) for m in reader.messages if job_of(m) == stuck[0]][:4] == ["submitted", "queued", "reprioritizing", "reprioritized"]
    poll(lambda: job_states(stuck) == {"CANCELLED"} or None, 30, "5 jobs CANCELLED in get_job_status")

    client.delete_queue(queue)
    with pytest.raises(grpc.RpcError) as missing:
        client.get_queue(queue)
    assert missing.value.code() == grpc.StatusCode.NOT_FOUND


def test_a_live_stream_ends_when_the_worker_stops(worker: Worker, client: ArmadaClient) -> None:
    """Last in the module: it stops the module's worker."""
    queue = new_queue(worker, f"grpc-stop-{uuid.uuid4().hex[:8]}")
    submit_jobs(worker, queue, "s", [fake_item({"flotilla.io/nowhere": "true"})])
    stream = client.event_stub.GetJobSetEvents(event_pb2.JobSetRequest(queue=queue, id="s", watch=True))
    reader = Reader(stream)
    reader.wait_for(2, 60, "submitted and queued")
    started = time.monotonic()
    worker.stop()
    poll(lambda: reader.ended, 30, "the stream to end")
    assert reader.ended == "end", f"ended with {reader.ended} instead of the end of the stream"
    assert time.monotonic() - started < 30
