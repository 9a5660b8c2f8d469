"""Ingest benchmark: submit N jobs through `flotilla.submissions`, time until all are queued.

Starts an embedded Tansu broker on a free port and `--workers` real control-plane workers as
subprocesses (`python -m streams.client.cli worker`, same app id, so one consumer group shares the
partitions out; each has its own data dir and web port), creates `--queues` queues `bench-0` ..
`bench-{Q-1}` through one worker's REST API and waits until every worker sees them, then:

1. raw phase (before the worker starts, same broker, same client settings; median of 3): plain aiokafka
   produce+consume of messages of (a) the size of one job_state record, N messages, and (b) the
   size of one submit request, as many messages as there are submit requests, each through its
   own fresh one-partition topic;
2. Flotilla phase: pre-encodes N jobs as submit_request records of `--batch` items, starts the
   clock, produces them all to `flotilla.submissions` (key = queue) while one consumer (no group,
   from the earliest offset) reads `flotilla.job-states` until N distinct job ids are seen.
   Request i goes to the (i mod Q)-th queue (one job set per queue). Submissions are keyed by
   queue, so Q queues use at most Q partitions (which ones is murmur2(queue) mod P, printed), and
   a worker given no used partition has nothing to do: the benchmark warns when Q < P or N > P.
   The queue names `bench-<n>` are picked so that murmur2 spreads them evenly over the partitions
   both as submission keys and as event keys (`queue_names`).

Counting: distinct *keys* of `flotilla.job-states` (the job id); nothing else writes job-states
during the run, so each key is a job that reached `queued`. Every 1,000th value is decoded
(`schemas.codec.decode("job_state", ...)`) and must say `queued`, and `flotilla.rejected` is
watched too: any rejection aborts the run.

jobs_per_s = N / (first produce -> last job seen queued). The ratio is jobs_per_s divided by the
raw rate of messages of the size of ONE JOB (one job_state record): a job going through Flotilla
is compared with one message of that size going through the same broker with raw aiokafka, both
measured as produce+consume from the same client process. (The per-request raw rate is printed too,
for reference: it shows what the broker does with messages as large as a submit request.)

Peak RSS is each worker's VmHWM from /proc/<pid>/status (the kernel's high-water mark, which
includes start-up), cross-checked with VmRSS sampled every 100 ms; `peak_rss_mib` is the largest
over the workers. CPU seconds (user + system) are measured per worker and for the broker from the first
produce until the workers are settled: every timed job is also in the scheduler's index (its changelog,
`flotilla-scheduler-index-changelog`, holds the job's entry) and each worker has used at most 10% of a core
in every 0.2 s for 1 s (an idle worker uses 2-3%), the window ending where that quiet time began. A job seen
queued still has work left on the workers: the scheduler folds it from the feed, and the worker keeping the
standby copies applies its table writes (every 0.2 s), later, so CPU up to the last job seen queued (printed
too, JSON `cpu_ms_per_job_until_queued`) could compare different shares of the same jobs' work from 1 to 2
workers. Measured (issue 14, P=4, 30,000 jobs): the settled window adds 0-1.8% to two workers' CPU per job and
0-0.2% to one's (two workers' scheduler fold ended up to 0.9 s after their last job state). jobs/s stays first produce -> last
job seen queued. Before the clock starts one job goes to each timed queue through the REST API (`warm_up`,
not counted), so that no worker compiles its codecs or folds its first job inside the timed phase.

Archive (`--archive on|off`, default off): with `on` each worker keeps the log archive (streams/archive,
as `flotilla up` does) in its state directory, so the figures show what archiving costs the same
ingest. Before the throughput phase, on the idle worker, `--idle-submits` (200) single-job submissions
go one at a time through the REST API (20 ms apart) and the time each takes to be answered is the
idle submit->ack latency (p50, p99); with the archive on, an answer waits until the jobs' events
are archived and synced. Those jobs go to their own queue and are not counted as ingest.

Usage: .venv/bin/python bench/ingest.py [--jobs 100000] [--batch 100] [--partitions 1] [--workers 1]
       [--queues 1] [--archive on|off] [--idle-submits 200] [--py-spy BIN [--py-spy-native | --py-spy-gil]]
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
from aiokafka.partitioner import DefaultPartitioner  # noqa: E402

from bench.processes import Children, Command, exit_status  # noqa: E402
from ops.broker import EmbeddedBroker, free_port  # noqa: E402
from ops.worker import WorkerProcess  # noqa: E402
from schemas.codec import decode, encode  # noqa: E402
from streams.domain import jobspec  # noqa: E402
from streams.domain.jobs import apply_event  # noqa: E402
from streams.domain.partitioning import key_hash, partition_for  # noqa: E402
from streams.domain.validation import SubmitPolicy, validate_item  # noqa: E402
from streams.scheduler.index import JOB_KEY_PREFIX  # noqa: E402

# Benchmarks measure throughput, so the workers run without submission rate limits (on by default,
# see streams/domain/admission.py), which would reject a benchmark's flood by design.
UNLIMITED_SUBMISSIONS = {"FLOTILLA_SUBMISSION_QUEUE_RATE": "0", "FLOTILLA_SUBMISSION_USER_RATE": "0"}
QUEUE_PREFIX = "bench-"
JOB_SET = "bench-set"  # one job set per queue: the same name in every queue is a different job set
QUEUE_VISIBLE_TIMEOUT_S = 60.0
SUBMISSIONS = "flotilla.submissions"
JOB_STATES = "flotilla.job-states"
EVENTS = "flotilla.events"
REJECTED = "flotilla.rejected"
SCHEDULER_INDEX = "flotilla-scheduler-index-changelog"  # the scheduler-index table's changelog (streams/tables/scheduler_index.py)
INDEX_JOB_PREFIX = JOB_KEY_PREFIX.encode()  # its keys of jobs
PROGRESS_EVERY_S = 3.0
STALL_TIMEOUT_S = 120.0
# The workers are settled once each has used at most QUIET_SHARE of a core (an idle worker: 2-3%, aiokafka's
# fetch loop) in every SAMPLE_EVERY_S since a moment QUIET_S ago or more: the CPU window ends at that moment.
SAMPLE_EVERY_S = 0.2
QUIET_S = 1.0
QUIET_SHARE = 0.10
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


def queue_names(count: int, partitions: int = 1) -> list[str]:
    """``count`` queue names `bench-<n>`, chosen so that murmur2 spreads them as evenly as it can over
    the partitions twice: as submission keys (the queue) and as event keys (queue/job set). Names
    taken in order of n would not: `bench-0`..`bench-15` put 5 and 11 queues on two partitions."""
    quota = -(-count // partitions)
    submissions, events = [0] * partitions, [0] * partitions
    names: list[str] = []
    number = 0
    while len(names) < count:
        name = f"{QUEUE_PREFIX}{number}"
        number += 1
        by_queue = partition_for(key_hash(name.encode()), partitions)
        by_job_set = partition_for(key_hash(f"{name}/{JOB_SET}".encode()), partitions)
        if submissions[by_queue] < quota and events[by_job_set] < quota:
            submissions[by_queue] += 1
            events[by_job_set] += 1
            names.append(name)
    return names


def submit_request(first: int, count: int, index: int, queue: str) -> dict[str, Any]:
    return {
        "request_id": f"bench-request-{index:08d}",
        "queue": queue,
        "job_set_id": JOB_SET,
        "user": "anonymous",
        "groups": [],
        "items": [jobspec.job_item(raw_item(i)) for i in range(first, first + count)],
    }


def encode_requests(jobs: int, batch: int, queues: list[str]) -> list[tuple[bytes, bytes]]:
    """(key, value) submit records; round-robin over the queues, keyed by queue as the API does."""
    records = []
    for index, first in enumerate(range(0, jobs, batch)):
        queue = queues[index % len(queues)]
        request = submit_request(first, min(batch, jobs - first), index, queue)
        records.append((queue.encode(), encode("submit_request", request)))
    return records


def queues_by_partition(keys: list[str], partitions: int) -> list[list[str]]:
    """Which keys land on which partition: the producer's own murmur2 partitioner decides, so for
    submissions (key = queue) this is exactly the spread the workers will see."""
    spread: list[list[str]] = [[] for _ in range(partitions)]
    for key in keys:
        spread[DefaultPartitioner()(key.encode(), list(range(partitions)), None)].append(key)
    return spread


def event_keys(queues: list[str]) -> list[str]:
    """Keys of flotilla.events (queue/job set, see streams/agents/ingest.py): the job-state fold
    is spread by these, independently of the submissions spread."""
    return [f"{queue}/{JOB_SET}" for queue in queues]


def assigned_partitions(worker: WorkerProcess, topics: tuple[str, ...] = (SUBMISSIONS, EVENTS)) -> str:
    """The worker's last assignment of these topics, from Faust's 'Setting newly assigned partitions'
    table in its log (best effort: '?' if the log format differs). Read after the timed phase, so a
    rebalance during the run shows."""
    try:
        text = worker.log_path.read_text(errors="replace")
    except OSError:
        return "?"
    start = text.rfind("Setting newly assigned partitions")
    if start < 0:
        return "?"
    rows: dict[str, str] = {}
    for line in text[start:].splitlines()[1:]:
        if line.startswith("["):  # the next log record ends the table
            break
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) == 2 and cells[0] in topics:
            rows[cells[0]] = cells[1]
    return ", ".join(f"{topic.split('.', 1)[1]} {rows.get(topic, 'none')}" for topic in topics)


def spread_warnings(spread: list[list[str]], workers: int) -> list[str]:
    """Set-ups that leave partitions or workers without work, which the figures would hide."""
    partitions, used = len(spread), sum(1 for queues in spread if queues)
    queues = sum(map(len, spread))
    found = []
    if queues < partitions:
        found.append(
            f"queues ({queues}) < partitions ({partitions}): submissions are keyed by queue, so at most {queues} partition(s) get work"
        )
    elif used < partitions:
        found.append(f"murmur2 puts the {queues} queues on only {used} of {partitions} partitions")
    if workers > partitions:
        found.append(f"workers ({workers}) > partitions ({partitions}): {workers - partitions} worker(s) get no partition and stay idle")
    return found


def job_state_size() -> int:
    """Size of one job's job_state message, built by the same code the worker runs."""
    job, reason = validate_item(jobspec.job_item(raw_item(0)), SubmitPolicy())
    assert job is not None, reason
    now = int(time.time() * 1000)
    ulid = "01JZZZZZZZZZZZZZZZZZZZZZZZ"
    event = {"event_id": ulid, "created": now, "job_id": ulid, "payload": ("flotilla.JobSubmitted", job)}
    envelope = {"queue": queue_names(1)[0], "job_set_id": JOB_SET, "user": "anonymous", "groups": []}
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


