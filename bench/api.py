"""API benchmark: submission throughput over gRPC (Armada's own client) and REST, and event-stream latency.

Everything is real: an embedded Tansu broker on a free port and one control-plane worker
(`python -m streams.client.cli worker`) serving REST and Armada's gRPC API; no executor, so jobs stay
queued and only the API's own path is measured.

1. gRPC submission: `--jobs` jobs in `SubmitJobs` calls of `--batch` items from `--clients`
   concurrent `armada_client.client.ArmadaClient`s, each on its own channel and thread. A call
   returns once the ingest agent has answered and the jobs are folded, so jobs/s is the rate at
   which submitted jobs become readable, not merely the rate at which bytes reach the log.
2. REST submission: the same through `POST /api/v1/jobs`, one `urllib` client per thread.
3. Event-stream latency: a gRPC `GetJobSetEvents` stream (`get_job_events_stream`) and a REST
   server-sent-event stream follow one job set while `--stream-jobs` jobs are submitted to it in
   requests of 10 every ~50 ms. A follower of `flotilla.events` records each JobSubmitted event's
   record timestamp (the producer's CreateTime: when the event went onto the log); latency is the
   time the client saw the job's `submitted` event minus that timestamp, on the same clock.

CPU seconds over each submission phase are given for the worker, the broker and this process (the
clients, which share the machine's cores with the worker), and CPU per job. `--py-spy BIN` records
the worker and this process (every thread) during each submission phase (`--profile-out PREFIX`:
PREFIX-grpc-worker.txt, PREFIX-grpc-clients.txt, ... in py-spy's raw format; figures are perturbed).

Usage: .venv/bin/python bench/api.py [--jobs 20000] [--batch 100] [--clients 4] [--stream-jobs 1000] [--py-spy BIN]
Progress goes to stderr; the last stdout line is one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import shutil
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import grpc  # noqa: E402
from armada_client.armada import submit_pb2  # noqa: E402
from armada_client.client import ArmadaClient  # noqa: E402
from armada_client.k8s.io.api.core.v1 import generated_pb2 as core_v1  # noqa: E402
from armada_client.k8s.io.apimachinery.pkg.api.resource import generated_pb2 as resource  # noqa: E402

from bench.ingest import EVENTS, UNLIMITED_SUBMISSIONS, cpu_seconds, create_queues, raw_item, read_status, started_consumer  # noqa: E402
from bench.processes import Children, exit_status, py_spy_recording  # noqa: E402
from ops.broker import EmbeddedBroker, free_port  # noqa: E402
from ops.worker import WorkerProcess  # noqa: E402
from schemas.codec import SchemaError, decode  # noqa: E402
from streams.client.rest import Client, parse_sse  # noqa: E402

QUEUE = "bench-api"
STREAM_BATCH = 10
STREAM_PAUSE_S = 0.05
STREAM_TIMEOUT_S = 120.0


def log(message: str) -> None:
    print(f"[api] {message}", file=sys.stderr, flush=True)


def percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))] if ordered else float("nan")


# ---------------------------------------------------------------- submission


def grpc_item(i: int) -> Any:
    """The same job as bench/ingest.py's raw_item, as Armada's protobuf job item."""
    quantities = {"cpu": resource.Quantity(string="1"), "memory": resource.Quantity(string="1Gi")}
    container = core_v1.Container(
        name="main",
        image="busybox:latest",
        command=["sh", "-c"],
        args=[f"echo job {i}"],
        resources=core_v1.ResourceRequirements(requests=quantities, limits=quantities),
    )
    return submit_pb2.JobSubmitRequestItem(
        priority=0,
        namespace="default",
        client_id=f"grpc-{i:08d}",
        labels={"app": "bench"},
        pod_spec=core_v1.PodSpec(containers=[container], restartPolicy="Never"),
    )


@dataclass
class SubmitResult:
    jobs: int
    seconds: float
    call_latencies_s: list[float]
    errors: int
    worker_cpu_s: float
    broker_cpu_s: float
    client_cpu_s: float  # this process: the clients' threads

    @property
    def jobs_per_s(self) -> float:
        return self.jobs / self.seconds if self.seconds else 0.0

    def summary(self) -> dict[str, Any]:
        return {
            "jobs": self.jobs,
            "jobs_per_s": round(self.jobs_per_s, 1),
            "call_p50_ms": round(1000 * percentile(self.call_latencies_s, 0.5), 1),
            "call_p99_ms": round(1000 * percentile(self.call_latencies_s, 0.99), 1),
            "errors": self.errors,
            "worker_cpu_s": round(self.worker_cpu_s, 1),
            "broker_cpu_s": round(self.broker_cpu_s, 1),
            "client_cpu_s": round(self.client_cpu_s, 1),
            "worker_cpu_ms_per_job": round(1000 * self.worker_cpu_s / self.jobs, 3) if self.jobs else None,
        }


def run_clients(
    worker_pid: int, broker_pid: int | None, batches: list[list[int]], clients: int, make_call: Callable[[], Callable[[list[int]], int]]
) -> SubmitResult:
    """Each client thread makes its own connection, then submits every `clients`-th batch."""
    latencies: list[float] = []
    errors = 0
    lock = threading.Lock()
    stopping = threading.Event()

    def client_loop(index: int) -> int:
        nonlocal errors
        call = make_call()
        accepted = 0
        for batch in batches[index::clients]:
            if stopping.is_set():
                break
            started = time.perf_counter()
            ok = call(batch)
            elapsed = time.perf_counter() - started
            with lock:
                latencies.append(elapsed)
                errors += len(batch) - ok
            accepted += ok
        return accepted

    cpu_before = cpu_seconds(worker_pid), cpu_seconds(broker_pid), time.process_time()
    started = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        try:
            accepted = sum(pool.map(client_loop, range(clients)))
        except BaseException:
            stopping.set()  # Ctrl-C or a failed call: the other clients end after their current call, not after all batches
            raise
    seconds = time.perf_counter() - started
    worker_cpu, broker_cpu, client_cpu = (
        cpu_seconds(worker_pid) - cpu_before[0],
        cpu_seconds(broker_pid) - cpu_before[1],
        time.process_time() - cpu_before[2],
    )
    return SubmitResult(accepted, seconds, latencies, errors, worker_cpu, broker_cpu, client_cpu)


def grpc_caller(address: str, job_set: str) -> Callable[[], Callable[[list[int]], int]]:
    def make() -> Callable[[list[int]], int]:
        client = ArmadaClient(grpc.insecure_channel(address))

        def call(batch: list[int]) -> int:
            response = client.submit_jobs(QUEUE, job_set, [grpc_item(i) for i in batch])
            return sum(1 for item in response.job_response_items if item.job_id and not item.error)

        return call

    return make


def rest_item(job_set: str, i: int) -> dict[str, Any]:
    """bench/ingest.py's job with a client id of its own per job set: ids repeated in a queue are de-duplicated."""
    return {**raw_item(i), "client_id": f"{job_set}-{i:08d}"}


