"""Ingest benchmark: submit N jobs through `flotilla.submissions`, time until all are queued.

Starts an embedded Tansu broker on a free port and a real control-plane worker as a subprocess
(`python -m streams.cli worker`), creates queue `bench` through the REST API, then:

1. raw phase (before the worker starts, same broker, same client settings; median of 3): plain aiokafka
   produce+consume of messages of (a) the size of one job_state record, N messages, and (b) the
   size of one submit request, as many messages as there are submit requests, each through its
   own fresh one-partition topic;
2. Flotilla phase: pre-encodes N jobs as submit_request records of `--batch` items, starts the
   clock, produces them all to `flotilla.submissions` (key = queue) while one consumer (no group,
   from the earliest offset) reads `flotilla.job-states` until N distinct job ids are seen.

Counting: distinct *keys* of `flotilla.job-states` (the job id); nothing else writes job-states
during the run, so each key is a job that reached `queued`. Every 1,000th value is decoded
(`schemas.codec.decode("job_state", ...)`) and must say `queued`, and `flotilla.rejected` is
watched too: any rejection aborts the run.

jobs_per_s = N / (first produce -> last job seen queued). The ratio is jobs_per_s divided by the
raw rate of messages of the size of ONE JOB (one job_state record): a job going through Flotilla
is compared with one message of that size going through the same broker with raw aiokafka, both
measured as produce+consume from the same client process. (The per-request raw rate is printed too,
for reference: it shows what the broker does with messages as large as a submit request.)

Peak RSS is the worker's VmHWM from /proc/<pid>/status (the kernel's high-water mark, which
includes start-up), cross-checked with VmRSS sampled every 100 ms.

Usage: .venv/bin/python bench/ingest.py [--jobs 100000] [--batch 100] [--partitions 1]
Progress goes to stderr; the last stdout line is one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition  # noqa: E402
from aiokafka.admin import AIOKafkaAdminClient, NewTopic  # noqa: E402

from ops.broker import EmbeddedBroker, free_port  # noqa: E402
from ops.worker import WorkerProcess  # noqa: E402
from schemas.codec import decode, encode  # noqa: E402
from streams.domain import jobspec  # noqa: E402
from streams.domain.jobs import apply_event  # noqa: E402
from streams.domain.validation import SubmitPolicy, validate_item  # noqa: E402

QUEUE = "bench"
SUBMISSIONS = "flotilla.submissions"
JOB_STATES = "flotilla.job-states"
REJECTED = "flotilla.rejected"
PROGRESS_EVERY_S = 3.0
STALL_TIMEOUT_S = 120.0
RAW_REPEATS = 3  # the raw figures are medians: a single short run varies by +-20%

# Same client settings for the raw and the Flotilla phase.
PRODUCER_OPTIONS: dict[str, Any] = {
    "linger_ms": 5,
    "max_batch_size": 1 << 20,
    "max_request_size": 16 << 20,
    "acks": 1,
}
CONSUMER_OPTIONS: dict[str, Any] = {
    "group_id": None,
    "enable_auto_commit": False,
    "auto_offset_reset": "earliest",
    "fetch_max_bytes": 64 << 20,
    "max_partition_fetch_bytes": 16 << 20,
}


def log(message: str) -> None:
    print(f"[ingest] {message}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------- records


def raw_item(i: int) -> dict[str, Any]:
    """One realistic job: one container, cpu/memory requests == limits, a client id."""
    resources = {"cpu": "1", "memory": "1Gi"}
    return {
        "client_id": f"bench-{i:08d}",
        "priority": 0.0,
        "namespace": "default",
        "labels": {"app": "bench"},
        "pod_spec": {
            "restart_policy": "Never",
            "containers": [
                {
                    "name": "main",
                    "image": "busybox:latest",
                    "command": ["sh", "-c"],
                    "args": [f"echo job {i}"],
                    "resources": {"requests": dict(resources), "limits": dict(resources)},
                }
            ],
        },
    }


def submit_request(first: int, count: int, index: int) -> dict[str, Any]:
    return {
        "request_id": f"bench-request-{index:08d}",
        "queue": QUEUE,
        "job_set_id": "bench-set",
        "user": "anonymous",
        "groups": [],
        "items": [jobspec.job_item(raw_item(i)) for i in range(first, first + count)],
    }


def encode_requests(jobs: int, batch: int) -> list[bytes]:
    return [
        encode("submit_request", submit_request(first, min(batch, jobs - first), index))
        for index, first in enumerate(range(0, jobs, batch))
    ]


def job_state_size() -> int:
    """Size of one job's job_state message, built by the same code the worker runs."""
    job, reason = validate_item(jobspec.job_item(raw_item(0)), SubmitPolicy())
    assert job is not None, reason
    now = int(time.time() * 1000)
    ulid = "01JZZZZZZZZZZZZZZZZZZZZZZZ"
    event = {"event_id": ulid, "created": now, "job_id": ulid, "payload": ("flotilla.JobSubmitted", job)}
    envelope = {"queue": QUEUE, "job_set_id": "bench-set", "user": "anonymous", "groups": []}
    state = apply_event(None, "flotilla.JobSubmitted", event, envelope)
    assert state is not None
    return len(encode("job_state", state))