def machine_ticks() -> tuple[int, int]:
    """(steal, all) clock ticks of every core since boot (/proc/stat): steal is time the hypervisor gave a
    vCPU that wanted to run to something else, one sign of the machine's noise."""
    with open("/proc/stat") as stat:
        fields = [int(field) for field in stat.readline().split()[1:9]]
    return fields[7], sum(fields)


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


def new_worker(broker_url: str, partitions: int, state_dir: Path, index: int, archive: bool = False) -> WorkerProcess:
    """A real control-plane worker, in its own session: Ctrl-C reaches only the benchmark, which stops it.

    Every worker keeps the default app id, so they form one consumer group; each needs its own
    data dir (RocksDB locks it) and web port.
    """
    worker_dir = state_dir / f"worker-{index}"
    worker_dir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    env = {
        **os.environ,
        "FLOTILLA_BROKER": broker_url,
        "FLOTILLA_DATA_DIR": str(worker_dir / "data"),
        "FLOTILLA_PARTITIONS": str(partitions),
        "FLOTILLA_WEB_PORT": str(port),
        "FLOTILLA_GRPC_PORT": str(free_port()),
        "FLOTILLA_ARCHIVE_DIR": str(worker_dir / "log") if archive else "",
        **UNLIMITED_SUBMISSIONS,
    }
    return WorkerProcess(env=env, log_path=worker_dir / "worker.log", web_port=port, new_session=True)