def rest_caller(url: str, job_set: str) -> Callable[[], Callable[[list[int]], int]]:
    def make() -> Callable[[list[int]], int]:
        client = Client(url)

        def call(batch: list[int]) -> int:
            body = {"queue": QUEUE, "job_set_id": job_set, "items": [rest_item(job_set, i) for i in batch]}
            answer = client.call("POST", "/api/v1/jobs", body, accept=(207, 422))
            return sum(1 for job_id in answer["job_ids"] if job_id)

        return call

    return make


# ---------------------------------------------------------------- event-stream latency


class LogTimes:
    """Job id -> record timestamp (ms) of its JobSubmitted event on `flotilla.events`, for one job set."""

    def __init__(self, bootstrap: str, job_set: str) -> None:
        self.bootstrap, self.key = bootstrap, f"{QUEUE}/{job_set}".encode()
        self.times: dict[str, int] = {}

    async def read_until(self, count: int, timeout_s: float) -> None:
        consumer = await started_consumer(self.bootstrap, {EVENTS: 1})
        deadline = time.monotonic() + timeout_s
        try:
            while len(self.times) < count and time.monotonic() < deadline:
                for records in (await consumer.getmany(timeout_ms=200)).values():
                    for record in records:
                        if record.key == self.key:
                            self._fold(record.value, record.timestamp)
        finally:
            await consumer.stop()

    def _fold(self, value: bytes, timestamp_ms: int) -> None:
        try:
            sequence = decode("event_sequence", value)
        except SchemaError:
            return
        for event in sequence["events"]:
            kind, _ = event["payload"]
            if kind.endswith("JobSubmitted") and event["job_id"]:
                self.times[event["job_id"]] = timestamp_ms