# ---------------------------------------------------------------- processes


def read_status(pid: int) -> dict[str, int]:
    """VmRSS / VmHWM of a process in KiB (empty once it is gone)."""
    found: dict[str, int] = {}
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith(("VmRSS:", "VmHWM:")):
                    key, value = line.split(":", 1)
                    found[key] = int(value.split()[0])
    except OSError:
        pass
    return found


def cpu_seconds(pid: int | None) -> float:
    """User + system CPU time of a process so far (0 once it is gone)."""
    if pid is None:
        return 0.0
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def http(method: str, url: str, body: Any = None, timeout: float = 10.0) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, json.loads(response.read() or b"null")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(errors="replace")


def start_worker(broker_url: str, partitions: int, state_dir: Path) -> WorkerProcess:
    """A real control-plane worker, in its own session: Ctrl-C reaches only the benchmark, which stops it."""
    env = {
        **os.environ,
        "FLOTILLA_BROKER": broker_url,
        "FLOTILLA_DATA_DIR": str(state_dir / "data"),
        "FLOTILLA_PARTITIONS": str(partitions),
    }
    port = free_port()
    env["FLOTILLA_WEB_PORT"] = str(port)
    return WorkerProcess(env=env, log_path=state_dir / "worker.log", web_port=port, new_session=True)


# ---------------------------------------------------------------- measurements


async def create_topic(bootstrap: str, name: str) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        response = await admin.create_topics([NewTopic(name, 1, 1)])
        for topic, code, message in response.topic_errors:
            if code != 0:
                raise RuntimeError(f"cannot create topic {topic}: error {code} {message or ''}")
    finally:
        await admin.close()


async def started_consumer(bootstrap: str, topics: dict[str, int]) -> AIOKafkaConsumer:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, **CONSUMER_OPTIONS)
    await consumer.start()
    consumer.assign([TopicPartition(t, p) for t, count in topics.items() for p in range(count)])
    await consumer.seek_to_beginning()
    return consumer


async def produce_all(producer: AIOKafkaProducer, topic: str, key: bytes, values: list[bytes]) -> None:
    futures = [await producer.send(topic, value, key=key) for value in values]
    await asyncio.gather(*futures)