def start_workers(workers: list[WorkerProcess], queues: list[str]) -> None:
    """Start the workers, create the queues through the first, and wait until every worker is
    healthy and sees every queue.

    Workers start one at a time, in this thread, so an error or Ctrl-C never leaves a child the
    caller does not know about; the final health pass covers the rebalances each join causes.
    """
    for index, worker in enumerate(workers):
        log(f"starting control-plane worker {index + 1}/{len(workers)} ...")
        worker.start()
    for worker in workers:
        worker.wait_healthy(120.0)
    create_queues(workers[0], queues)
    wait_queues_visible(workers, queues)


def create_queues(worker: WorkerProcess, names: list[str]) -> None:
    for name in names:
        status, body = http("POST", f"{worker.url}/api/v1/queues", {"name": name})
        if status // 100 != 2:
            raise RuntimeError(f"cannot create queue {name!r}: HTTP {status} {body}")


def wait_queues_visible(workers: list[WorkerProcess], names: list[str]) -> None:
    """Until every worker's queue replica has each queue: a worker that has not seen a queue
    would reject that queue's submissions."""
    deadline = time.monotonic() + QUEUE_VISIBLE_TIMEOUT_S
    for worker in workers:
        for name in names:
            while (status := http("GET", f"{worker.url}/api/v1/queues/{name}")[0]) != 200:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"queue {name!r} not visible on {worker.url} after {QUEUE_VISIBLE_TIMEOUT_S:.0f}s (HTTP {status})")
                time.sleep(0.2)


# ---------------------------------------------------------------- measurements

LATENCY_QUEUE = "bench-latency"
WARM_UP_PAUSE_S = 2.0


def idle_submits(worker: WorkerProcess, count: int) -> tuple[list[float], list[float], set[bytes]]:
    """Milliseconds from sending a one-job REST submission to its answer, one at a time; the same for
    a job-set cancel (answered once its one event is on the log, and archived, with no fold to wait
    for); and the submitted jobs' ids."""
    latencies: list[float] = []
    cancels: list[float] = []
    job_ids: set[bytes] = set()
    for i in range(count):
        started = time.perf_counter()
        status, answer = http("POST", f"{worker.url}/api/v1/queues/{LATENCY_QUEUE}/jobsets/cancelled/cancel", {}, timeout=30)
        cancels.append((time.perf_counter() - started) * 1000)
        if status != 202:
            raise RuntimeError(f"idle cancel {i} answered HTTP {status}: {answer}")
        time.sleep(0.02)
    for i in range(count):
        body = {"queue": LATENCY_QUEUE, "job_set_id": "latency", "items": [jobspec.job_item(raw_item(10_000_000 + i))]}
        started = time.perf_counter()
        status, answer = http("POST", f"{worker.url}/api/v1/jobs", body, timeout=30)
        latencies.append((time.perf_counter() - started) * 1000)
        if status != 200:
            raise RuntimeError(f"idle submission {i} answered HTTP {status}: {answer}")
        job_ids.update(job_id.encode() for job_id in answer["job_ids"])
        time.sleep(0.02)
    return latencies, cancels, job_ids