class StreamWatcher(threading.Thread):
    """Follows one stream in the background: job id -> wall time (ms) its `submitted` event arrived."""

    def __init__(self, name: str, follow: Callable[[Callable[[str], object]], None]) -> None:
        super().__init__(name=name, daemon=True)
        self.seen: dict[str, int] = {}
        self.error: BaseException | None = None
        self._follow = follow

    def run(self) -> None:
        try:
            self._follow(lambda job_id: self.seen.setdefault(job_id, int(time.time() * 1000)))
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            self.error = exc


def follow_grpc(address: str, job_set: str, stop: threading.Event) -> Callable[[Callable[[str], object]], None]:
    def follow(saw: Callable[[str], object]) -> None:
        client = ArmadaClient(grpc.insecure_channel(address))
        stream = client.get_job_events_stream(QUEUE, job_set)
        threading.Thread(target=lambda: (stop.wait(), client.unwatch_events(stream)), daemon=True).start()
        for message in stream:
            if message.message.WhichOneof("events") == "submitted":
                saw(message.message.submitted.job_id)

    return follow


def follow_sse(url: str, job_set: str, stop: threading.Event) -> Callable[[Callable[[str], object]], None]:
    def follow(saw: Callable[[str], object]) -> None:
        request = urllib.request.Request(f"{url}/api/v1/queues/{QUEUE}/jobsets/{job_set}/events", headers={"Accept": "text/event-stream"})
        with urllib.request.urlopen(request, timeout=STREAM_TIMEOUT_S) as response:
            for event in parse_sse(line.decode() for line in response):
                if event.event == "JobSubmitted":
                    saw(json.loads(event.data)["job_id"])
                if stop.is_set():
                    return

    return follow