async def raw_rate(bootstrap: str, topic: str, size: int, count: int) -> float:
    """Messages/s produced and consumed (first produce -> last consumed) through a fresh topic."""
    await create_topic(bootstrap, topic)
    value = os.urandom(size)
    values = [value] * count
    consumer = await started_consumer(bootstrap, {topic: 1})
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, **PRODUCER_OPTIONS)
    await producer.start()
    try:
        start = time.perf_counter()
        sending = asyncio.create_task(produce_all(producer, topic, b"raw", values))
        seen, last = 0, start
        next_report = start + PROGRESS_EVERY_S
        while seen < count:
            batches = await consumer.getmany(timeout_ms=200, max_records=20_000)
            got = sum(len(records) for records in batches.values())
            now = time.perf_counter()
            if got:
                seen, last = seen + got, now
            elif now - last > STALL_TIMEOUT_S:
                raise RuntimeError(f"raw phase on {topic} stalled at {seen}/{count} messages")
            if now >= next_report:
                log(f"raw {size} B: {seen:,}/{count:,} consumed")
                next_report = now + PROGRESS_EVERY_S
            if sending.done() and sending.exception():
                raise sending.exception()  # type: ignore[misc]
        await sending
        return count / (last - start)
    finally:
        await producer.stop()
        await consumer.stop()


@dataclass
class IngestResult:
    seconds: float
    produce_seconds: float
    checked: int
    mean_state_bytes: float
    peak_rss_kib: int
    worker_cpu_s: float
    broker_cpu_s: float


async def flotilla_rate(
    bootstrap: str,
    worker_pid: int,
    broker_pid: int | None,
    requests: list[bytes],
    jobs: int,
    partitions: int,
    profiler: list[str] | None,
) -> IngestResult:
    consumer = await started_consumer(bootstrap, {JOB_STATES: partitions, REJECTED: partitions})
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, **PRODUCER_OPTIONS)
    await producer.start()
    sampled_rss = 0
    stop_sampling = asyncio.Event()

    async def sample_rss() -> None:
        nonlocal sampled_rss
        while not stop_sampling.is_set():
            sampled_rss = max(sampled_rss, read_status(worker_pid).get("VmRSS", 0))
            try:
                await asyncio.wait_for(stop_sampling.wait(), 0.1)
            except asyncio.TimeoutError:
                pass

    sampler = asyncio.create_task(sample_rss())
    spy = None
    if profiler:
        spy = subprocess.Popen(profiler, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
        await asyncio.sleep(1.0)  # let py-spy attach before the clock starts
    try:
        seen: set[bytes] = set()
        checked = 0
        state_bytes = 0
        cpu_before = cpu_seconds(worker_pid), cpu_seconds(broker_pid)
        start = time.perf_counter()
        sending = asyncio.create_task(produce_all(producer, SUBMISSIONS, QUEUE.encode(), requests))
        produce_done = None
        last = start
        next_report = start + PROGRESS_EVERY_S
        while len(seen) < jobs:
            batches = await consumer.getmany(timeout_ms=200, max_records=20_000)
            now = time.perf_counter()
            before = len(seen)
            for tp, records in batches.items():
                if tp.topic == REJECTED:
                    reason = decode("rejection", records[0].value).get("reason")
                    raise RuntimeError(f"{len(records)} rejection(s) on {REJECTED}, first: {reason}")
                for record in records:
                    if record.key not in seen:
                        seen.add(record.key)
                        state_bytes += len(record.value)
                        if len(seen) % 1000 == 1:
                            state = decode("job_state", record.value)["state"]
                            if state != "queued":
                                raise RuntimeError(f"job {record.key!r} is {state!r}, expected 'queued'")
                            checked += 1
            if len(seen) > before:
                last = now
            elif now - last > STALL_TIMEOUT_S:
                raise RuntimeError(f"no job queued for {STALL_TIMEOUT_S:.0f}s, {len(seen):,}/{jobs:,} queued")
            if produce_done is None and sending.done():
                await sending  # raises a produce error
                produce_done = now
            if now >= next_report:
                elapsed = now - start
                rss = read_status(worker_pid).get("VmRSS", 0) / 1024
                log(f"{len(seen):,}/{jobs:,} queued after {elapsed:.1f}s ({len(seen) / elapsed:,.0f} jobs/s), "
                    f"worker RSS {rss:,.0f} MiB")
                next_report = now + PROGRESS_EVERY_S
        await sending
        if produce_done is None:
            produce_done = time.perf_counter()
        status = read_status(worker_pid)
        peak = max(status.get("VmHWM", 0), sampled_rss)
        worker_cpu = cpu_seconds(worker_pid) - cpu_before[0]
        broker_cpu = cpu_seconds(broker_pid) - cpu_before[1]
        return IngestResult(
            last - start, produce_done - start, checked, state_bytes / len(seen), peak, worker_cpu, broker_cpu
        )
    finally:
        if spy is not None and spy.poll() is None:
            spy.send_signal(signal.SIGINT)  # py-spy writes its output on SIGINT
            try:
                spy.wait(30)
            except subprocess.TimeoutExpired:
                spy.kill()
                spy.wait()
        stop_sampling.set()
        await sampler
        await producer.stop()
        await consumer.stop()


# ---------------------------------------------------------------- main


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=100_000, help="jobs to submit (default 100000)")
    parser.add_argument("--batch", type=int, default=100, help="job items per submit request (default 100)")
    parser.add_argument("--partitions", type=int, default=1, help="FLOTILLA_PARTITIONS for the worker (default 1)")
    parser.add_argument("--py-spy", metavar="BIN", help="profile the worker during the Flotilla phase with this py-spy")
    parser.add_argument("--py-spy-native", action="store_true",
                        help="include native frames (GC, fastavro, syscalls); pauses the worker per sample")
    parser.add_argument("--profile-out", default="/tmp/ingest-profile.txt", help="py-spy output (--format raw)")
    args = parser.parse_args(argv)
    if args.jobs < 1 or args.batch < 1 or args.partitions < 1:
        parser.error("--jobs, --batch and --partitions must be positive")
    return args