def warm_up(worker: WorkerProcess, queues: list[str]) -> set[bytes]:
    """One job submitted to each timed queue through the REST API (answered once folded), then a pause: every
    worker ingests and folds a job on its partitions before the clock starts. Each worker compiles its Avro
    codecs at their first use; the idle submissions warm only the workers that own their queue's partitions,
    so without this a second worker paid that (~0.05 s each, py-spy) inside the timed phase and a lone worker
    did not. Returns the jobs' ids, which the timed phase does not count."""
    job_ids: set[bytes] = set()
    for i, queue in enumerate(queues):
        body = {"queue": queue, "job_set_id": JOB_SET, "items": [jobspec.job_item(raw_item(20_000_000 + i))]}
        status, answer = http("POST", f"{worker.url}/api/v1/jobs", body, timeout=30)
        if status != 200:
            raise RuntimeError(f"warm-up submission to {queue} answered HTTP {status}: {answer}")
        job_ids.update(job_id.encode() for job_id in answer["job_ids"])
    time.sleep(WARM_UP_PAUSE_S)  # the scheduler folds them and the standby copies are written meanwhile
    return job_ids


def percentile(values: list[float], pct: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(pct / 100 * (len(ordered) - 1)))]


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


async def produce_all(producer: AIOKafkaProducer, topic: str, records: list[tuple[bytes, bytes]]) -> None:
    futures = [await producer.send(topic, value, key=key) for key, value in records]
    await asyncio.gather(*futures)


async def raw_rate(bootstrap: str, topic: str, size: int, count: int) -> float:
    """Messages/s produced and consumed (first produce -> last consumed) through a fresh topic."""
    await create_topic(bootstrap, topic)
    records = [(b"raw", os.urandom(size))] * count
    consumer = await started_consumer(bootstrap, {topic: 1})
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, **PRODUCER_OPTIONS)
    await producer.start()
    try:
        start = time.perf_counter()
        sending = asyncio.create_task(produce_all(producer, topic, records))
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
class Sample:
    """CPU seconds so far of each worker and of the broker, and the machine's ticks, at ``at`` (perf_counter)."""

    at: float
    workers: list[float]
    broker: float
    machine: tuple[int, int]  # `machine_ticks`

    @staticmethod
    def now(worker_pids: list[int], broker_pid: int | None) -> Sample:
        return Sample(time.perf_counter(), [cpu_seconds(pid) for pid in worker_pids], cpu_seconds(broker_pid), machine_ticks())


def quiet_since(samples: list[Sample]) -> Sample | None:
    """The sample from which every worker has used at most `QUIET_SHARE` of a core in each interval between
    samples, if that has lasted `QUIET_S` or more (the workers are done with what the timed jobs gave them)."""
    at = len(samples) - 1
    while at > 0:
        before, after = samples[at - 1], samples[at]
        limit = QUIET_SHARE * (after.at - before.at)
        if any(late - early > limit for early, late in zip(before.workers, after.workers, strict=True)):
            break
        at -= 1
    return samples[at] if samples[-1].at - samples[at].at >= QUIET_S else None


@dataclass
class IngestResult:
    seconds: float  # first produce -> last job seen queued
    produce_seconds: float
    settle_seconds: float  # last job seen queued -> the workers settled (`flotilla_rate`)
    checked: int
    mean_state_bytes: float
    peak_rss_kib: list[int]  # per worker
    worker_cpu_s: list[float]  # per worker, first produce -> settled
    broker_cpu_s: float
    steal_share: float  # of every core's time, first produce -> settled
    queued_worker_cpu_s: list[float]  # per worker, first produce -> last job seen queued (the window before the settle)
    queued_broker_cpu_s: float


def rss_summary(pids: list[int]) -> str:
    return ", ".join(f"{read_status(pid).get('VmRSS', 0) / 1024:,.0f}" for pid in pids) + " MiB"


