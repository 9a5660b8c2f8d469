"""The replay commands against a real worker, its broker and its archive: `flotilla audit`,
`flotilla rebuild --into DIR`, `flotilla job status --at`, `flotilla get queues --at`, and their REST reads.

One worker schedules and archives its log. Its timer ticks about ten times a second (each tick
waits for the one before to come back through the broker), so besides it the test produces ticks
into the feed as a timer with a 5 ms period would, and a short workload leaves thousands of cycles
on the feed, each run, committed and published by the worker's scheduler. A fake executor runs
two queues' jobs, a gang among them, the second queue's arrival preempting the first's for fair
share, and a third queue's jobs wait for nodes that do not exist. Then: the audit matches every
cycle, from the broker and from the archive alone; a copy of the log with one decision changed
fails it, naming the cycle, its inputs and the difference; the time-travel reads answer what the
log said then; the rebuild equals the live tables, and, once every data directory and changelog
topic is deleted, rebuilds every job's state from `events` alone.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from ops.broker import EmbeddedBroker
from schemas.codec import decode, encode
from streams.replay.jobs import RocksTable
from streams.scheduler import feed
from tests.integration.helpers import call
from tests.integration.log import Record as LogRecord
from tests.integration.log import latest_by_key
from tests.integration.pipeline import Executors, events, fake_item, new_queue, submit_jobs, wait_states
from tests.integration.workers import ROOT, Worker, poll, remove_tree, running_worker

pytestmark = pytest.mark.integration

FLOTILLA = Path(sys.executable).parent / "flotilla"
PREEMPTIBLE = "armada-preemptible"
TERMINAL = {"succeeded", "failed", "cancelled", "preempted"}


@dataclass
class Recorded:
    worker: Worker
    archive: Path
    queues: tuple[str, str, str]
    jobs: list[str]  # of queues a and b, all finished
    gang: list[str]  # four of them, one gang
    waiting: list[str]  # of queue c: no node matches them
    before: int  # a time before any submission (ms)
    waiting_since: int  # a time when c's jobs were queued and a's and b's were being scheduled


@pytest.fixture(scope="module")
def recorded(broker: EmbeddedBroker, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Recorded]:
    archive = tmp_path_factory.mktemp("replays-archive") / "log"
    with running_worker(
        broker, tmp_path_factory, "replays", FLOTILLA_SCHEDULE_PERIOD_S="0.05", FLOTILLA_ARCHIVE_DIR=str(archive)
    ) as worker:
        executors = Executors(worker, tmp_path_factory.mktemp("replays-executors"))
        try:
            with ticking(worker):
                found = record(worker, executors, archive)
            yield found
        finally:
            executors.stop_all()


@contextmanager
def ticking(worker: Worker, per_second: float = 200.0) -> Iterator[None]:
    """Ticks produced into the worker's feed from a thread, as the owner's timer produces them (the
    queues as the API has them), until the block ends."""
    stop = threading.Event()

    async def produce() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=worker.bootstrap, linger_ms=0)
        await producer.start()
        try:
            queues: tuple[feed.QueueInfo, ...] = ()
            refreshed = 0.0
            while not stop.is_set():
                if time.monotonic() - refreshed > 0.5:
                    listed = (await asyncio.to_thread(worker.client.call, "GET", "/api/v1/queues"))["queues"]
                    queues, refreshed = tuple(feed.queue_info(q) for q in listed), time.monotonic()
                tick = feed.Tick(time=now_ms(), queues=queues, owner="the test's ticker")
                await producer.send_and_wait(worker.topic("scheduler-feed"), feed.encode(tick), partition=0)
                await asyncio.sleep(1 / per_second)
        finally:
            await producer.stop()

    thread = threading.Thread(target=lambda: asyncio.run(produce()), name="ticker")
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(10)


def record(worker: Worker, executors: Executors, archive: Path) -> Recorded:
    a, b, c = (new_queue(worker, f"replay-{name}") for name in ("a", "b", "c"))
    executors.fake("replay-ex", nodes=4, cpu="8", memory="64Gi")
    selector = executors.selector
    before = now_ms()
    time.sleep(0.05)
    gang = {"armadaproject.io/gangId": "replay-gang", "armadaproject.io/gangCardinality": "4"}
    # Queue a alone fills the 32 cpus for a while: b's arrival two seconds in finds it far above its fair share.
    jobs = submit_jobs(worker, a, "fill", [fake_item(selector, runtime_s=3.0, priority_class=PREEMPTIBLE) for _ in range(96)])
    members = submit_jobs(
        worker, a, "gang", [fake_item(selector, cpu="2", runtime_s=1.0, priority_class=PREEMPTIBLE, annotations=gang) for _ in range(4)]
    )
    jobs += members
    waiting = submit_jobs(worker, c, "nowhere", [fake_item({"nowhere": "true"}) for _ in range(5)])
    poll(lambda: sum(counts(worker, a).get(s, 0) for s in ("leased", "pending", "running")) >= 28, 30, "queue a on the whole cluster")
    jobs += submit_jobs(worker, b, "late", [fake_item(selector, runtime_s=1.0, priority_class=PREEMPTIBLE) for _ in range(40)])
    poll(lambda: counts(worker, c).get("queued") == 5, 30, "queue c's jobs queued")
    waiting_since = now_ms()
    wait_states(worker, jobs, TERMINAL, 120, "every job of queues a and b finished")
    poll(lambda: cycles_recorded(worker) >= 2_000, 60, "2,000 cycles on the feed")
    return Recorded(worker, archive, (a, b, c), jobs, members, waiting, before, waiting_since)


def now_ms() -> int:
    return int(time.time() * 1000)


def counts(worker: Worker, queue: str) -> dict[str, int]:
    groups = worker.client.call("GET", f"/api/v1/job-counts?queue={queue}")["groups"]
    return dict(groups[0]["counts"]) if groups else {}


def cycles_recorded(worker: Worker) -> int:
    return sum(1 for r in worker.read(worker.topic("scheduler-feed")) if r.value and isinstance(feed.decode(r.value), feed.Tick))


def flotilla(worker: Worker, *args: str, timeout: float = 120, **env: str) -> subprocess.CompletedProcess[str]:
    environment = {**worker.env(), "FLOTILLA_URL": worker.url, **env}
    return subprocess.run([str(FLOTILLA), *args], env=environment, cwd=ROOT, capture_output=True, text=True, timeout=timeout)


def logged_at(worker: Worker, kind: str) -> dict[str, int]:
    """Per job, the time on the log (the broker's record timestamp) of the record holding its last ``kind`` event."""
    found: dict[str, int] = {}
    for record in worker.read(worker.topic("events")):
        for event in decode("event_sequence", record.value)["events"]:
            if event["payload"][0].rsplit(".", 1)[-1] == kind:
                found[event["job_id"]] = max(found.get(event["job_id"], record.timestamp), record.timestamp)
    return found


def report_of(done: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    try:
        return dict(json.loads(done.stdout))
    except json.JSONDecodeError:
        raise AssertionError(f"exit {done.returncode}; stdout: {done.stdout[-2000:]}; stderr: {done.stderr[-2000:]}") from None


# -- audit ---------------------------------------------------------------------------------------


def test_the_audit_matches_every_cycle_with_preemptions_and_a_gang(recorded: Recorded) -> None:
    worker = recorded.worker
    happened = [(kind, job_id) for kind, job_id, _, _ in events(worker)]
    preempted = {job_id for kind, job_id in happened if kind == "JobPreempted"}
    assert preempted, "queue b's arrival preempted some of queue a's jobs"
    leases = [(job_id, payload["cycle_id"]) for kind, job_id, _, payload in events(worker) if kind == "JobLeased"]
    gang_cycles = {cycle for job_id, cycle in leases if job_id in recorded.gang}
    assert len(gang_cycles) == 1, "the gang's members were leased together"
    # 144 cpus of jobs (136 of 1, a gang of 4 x 2) on 32: no fewer than five cycles can lease them (how many more depends on timing).
    leasing_cycles = {cycle for _, cycle in leases}
    assert len(leasing_cycles) >= 5

    done = flotilla(worker, "audit", "--json")
    report = report_of(done)
    assert done.returncode == 0, report["first_divergence"]
    assert report["ok"] and report["divergences"] == 0
    assert report["cycles"] >= 2_000 and report["checked"] == report["cycles"]
    assert report["deciding"] >= len(leasing_cycles) and report["committed_matched"] == report["deciding"] - report["in_flight"]
    # Each job of queues a and b was leased, each preempted one preempted: each a decision.
    assert report["decisions_matched"] >= len(recorded.jobs) + len(preempted)
    assert "replayed" in done.stderr, "progress is shown on standard error"


def test_the_audit_from_the_archive_alone_matches_the_brokers(recorded: Recorded) -> None:
    from_broker = report_of(flotilla(recorded.worker, "audit", "--json"))
    done = flotilla(recorded.worker, "audit", "--json", "--from-archive", str(recorded.archive), FLOTILLA_BROKER="tansu://127.0.0.1:1")
    from_archive = report_of(done)
    assert done.returncode == 0 and from_archive["ok"], from_archive["first_divergence"]
    assert from_archive["generations"] == [recorded.worker.topic("scheduler-feed")]
    assert from_archive["cycles"] >= from_broker["cycles"] - 50  # the archive is a group commit behind at most
    assert from_archive["decisions_matched"] >= from_broker["decisions_matched"] - 50


def test_a_decision_changed_on_the_log_fails_the_audit_with_its_cycle_inputs_and_difference(recorded: Recorded) -> None:
    """A copy of the log under another prefix, with one cycle record's first lease sent to another node."""
    worker = recorded.worker
    prefix = f"tampered-{worker.prefix}"
    logged = {name: sorted(worker.read(worker.topic(name)), key=lambda r: (r.partition, r.offset)) for name in ("scheduler-feed", "events")}
    changed = asyncio.run(copy_log(worker, logged, prefix))
    done = flotilla(worker, "audit", FLOTILLA_TOPIC_PREFIX=prefix)
    assert done.returncode == 1, done.stdout + done.stderr
    out = done.stdout
    assert "DIVERGED" in out and "a record of the cycle on `events` differs from its repeat" in out, out
    assert f"cycle {changed['cycle_id']}" in out
    assert "input records:" in out and "tick at" in out
    assert f"decisions[{changed['index']}].node: recorded 'tampered-node', replayed '{changed['node']}'" in out, out


async def copy_log(worker: Worker, logged: dict[str, list[LogRecord]], prefix: str) -> dict[str, Any]:
    """`events` and the feed copied under ``prefix``, partition for partition with their timestamps, the
    first leased decision of the first cycle record changed; returns what was changed."""
    admin = AIOKafkaAdminClient(bootstrap_servers=worker.bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(f"{prefix}events", worker.partitions, 1), NewTopic(f"{prefix}scheduler-feed", 1, 1)])
    finally:
        await admin.close()
    producer = AIOKafkaProducer(bootstrap_servers=worker.bootstrap, max_request_size=32 * 1024 * 1024)
    await producer.start()
    changed: dict[str, Any] = {}
    try:
        for name, records in logged.items():
            for record in records:
                value = record.value
                if name == "events" and not changed and value is not None:
                    value = tamper(value, changed)
                await producer.send_and_wait(
                    f"{prefix}{name}", value, key=record.key, partition=record.partition, timestamp_ms=record.timestamp
                )
    finally:
        await producer.stop()
    assert changed, "a cycle record with a lease"
    return changed


def tamper(value: bytes, changed: dict[str, Any]) -> bytes:
    sequence = decode("event_sequence", value)
    if sequence["queue"] != "_scheduler":
        return value
    payload = sequence["events"][0]["payload"][1]
    for index, decision in enumerate(payload["decisions"]):
        if decision["kind"] == "leased":
            changed.update(cycle_id=payload["cycle_id"], index=index, node=decision["node"])
            decision["node"] = "tampered-node"
            return encode("event_sequence", sequence)
    return value


def test_the_audit_is_a_rest_read_too(recorded: Recorded) -> None:
    status, report = call(recorded.worker.client, "GET", f"/api/v1/audit?since={recorded.waiting_since}")
    assert status == 200, report
    assert report["ok"] and 0 < report["checked"] < report["cycles"]
    status, body = call(recorded.worker.client, "GET", "/api/v1/audit?since=yesterday")
    assert status == 400 and "since" in body["error"]


# -- time travel ---------------------------------------------------------------------------------


def test_a_jobs_status_at_a_time_is_what_the_log_said_then(recorded: Recorded) -> None:
    worker = recorded.worker
    # --at cuts the log by its records' times, so the moment is taken between the records of the run's
    # start and end, not from the run's own times: under load its running event reaches the log well
    # after the executor saw it start, and may share a record (or a millisecond) with its end, when the
    # executor saw both between two reports. Queue a's jobs may have been preempted by b's arrival: the
    # job asked about is one that ran to the end, with its start and end apart on the log.
    started_at, ended_at = logged_at(worker, "JobRunRunning"), logged_at(worker, "JobRunSucceeded")
    apart = [job_id for job_id in recorded.jobs if job_id in started_at and ended_at.get(job_id, 0) - started_at[job_id] >= 2]
    assert apart, "no job ran to the end with its start and end apart on the log"
    job_id = apart[0]
    job = worker.client.call("GET", f"/api/v1/jobs/{job_id}")
    assert job["state"] == "succeeded"
    run = job["runs"][-1]
    started, ended = started_at[job_id], ended_at[job_id]
    while_running = (started + ended) // 2

    done = flotilla(worker, "job", "status", job_id, "--at", str(while_running), "--json")
    assert done.returncode == 0, done.stderr
    then = json.loads(done.stdout)
    assert then["state"] == "running" and then["as_of"] == while_running and then["runs"][-1]["run_id"] == run["run_id"]
    assert then["runs"][-1]["finished_at"] is None

    from_archive = flotilla(worker, "job", "status", job_id, "--at", str(while_running), "--from-archive", str(recorded.archive), "--json")
    assert from_archive.returncode == 0 and json.loads(from_archive.stdout) == then, from_archive.stderr

    text = flotilla(worker, "job", "status", job_id, "--at", str(while_running))
    assert text.returncode == 0 and f"job {job_id}  RUNNING  (as of " in text.stdout

    before = flotilla(worker, "job", "status", job_id, "--at", str(recorded.before))
    assert before.returncode == 1 and "not found" in before.stderr
    assert flotilla(worker, "job", "status", job_id, "--at", "not-a-time").returncode == 2  # argparse refuses it


def test_the_queues_at_a_time_count_their_jobs_as_the_log_said_then(recorded: Recorded) -> None:
    worker = recorded.worker
    a, b, c = recorded.queues

    def at(moment: int, *more: str) -> dict[str, dict[str, Any]]:
        done = flotilla(worker, "get", "queues", "--at", str(moment), "--json", *more)
        assert done.returncode == 0, done.stderr
        return {q["name"]: q for q in json.loads(done.stdout)["queues"]}

    def asked(moment: int) -> dict[str, dict[str, Any]]:
        """The REST read the command makes."""
        body = worker.client.call("GET", f"/api/v1/queues?at={moment}")
        assert body["as_of"] == moment
        return {q["name"]: q for q in body["queues"]}

    empty = asked(recorded.before)
    assert all(empty[q]["queued"] == empty[q]["running"] == 0 for q in (a, b, c))
    middle = at(recorded.waiting_since)
    assert middle[c]["queued"] == 5 and middle[c]["running"] == 0 and middle[c]["usage"] == {}
    assert middle[a]["queued"] + middle[a]["running"] + sum(middle[a]["states"].get(s, 0) for s in TERMINAL) == 100
    end = asked(now_ms())
    assert end[a]["running"] == end[b]["running"] == 0 and end[c]["queued"] == 5
    assert end[a]["states"] == {state: count for state, count in counts(worker, a).items() if count}
    assert at(now_ms(), "--from-archive", str(recorded.archive)) == end


# -- rebuild -------------------------------------------------------------------------------------


def test_the_rebuilt_tables_equal_the_live_ones(recorded: Recorded, tmp_path: Path) -> None:
    done = flotilla(recorded.worker, "rebuild", "--into", str(tmp_path / "rebuilt"), "--json")
    report = report_of(done)
    assert done.returncode == 0, (report["jobs_differing"][:5], report["index_differing"][:5])
    assert report["jobs"] == report["live_jobs"] == report["same"] == len(recorded.jobs) + 5
    assert report["index_jobs"] == report["live_index_jobs"] == 5  # queue c's jobs wait
    assert report["by_state"]["queued"] == 5 and report["by_state"]["succeeded"] > 100
    refused = flotilla(recorded.worker, "rebuild", "--into", str(tmp_path / "rebuilt"))
    assert refused.returncode == 1 and "not an empty directory" in refused.stderr


def test_every_job_is_rebuilt_from_events_alone_once_every_table_is_gone(recorded: Recorded, tmp_path: Path) -> None:
    """Runs last: stops the worker and deletes its data directory and every changelog topic."""
    worker = recorded.worker
    live = {job_id: state for job_id, state in latest_by_key(worker.read(worker.topic("job-states")), "job_state").items() if state}
    worker.stop()
    remove_tree(worker.data_dir)
    changelogs = [
        worker.topic("job-states"),
        worker.topic("job-specs"),
        *(worker.changelog(table) for table in ("client-ids", "scheduler-index")),
    ]
    asyncio.run(delete_topics(worker, [*changelogs, f"{worker.app_id}-job-index-changelog"]))

    done = flotilla(worker, "rebuild", "--into", str(tmp_path / "drill"))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "nothing to compare with" in done.stderr and "not compared: no live tables" in done.stdout
    table = RocksTable(tmp_path / "drill" / "jobs")
    try:
        rebuilt = {job_id: decode("job_state", raw) for job_id, raw in table.items()}
    finally:
        table.close()
    assert set(rebuilt) == set(live) and len(rebuilt) == len(recorded.jobs) + 5
    assert {job_id: job["state"] for job_id, job in rebuilt.items()} == {job_id: job["state"] for job_id, job in live.items()}
    assert rebuilt == live


async def delete_topics(worker: Worker, names: list[str]) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=worker.bootstrap)
    await admin.start()
    try:
        existing = set(await admin.list_topics())
        missing = [name for name in names if name not in existing]
        assert worker.topic("job-states") not in missing, missing
        await admin.delete_topics([name for name in names if name in existing])
    finally:
        await admin.close()