def _interrupt(signum: int, frame: Any) -> None:
    # SIGTERM becomes SIGINT, which asyncio.run turns into a cancellation of the running phase
    # (its finally blocks close the clients) followed by KeyboardInterrupt; main() then stops
    # the worker and the broker.
    os.kill(os.getpid(), signal.SIGINT)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGINT, signal.default_int_handler)  # also when started in the background
    signal.signal(signal.SIGTERM, _interrupt)

    state_dir = Path(tempfile.mkdtemp(prefix="flotilla-bench-ingest-"))
    broker = EmbeddedBroker(log_path=state_dir / "broker.log")
    worker: WorkerProcess | None = None
    try:
        log(f"encoding {args.jobs:,} jobs in requests of {args.batch} ...")
        requests = encode_requests(args.jobs, args.batch)
        request_bytes = round(sum(map(len, requests)) / len(requests))
        state_bytes = job_state_size()

        broker.start()
        broker_pid = broker._process.pid if broker._process is not None else None  # for CPU accounting
        log(f"broker {broker.url} (state and logs in {state_dir})")

        # Raw phase first, before the worker exists: the broker and the machine are otherwise idle.
        log(f"raw aiokafka: {args.jobs:,} messages of {state_bytes} B, {RAW_REPEATS} times ...")
        raw_jobs = [
            asyncio.run(raw_rate(broker.bootstrap, f"bench.raw-job-{i}", state_bytes, args.jobs))
            for i in range(RAW_REPEATS)
        ]
        raw_count = max(len(requests), 1000)
        log(f"raw aiokafka: {raw_count:,} messages of {request_bytes:,} B, {RAW_REPEATS} times ...")
        raw_requests = [
            asyncio.run(raw_rate(broker.bootstrap, f"bench.raw-request-{i}", request_bytes, raw_count))
            for i in range(RAW_REPEATS)
        ]
        raw_job, raw_request = statistics.median(raw_jobs), statistics.median(raw_requests)

        worker = start_worker(broker.url, args.partitions, state_dir)
        log("starting the control-plane worker ...")
        worker.start()
        assert worker.process is not None
        pid = worker.process.pid
        status, body = http("POST", f"{worker.url}/api/v1/queues", {"name": QUEUE})
        if status // 100 != 2:
            raise RuntimeError(f"cannot create queue {QUEUE!r}: HTTP {status} {body}")
        log(f"worker pid {pid} healthy on {worker.url}; queue {QUEUE!r} created; submitting ...")

        profiler = None
        if args.py_spy:
            profiler = [args.py_spy, "record", "--format", "raw", "-o", args.profile_out, "--pid", str(pid),
                        "--rate", "100", *(["--native"] if args.py_spy_native else ["--nonblocking"])]
        result = asyncio.run(
            flotilla_rate(broker.bootstrap, pid, broker_pid, requests, args.jobs, args.partitions, profiler)
        )
    except KeyboardInterrupt:
        log("interrupted")
        return 130
    except Exception as exc:  # noqa: BLE001 - report and clean up
        log(f"error: {exc}")
        if worker is not None:
            log(f"worker log tail:\n{worker.log_tail()}")
        return 1
    finally:
        if worker is not None:
            worker.stop()
        broker.stop()
        shutil.rmtree(state_dir, ignore_errors=True)

    jobs_per_s = args.jobs / result.seconds
    ratio = jobs_per_s / raw_job
    peak_mib = result.peak_rss_kib / 1024
    print(f"conditions: {os.cpu_count()} cores (broker, worker and this client share them), "
          f"Python {platform.python_version()}, embedded Tansu, log in memory")
    print(f"  jobs {args.jobs:,}, batch {args.batch} items per submit request ({len(requests):,} requests), "
          f"partitions {args.partitions} (submissions keyed by queue: one queue -> one partition used)")
    print(f"  message sizes: submit request {request_bytes:,} B, job_state {state_bytes} B "
          f"(observed mean on job-states {result.mean_state_bytes:,.0f} B)")
    print("  counting: distinct keys of flotilla.job-states; every 1,000th value decoded and checked "
          f"'queued' ({result.checked} checked); flotilla.rejected watched (none)")
    print("  ratio = jobs/s / raw msgs/s of job_state-sized messages (one job through Flotilla vs one "
          "message of that size through raw aiokafka, produce+consume on the same broker)")
    if args.py_spy:
        print(f"  NOTE: worker profiled with py-spy during this run ({args.profile_out}); figures are perturbed")
    print(f"flotilla: {jobs_per_s:,.0f} jobs/s ({args.jobs:,} jobs queued in {result.seconds:.2f}s; "
          f"all produced after {result.produce_seconds:.2f}s)")
    print(f"  CPU during the Flotilla phase: worker {result.worker_cpu_s:.1f}s "
          f"({result.worker_cpu_s / result.seconds:.0%} of one core), broker {result.broker_cpu_s:.1f}s "
          f"({result.broker_cpu_s / result.seconds:.0%} of one core)")
    print(f"raw aiokafka (median of {RAW_REPEATS}): {raw_job:,.0f} msgs/s of {state_bytes} B "
          f"({args.jobs:,} msgs; runs {', '.join(f'{r:,.0f}' for r in raw_jobs)}); "
          f"{raw_request:,.0f} msgs/s of {request_bytes:,} B ({raw_count:,} msgs; runs "
          f"{', '.join(f'{r:,.0f}' for r in raw_requests)}; "
          f"= {raw_request * args.batch:,.0f} jobs/s if each carried {args.batch} jobs)")
    print(f"ratio: {ratio:.1%} of raw (target >= 30%); jobs/s target >= 25,000: "
          f"{'met' if jobs_per_s >= 25_000 else 'NOT met'}")
    print(f"worker peak RSS: {peak_mib:,.1f} MiB")
    print(json.dumps({
        "jobs": args.jobs,
        "jobs_per_s": round(jobs_per_s, 1),
        "raw_per_s": round(raw_job, 1),
        "ratio": round(ratio, 4),
        "peak_rss_mib": round(peak_mib, 1),
        "batch": args.batch,
        "partitions": args.partitions,
        "raw_request_per_s": round(raw_request, 1),
        "request_bytes": request_bytes,
        "job_state_bytes": state_bytes,
        "seconds": round(result.seconds, 3),
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