async def flotilla_rate(
    bootstrap: str,
    worker_pids: list[int],
    broker_pid: int | None,
    requests: list[tuple[bytes, bytes]],
    jobs: int,
    partitions: int,
    profilers: list[list[str]],
    children: Children,
    ignored: set[bytes],
) -> IngestResult:
    """Produce the requests and time them until every job is seen queued on `job-states`; the workers' CPU is
    measured until they are settled: every job is also in the scheduler's index (its changelog has every job's
    entry) and each worker has used at most `QUIET_SHARE` of a core for `QUIET_S` (the standby copies of the
    tables are applied too), from the start of that quiet time. A job seen queued is not the end of its work:
    the scheduler folds it from the feed, and another worker copies its table writes, later: CPU up to that
    moment alone could compare different shares of the same jobs' work from 1 to 2 workers."""
    consumer = await started_consumer(bootstrap, {JOB_STATES: partitions, REJECTED: partitions, SCHEDULER_INDEX: 1})
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, **PRODUCER_OPTIONS)
    await producer.start()
    sampled_rss = [0] * len(worker_pids)
    stop_sampling = asyncio.Event()

    async def sample_rss() -> None:
        while not stop_sampling.is_set():
            for i, pid in enumerate(worker_pids):
                sampled_rss[i] = max(sampled_rss[i], read_status(pid).get("VmRSS", 0))
            try:
                await asyncio.wait_for(stop_sampling.wait(), 0.1)
            except TimeoutError:
                pass

    sampler = asyncio.create_task(sample_rss())
    spies = []
    ignored_entries = {INDEX_JOB_PREFIX + job_id for job_id in ignored}
    try:
        if profilers:
            # py-spy writes its output on SIGINT
            spies = [children.add(Command(profiler, stop_signal=signal.SIGINT, grace_s=30.0)).start() for profiler in profilers]
            await asyncio.sleep(1.0)  # let py-spy attach before the clock starts
        seen: set[bytes] = set()
        indexed: set[bytes] = set()  # the timed jobs' entries in the scheduler's index
        checked = 0
        state_bytes = 0
        first = Sample.now(worker_pids, broker_pid)
        start = first.at
        sending = asyncio.create_task(produce_all(producer, SUBMISSIONS, requests))
        produce_done = None
        last = progress = start
        next_report = start + PROGRESS_EVERY_S
        samples = [first]
        queued: Sample | None = None  # when the last job was seen queued
        indexed_all: Sample | None = None  # when the last job's entry in the scheduler's index was seen
        settled: Sample | None = None
        while settled is None:
            batches = await consumer.getmany(timeout_ms=200, max_records=20_000)
            now = time.perf_counter()
            before = len(seen), len(indexed)
            for tp, records in batches.items():
                if tp.topic == REJECTED:
                    reason = decode("rejection", records[0].value).get("reason")
                    raise RuntimeError(f"{len(records)} rejection(s) on {REJECTED}, first: {reason}")
                if tp.topic == SCHEDULER_INDEX:
                    indexed.update(
                        record.key
                        for record in records
                        if record.key.startswith(INDEX_JOB_PREFIX) and record.value is not None and record.key not in ignored_entries
                    )
                    continue
                for record in records:
                    if record.key not in seen and record.key not in ignored:
                        seen.add(record.key)
                        state_bytes += len(record.value)
                        if len(seen) % 1000 == 1:
                            state = decode("job_state", record.value)["state"]
                            if state != "queued":
                                raise RuntimeError(f"job {record.key!r} is {state!r}, expected 'queued'")
                            checked += 1
            if len(seen) > before[0]:
                last = now
            if (len(seen), len(indexed)) != before:
                progress = now
            elif now - progress > STALL_TIMEOUT_S:
                raise RuntimeError(
                    f"no progress for {STALL_TIMEOUT_S:.0f}s: {len(seen):,}/{jobs:,} jobs queued, {len(indexed):,} in the scheduler's index"
                )
            if produce_done is None and sending.done():
                await sending  # raises a produce error
                produce_done = now
            if now - samples[-1].at >= SAMPLE_EVERY_S:
                samples.append(Sample.now(worker_pids, broker_pid))
            if queued is None and len(seen) >= jobs:
                queued = Sample.now(worker_pids, broker_pid)
                log(f"all {jobs:,} jobs queued after {last - start:.1f}s; settling ...")
            if indexed_all is None and len(indexed) >= jobs:
                indexed_all = Sample.now(worker_pids, broker_pid)
            if queued is not None and indexed_all is not None and (quiet := quiet_since(samples)) is not None:
                settled = max(quiet, queued, indexed_all, key=lambda sample: sample.at)  # none of it ends before the others
            if now >= next_report:
                elapsed = now - start
                log(
                    f"{len(seen):,}/{jobs:,} queued, {len(indexed):,} in the scheduler's index after {elapsed:.1f}s "
                    f"({len(seen) / elapsed:,.0f} jobs/s), worker RSS {rss_summary(worker_pids)}"
                )
                next_report = now + PROGRESS_EVERY_S
        await sending
        if produce_done is None:
            produce_done = time.perf_counter()
        assert queued is not None
        peaks = [max(read_status(pid).get("VmHWM", 0), sampled) for pid, sampled in zip(worker_pids, sampled_rss, strict=True)]
        return IngestResult(
            seconds=last - start,
            produce_seconds=produce_done - start,
            settle_seconds=settled.at - last,
            checked=checked,
            mean_state_bytes=state_bytes / len(seen),
            peak_rss_kib=peaks,
            worker_cpu_s=[late - early for early, late in zip(first.workers, settled.workers, strict=True)],
            broker_cpu_s=settled.broker - first.broker,
            steal_share=(settled.machine[0] - first.machine[0]) / max(1, settled.machine[1] - first.machine[1]),
            queued_worker_cpu_s=[late - early for early, late in zip(first.workers, queued.workers, strict=True)],
            queued_broker_cpu_s=queued.broker - first.broker,
        )
    finally:
        for spy in spies:
            spy.stop()
        stop_sampling.set()
        await sampler
        await producer.stop()
        await consumer.stop()