def wait_for(watchers: list[StreamWatcher], count: int) -> None:
    deadline = time.monotonic() + STREAM_TIMEOUT_S
    while any(len(w.seen) < count for w in watchers):
        for watcher in watchers:
            if watcher.error is not None:
                raise RuntimeError(f"the {watcher.name} stream failed: {watcher.error!r}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"the streams saw {[len(w.seen) for w in watchers]} of {count} jobs within {STREAM_TIMEOUT_S:.0f} s")
        time.sleep(0.1)


def stream_latency(worker: WorkerProcess, grpc_address: str, bootstrap: str, jobs: int) -> dict[str, dict[str, float]]:
    job_set = "latency"
    stop = threading.Event()
    submit = rest_caller(worker.url, job_set)()
    # Armada's client asks for errorIfMissing: the job set must exist (have an event) before it is watched.
    submit([jobs])
    watchers = [
        StreamWatcher("grpc", follow_grpc(grpc_address, job_set, stop)),
        StreamWatcher("sse", follow_sse(worker.url, job_set, stop)),
    ]
    for watcher in watchers:
        watcher.start()
    wait_for(watchers, 1)  # both streams are live (they replayed the warm-up job) before the clock starts
    warmup = {job for watcher in watchers for job in watcher.seen}
    for first in range(0, jobs, STREAM_BATCH):
        submit(list(range(first, min(jobs, first + STREAM_BATCH))))
        time.sleep(STREAM_PAUSE_S)
    log_times = LogTimes(bootstrap, job_set)
    asyncio.run(log_times.read_until(jobs + 1, STREAM_TIMEOUT_S))
    wait_for(watchers, jobs + 1)
    stop.set()
    results: dict[str, dict[str, float]] = {}
    for watcher in watchers:
        latencies = [watcher.seen[job] - at for job, at in log_times.times.items() if job in watcher.seen and job not in warmup]
        results[watcher.name] = {
            "events": len(latencies),
            "p50_ms": percentile(latencies, 0.5),
            "p99_ms": percentile(latencies, 0.99),
            "max_ms": max(latencies, default=float("nan")),
        }
    return results


# ---------------------------------------------------------------- main


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=20_000, help="jobs per submission phase (default 20,000)")
    parser.add_argument("--batch", type=int, default=100, help="jobs per submit call (default 100)")
    parser.add_argument("--clients", type=int, default=4, help="concurrent clients (default 4)")
    parser.add_argument("--stream-jobs", type=int, default=1_000, help="jobs whose events the streams follow (default 1,000)")
    parser.add_argument("--py-spy", metavar="BIN", help="record the worker and the clients with this py-spy during each submission phase")
    parser.add_argument("--profile-out", default="/tmp/api-profile", help="prefix of the profiles (default /tmp/api-profile)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    state = Path(tempfile.mkdtemp(prefix="flotilla-bench-api-"))
    web_port, grpc_port = free_port(), free_port()
    env = {
        **os.environ,
        "FLOTILLA_DATA_DIR": str(state / "data"),
        "FLOTILLA_WEB_PORT": str(web_port),
        "FLOTILLA_GRPC_PORT": str(grpc_port),
        **UNLIMITED_SUBMISSIONS,
    }
    # The broker and the worker are stopped when the block ends, however it ends (an error, Ctrl-C,
    # SIGTERM: see bench/processes.py); an error's traceback follows.
    try:
        with Children(log) as children:
            broker = children.add(EmbeddedBroker(port=free_port(), log_path=state / "broker.log", new_session=True))
            broker.start()
            env["FLOTILLA_BROKER"] = broker.url
            log("starting the control-plane worker ...")
            worker = children.add(WorkerProcess(env=env, log_path=state / "worker.log", web_port=web_port, new_session=True))
            worker.start()
            assert worker.process is not None
            pid = worker.process.pid
            create_queues(worker, [QUEUE])
            grpc_address = f"127.0.0.1:{grpc_port}"
            batches = [list(range(first, min(args.jobs, first + args.batch))) for first in range(0, args.jobs, args.batch)]

            broker_pid = broker.process.pid if broker.process is not None else None

            def phase(name: str, make_call: Callable[[], Callable[[list[int]], int]]) -> SubmitResult:
                log(f"{name}: {args.jobs} jobs in calls of {args.batch} from {args.clients} clients ...")
                with contextlib.ExitStack() as profiles:
                    if args.py_spy:
                        for who, spied, threads in (("worker", pid, False), ("clients", os.getpid(), True)):
                            out = f"{args.profile_out}-{name.lower()}-{who}.txt"
                            profiles.enter_context(py_spy_recording(children, args.py_spy, spied, out, threads=threads, log=log))
                    return run_clients(pid, broker_pid, batches, args.clients, make_call)

            via_grpc = phase("gRPC", grpc_caller(grpc_address, "grpc"))
            via_rest = phase("REST", rest_caller(worker.url, "rest"))
            log(f"event streams: {args.stream_jobs} jobs submitted in requests of {STREAM_BATCH} ...")
            latency = stream_latency(worker, grpc_address, broker.bootstrap, args.stream_jobs)
            rss = read_status(pid)
    except KeyboardInterrupt:
        log("interrupted")
        return exit_status()
    finally:
        shutil.rmtree(state, ignore_errors=True)

    print(f"conditions: 1 worker, 1 partition, embedded Tansu, {os.cpu_count()} cores, Python {platform.python_version()}, no executor")
    if args.py_spy:
        print(f"  NOTE: worker and clients profiled with py-spy during the submissions ({args.profile_out}-*); figures are perturbed")
    for name, result in (("gRPC (ArmadaClient.submit_jobs)", via_grpc), ("REST (POST /api/v1/jobs)", via_rest)):
        s = result.summary()
        print(
            f"{name}: {s['jobs']} jobs in {result.seconds:.1f} s = {s['jobs_per_s']} jobs/s; "
            f"call p50 {s['call_p50_ms']} ms, p99 {s['call_p99_ms']} ms; {s['errors']} refused; CPU s: worker {s['worker_cpu_s']} "
            f"({s['worker_cpu_ms_per_job']} ms/job), broker {s['broker_cpu_s']}, clients {s['client_cpu_s']}"
        )
    for name, figures in latency.items():
        print(
            f"{name} event stream, JobSubmitted on the log -> at the client ({int(figures['events'])} events): "
            f"p50 {figures['p50_ms']:.0f} ms, p99 {figures['p99_ms']:.0f} ms, max {figures['max_ms']:.0f} ms"
        )
    print(f"worker peak RSS {rss.get('VmHWM', 0) / 1024:.0f} MiB")
    print(
        json.dumps(
            {
                "grpc": via_grpc.summary(),
                "rest": via_rest.summary(),
                "stream_latency_ms": latency,
                "batch": args.batch,
                "clients": args.clients,
                "cores": os.cpu_count(),
                "peak_rss_mib": round(rss.get("VmHWM", 0) / 1024, 1),
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