# ---------------------------------------------------------------- main


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=100_000, help="jobs to submit (default 100000)")
    parser.add_argument("--batch", type=int, default=100, help="job items per submit request (default 100)")
    parser.add_argument("--partitions", type=int, default=1, help="FLOTILLA_PARTITIONS for the workers (default 1)")
    parser.add_argument("--workers", type=int, default=1, help="control-plane workers in one consumer group (default 1)")
    parser.add_argument(
        "--queues", type=int, default=1, help="queues bench-0..bench-{Q-1}; submit requests go round-robin over them (default 1)"
    )
    parser.add_argument("--py-spy", metavar="BIN", help="profile every worker during the Flotilla phase with this py-spy")
    parser.add_argument(
        "--py-spy-native", action="store_true", help="include native frames (GC, fastavro, syscalls); pauses the worker per sample"
    )
    parser.add_argument(
        "--py-spy-gil",
        action="store_true",
        help="sample only the thread holding the GIL: on this shared machine a thread waiting for a core is sampled as busy",
    )
    parser.add_argument(
        "--profile-out",
        default="/tmp/ingest-profile.txt",
        help="py-spy output (--format raw); with several workers -w0, -w1, ... before the suffix",
    )
    parser.add_argument("--archive", choices=("on", "off"), default="off", help="workers keep the log archive, as `flotilla up` does")
    parser.add_argument("--idle-submits", type=int, default=200, help="single-job REST submissions timed on the idle worker (default 200)")
    args = parser.parse_args(argv)
    if min(args.jobs, args.batch, args.partitions, args.workers, args.queues) < 1:
        parser.error("--jobs, --batch, --partitions, --workers and --queues must be positive")
    return args


@dataclass
class Setup:
    """What the report needs to know about the run besides the measured result."""

    args: argparse.Namespace
    queues: list[str]
    spread: list[list[str]]
    requests: int
    request_bytes: int
    state_bytes: int
    raw_jobs: list[float]
    raw_requests: list[float]
    raw_count: int
    worker_pids: list[int]
    assignments: list[str]
    idle_latencies_ms: list[float]
    idle_cancels_ms: list[float]


def print_report(setup: Setup, result: IngestResult) -> None:
    args = setup.args
    raw_job, raw_request = statistics.median(setup.raw_jobs), statistics.median(setup.raw_requests)
    jobs_per_s = args.jobs / result.seconds
    ratio = jobs_per_s / raw_job
    peaks_mib = [kib / 1024 for kib in result.peak_rss_kib]
    used = sum(1 for queues in setup.spread if queues)
    events_spread = [len(keys) for keys in queues_by_partition(event_keys(setup.queues), args.partitions)]
    print(
        f"conditions: {os.cpu_count()} cores (broker, {args.workers} worker(s) and this client share them), "
        f"Python {platform.python_version()}, embedded Tansu, log in memory"
    )
    print(
        f"  jobs {args.jobs:,}, batch {args.batch} items per submit request ({setup.requests:,} requests), "
        f"round-robin over {args.queues} queue(s); workers {args.workers} (one consumer group); "
        f"partitions {args.partitions}, {used} used (submissions keyed by queue; queues per partition "
        f"{[len(queues) for queues in setup.spread]}; job sets per events partition {events_spread})"
    )
    print(
        f"  message sizes: submit request {setup.request_bytes:,} B, job_state {setup.state_bytes} B "
        f"(observed mean on job-states {result.mean_state_bytes:,.0f} B)"
    )
    print(
        "  counting: distinct keys of flotilla.job-states; every 1,000th value decoded and checked "
        f"'queued' ({result.checked} checked); flotilla.rejected watched (none)"
    )
    print(
        "  ratio = jobs/s / raw msgs/s of job_state-sized messages (one job through Flotilla vs one "
        "message of that size through raw aiokafka, produce+consume on the same broker)"
    )
    if args.py_spy:
        print(f"  NOTE: every worker profiled with py-spy during this run ({args.profile_out}); figures are perturbed")
    for warning in spread_warnings(setup.spread, args.workers):
        print(f"  WARNING: {warning}")
    print(
        f"flotilla: {jobs_per_s:,.0f} jobs/s ({args.jobs:,} jobs queued in {result.seconds:.2f}s; "
        f"all produced after {result.produce_seconds:.2f}s)"
    )
    total_cpu = sum(result.worker_cpu_s)
    window = result.seconds + result.settle_seconds
    print(
        f"  CPU until the workers settled ({result.settle_seconds:.1f}s after the last job was seen queued: every job in "
        f"the scheduler's index, each worker under {QUIET_SHARE:.0%} of a core for {QUIET_S:.0f}s since): workers "
        f"{total_cpu:.1f}s in total ({total_cpu / window:.0%} of one core), broker {result.broker_cpu_s:.1f}s "
        f"({result.broker_cpu_s / window:.0%} of one core); steal {result.steal_share:.1%} of the machine's time"
    )
    workers_ms = 1000 * total_cpu / args.jobs
    each_worker_ms = [1000 * cpu / args.jobs for cpu in result.worker_cpu_s]
    broker_ms = 1000 * result.broker_cpu_s / args.jobs
    print(
        f"  CPU per job: workers {workers_ms:.3f} ms together ({', '.join(f'{ms:.3f}' for ms in each_worker_ms)} ms each), "
        f"broker {broker_ms:.3f} ms"
    )
    queued_ms = [1000 * cpu / args.jobs for cpu in result.queued_worker_cpu_s]
    queued_broker_ms = 1000 * result.queued_broker_cpu_s / args.jobs
    print(
        f"  of which until the last job was seen queued: workers {sum(queued_ms):.3f} ms "
        f"({', '.join(f'{ms:.3f}' for ms in queued_ms)} ms each), broker {queued_broker_ms:.3f} ms "
        "(not the same share of each job's work with one worker and with several: see flotilla_rate)"
    )
    per_worker = zip(setup.worker_pids, result.worker_cpu_s, peaks_mib, setup.assignments, strict=False)
    for index, (pid, cpu, peak, assigned) in enumerate(per_worker):
        print(
            f"    worker {index} (pid {pid}): CPU {cpu:.1f}s ({cpu / result.seconds:.0%} of one core), "
            f"peak RSS {peak:,.1f} MiB; assigned {assigned}"
        )
    print(
        f"raw aiokafka (median of {RAW_REPEATS}): {raw_job:,.0f} msgs/s of {setup.state_bytes} B "
        f"({args.jobs:,} msgs; runs {', '.join(f'{r:,.0f}' for r in setup.raw_jobs)}); "
        f"{raw_request:,.0f} msgs/s of {setup.request_bytes:,} B ({setup.raw_count:,} msgs; runs "
        f"{', '.join(f'{r:,.0f}' for r in setup.raw_requests)}; "
        f"= {raw_request * args.batch:,.0f} jobs/s if each carried {args.batch} jobs)"
    )
    print(f"ratio: {ratio:.1%} of raw (target >= 30%); jobs/s target >= 25,000: {'met' if jobs_per_s >= 25_000 else 'NOT met'}")
    print(f"worker peak RSS: {max(peaks_mib):,.1f} MiB (max over {args.workers} worker(s))")
    idle = setup.idle_latencies_ms
    p50, p99 = percentile(idle, 50), percentile(idle, 99)
    print(
        f"archive {args.archive}: idle submit->ack over REST, {len(idle)} single-job submissions 20 ms apart: "
        f"p50 {p50:.1f} ms, p99 {p99:.1f} ms, max {max(idle, default=0):.1f} ms"
    )
    cancels = setup.idle_cancels_ms
    c50, c99 = percentile(cancels, 50), percentile(cancels, 99)
    archived = ", and archived" if args.archive == "on" else ""
    print(
        f"  and {len(cancels)} job-set cancels (answered once their event is on the log{archived}): "
        f"p50 {c50:.1f} ms, p99 {c99:.1f} ms, max {max(cancels, default=0):.1f} ms"
    )
    print(
        json.dumps(
            {
                "jobs": args.jobs,
                "jobs_per_s": round(jobs_per_s, 1),
                "raw_per_s": round(raw_job, 1),
                "ratio": round(ratio, 4),
                "peak_rss_mib": round(max(peaks_mib), 1),
                "batch": args.batch,
                "partitions": args.partitions,
                "raw_request_per_s": round(raw_request, 1),
                "request_bytes": setup.request_bytes,
                "job_state_bytes": setup.state_bytes,
                "seconds": round(result.seconds, 3),
                "workers": args.workers,
                "queues": args.queues,
                "workers_peak_rss_mib": [round(peak, 1) for peak in peaks_mib],
                "workers_cpu_s": [round(cpu, 2) for cpu in result.worker_cpu_s],
                "broker_cpu_s": round(result.broker_cpu_s, 2),
                "settle_seconds": round(result.settle_seconds, 3),
                "steal_share": round(result.steal_share, 4),
                "cpu_ms_per_job": {
                    "workers": round(workers_ms, 4),
                    "each_worker": [round(ms, 4) for ms in each_worker_ms],
                    "broker": round(broker_ms, 4),
                },
                "cpu_ms_per_job_until_queued": {
                    "workers": round(sum(queued_ms), 4),
                    "each_worker": [round(ms, 4) for ms in queued_ms],
                    "broker": round(queued_broker_ms, 4),
                },
                "archive": args.archive,
                "idle_submit_ack_p50_ms": round(p50, 2),
                "idle_submit_ack_p99_ms": round(p99, 2),
                "idle_cancel_ack_p50_ms": round(c50, 2),
                "idle_cancel_ack_p99_ms": round(c99, 2),
            }
        )
    )


def profile_path(out: str, worker: int, workers: int) -> str:
    """Worker ``worker``'s profile: ``out`` itself with one worker, else with ``-w<worker>`` before its suffix."""
    if workers == 1:
        return out
    path = Path(out)
    return str(path.with_name(f"{path.stem}-w{worker}{path.suffix}"))


def measure_raw(bootstrap: str, prefix: str, size: int, count: int) -> list[float]:
    """RAW_REPEATS runs, each on its own fresh topic."""
    return [asyncio.run(raw_rate(bootstrap, f"bench.raw-{prefix}-{i}", size, count)) for i in range(RAW_REPEATS)]


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    queues = queue_names(args.queues, args.partitions)
    spread = queues_by_partition(queues, args.partitions)
    for warning in spread_warnings(spread, args.workers):
        log(f"WARNING: {warning}")
    state_dir = Path(tempfile.mkdtemp(prefix="flotilla-bench-ingest-"))
    workers: list[WorkerProcess] = []  # for the log tails on an error
    # Children: the broker, the workers and py-spy are stopped when the block ends, however it ends
    # (an error, Ctrl-C, SIGTERM: see bench/processes.py), before the except clauses below run.
    try:
        with Children(log) as children:
            log(f"encoding {args.jobs:,} jobs in requests of {args.batch} over {len(queues)} queue(s) ...")
            requests = encode_requests(args.jobs, args.batch, queues)
            request_bytes = round(sum(len(value) for _, value in requests) / len(requests))
            state_bytes = job_state_size()

            broker = children.add(EmbeddedBroker(log_path=state_dir / "broker.log", new_session=True))
            broker.start()
            broker_pid = broker.process.pid if broker.process is not None else None  # for CPU accounting
            log(f"broker {broker.url} (state and logs in {state_dir})")

            # Raw phase first, before the workers exist: the broker and the machine are otherwise idle.
            log(f"raw aiokafka: {args.jobs:,} messages of {state_bytes} B, {RAW_REPEATS} times ...")
            raw_jobs = measure_raw(broker.bootstrap, "job", state_bytes, args.jobs)
            raw_count = max(len(requests), 1000)
            log(f"raw aiokafka: {raw_count:,} messages of {request_bytes:,} B, {RAW_REPEATS} times ...")
            raw_requests = measure_raw(broker.bootstrap, "request", request_bytes, raw_count)

            archive = args.archive == "on"
            workers.extend(children.add(new_worker(broker.url, args.partitions, state_dir, i, archive)) for i in range(args.workers))
            start_workers(workers, [*queues, LATENCY_QUEUE])
            pids = [worker.process.pid for worker in workers if worker.process is not None]
            log(
                f"worker pid(s) {pids} healthy on {[worker.url for worker in workers]}; "
                f"{len(queues)} queue(s) created and seen by every worker; queues per partition "
                f"{[len(q) for q in spread]}; submitting ..."
            )

            profilers = [
                [
                    args.py_spy,
                    "record",
                    "--format",
                    "raw",
                    "-o",
                    profile_path(args.profile_out, i, len(pids)),
                    "--pid",
                    str(pid),
                    "--rate",
                    "100",
                    *(["--native"] if args.py_spy_native else ["--nonblocking"]),
                    *(["--gil"] if args.py_spy_gil else []),
                ]
                for i, pid in enumerate(pids if args.py_spy else [])
            ]
            log(f"idle submit->ack: {args.idle_submits} single-job REST submissions, archive {args.archive} ...")
            latencies, cancels, latency_jobs = idle_submits(workers[0], args.idle_submits)
            log(f"warm-up: one job to each of the {len(queues)} timed queue(s) through the REST API ...")
            warm_jobs = warm_up(workers[0], queues)
            result = asyncio.run(
                flotilla_rate(
                    broker.bootstrap, pids, broker_pid, requests, args.jobs, args.partitions, profilers, children, latency_jobs | warm_jobs
                )
            )
            assignments = [assigned_partitions(worker) for worker in workers]  # before the logs are removed
    except KeyboardInterrupt:
        log("interrupted")
        return exit_status()
    except Exception as exc:  # noqa: BLE001 - report and clean up
        log(f"error: {exc}")
        for worker in workers:
            if worker.process is not None:
                log(f"worker log tail:\n{worker.log_tail()}")
        return 1
    finally:
        shutil.rmtree(state_dir, ignore_errors=True)

    print_report(
        Setup(
            args,
            queues,
            spread,
            len(requests),
            request_bytes,
            state_bytes,
            raw_jobs,
            raw_requests,
            raw_count,
            pids,
            assignments,
            latencies,
            cancels,
        ),
        result,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
