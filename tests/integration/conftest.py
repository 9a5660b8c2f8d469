"""Fixtures for integration tests: the real embedded broker, real control-plane workers, log readers.

One Tansu broker serves the whole session. Each test module runs its own worker subprocess
(`python -m streams.client.cli worker`) with its own topic prefix and app id, so modules never see each
other's topics, consumer groups or changelogs. Workers log to files; when a test fails, the tail of
every worker log is printed with it.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import re
import shutil
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from ops.broker import EmbeddedBroker, free_port
from ops.worker import WorkerProcess
from schemas.codec import decode
from streams.client.rest import Client

ROOT = Path(__file__).resolve().parents[2]
HEALTH_TIMEOUT_S = 90.0
T = TypeVar("T")

_STARTED: list[Worker] = []  # every worker of the session, for log tails on failure


# --------------------------------------------------------------------------- waiting


def poll(check: Callable[[], T | None], timeout: float, what: str, interval: float = 0.25) -> T:
    """Call ``check`` until it returns something truthy; fail with ``what`` at the deadline."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        last = check()
        if last:
            return last
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


# --------------------------------------------------------------------------- the log


@dataclass(frozen=True)
class Record:
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None


async def _read_all(bootstrap: str, topic: str, timeout: float) -> list[Record]:
    """Every record of ``topic`` from the earliest offset up to its end at call time.

    The end is the high watermark of the fetch responses: Tansu answers ListOffsets(latest) with
    the base offset of the last record batch + 1, not the log end offset (see test_recovery.py).
    """
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        max_partition_fetch_bytes=4 * 1024 * 1024,
        fetch_max_bytes=16 * 1024 * 1024,
    )
    await consumer.start()
    try:
        partitions = consumer.partitions_for_topic(topic)
        if not partitions:
            await consumer._client.force_metadata_update()  # noqa: SLF001 - the topic may be brand new
            partitions = consumer.partitions_for_topic(topic) or set()
        assigned = [TopicPartition(topic, p) for p in sorted(partitions)]
        if not assigned:
            return []
        consumer.assign(assigned)
        await consumer.seek_to_beginning(*assigned)
        ends = await consumer.end_offsets(assigned)
        records: list[Record] = []
        deadline = asyncio.get_running_loop().time() + timeout
        pending = {tp for tp in assigned if ends[tp] > 0}
        while pending:
            if asyncio.get_running_loop().time() > deadline:
                raise AssertionError(f"reading {topic}: did not reach the end offsets {ends} within {timeout:.0f}s")
            batches = await consumer.getmany(*pending, timeout_ms=500)
            for tp, messages in batches.items():
                records += [Record(m.partition, m.offset, m.key, m.value) for m in messages]
            for tp in list(pending):
                highwater = consumer.highwater(tp)
                if highwater is not None and await consumer.position(tp) >= max(highwater, ends[tp]):
                    pending.discard(tp)
        return records
    finally:
        await consumer.stop()


async def _committed(bootstrap: str, group: str, topic: str) -> tuple[int | None, int]:
    """(offset committed by ``group`` on partition 0 of ``topic``, the partition's true end)."""
    tp = TopicPartition(topic, 0)
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False)
    await consumer.start()
    try:
        consumer.assign([tp])  # manual assignment: an OffsetFetch, never a group join
        committed = await consumer.committed(tp)
    finally:
        await consumer.stop()
    records = await _read_all(bootstrap, topic, 30.0)
    return committed, max((r.offset for r in records), default=-1) + 1


def read_topic(bootstrap: str, topic: str, timeout: float = 30.0) -> list[Record]:
    return asyncio.run(_read_all(bootstrap, topic, timeout))


def latest_by_key(records: list[Record], schema: str) -> dict[str, dict[str, Any] | None]:
    """Compacted-topic view: the last value per UTF-8 key, decoded (``None`` for a tombstone)."""
    latest: dict[str, bytes | None] = {}
    for record in sorted(records, key=lambda r: (r.partition, r.offset)):
        latest[(record.key or b"").decode()] = record.value
    return {key: None if value is None else decode(schema, value) for key, value in latest.items()}


async def _produce(bootstrap: str, topic: str, messages: list[tuple[bytes | None, bytes | None]]) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, max_request_size=4 * 1024 * 1024, linger_ms=5)
    await producer.start()
    try:
        futures = [await producer.send(topic, key=key, value=value) for key, value in messages]
        await producer.flush()
        for future in futures:
            await future
    finally:
        await producer.stop()


def produce(bootstrap: str, topic: str, messages: list[tuple[bytes | None, bytes | None]]) -> None:
    """Produce ``(key, value)`` pairs in order and wait until the broker acknowledged all of them."""
    asyncio.run(_produce(bootstrap, topic, messages))


# --------------------------------------------------------------------------- the broker


@pytest.fixture(scope="session")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedBroker]:
    log = tmp_path_factory.mktemp("broker") / "broker.log"
    embedded = EmbeddedBroker(log_path=log).start()
    try:
        yield embedded
    finally:
        embedded.stop()


# --------------------------------------------------------------------------- workers


@dataclass
class Worker:
    """One control-plane worker as a real subprocess, restartable with the same identity."""

    broker: EmbeddedBroker
    prefix: str
    app_id: str
    data_dir: Path
    log_path: Path
    web_port: int = field(default_factory=free_port)
    grpc_port: int = field(default_factory=free_port)
    partitions: int = 1
    # More FLOTILLA_* settings, e.g. a short executor timeout.
    extra_env: dict[str, str] = field(default_factory=dict)
    starts: int = 0
    _process: WorkerProcess | None = field(default=None, repr=False)
    _changelogs: dict[str, str] = field(default_factory=dict, repr=False)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.web_port}"

    @property
    def grpc_target(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    @property
    def client(self) -> Client:
        return Client(self.url, timeout_s=60.0)

    @property
    def bootstrap(self) -> str:
        return self.broker.bootstrap

    def topic(self, name: str) -> str:
        return f"{self.prefix}{name}"

    def changelog(self, table: str) -> str:
        """The changelog topic of ``table`` as the product's own app declares it."""
        if table not in self._changelogs:
            from streams.app import create_control_plane
            from streams.config import Settings

            plane = create_control_plane(Settings(broker=self.broker.url, app_id=self.app_id, topic_prefix=self.prefix))
            found = {"jobs": plane.jobs, "client-ids": plane.client_ids}[table]
            self._changelogs[table] = getattr(found, "table", found).changelog_topic.get_topic_name()
        return self._changelogs[table]

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("FLOTILLA_")}
        env.update(
            FLOTILLA_BROKER=self.broker.url,
            FLOTILLA_WEB_PORT=str(self.web_port),
            FLOTILLA_GRPC_PORT=str(self.grpc_port),
            FLOTILLA_DATA_DIR=str(self.data_dir),
            FLOTILLA_TOPIC_PREFIX=self.prefix,
            FLOTILLA_APP_ID=self.app_id,
            FLOTILLA_PARTITIONS=str(self.partitions),
            PYTHONUNBUFFERED="1",
        )
        env.update(self.extra_env)
        return env

    def start(self, timeout: float = HEALTH_TIMEOUT_S) -> Worker:
        assert not (self._process and self._process.running), "worker already running"
        self.starts += 1
        with open(self.log_path, "ab") as log:
            log.write(f"\n===== start #{self.starts} of worker {self.app_id} =====\n".encode())
        self._process = WorkerProcess(env=self.env(), log_path=self.log_path, web_port=self.web_port)
        self._process.start(timeout)
        return self

    @property
    def process(self) -> subprocess.Popen[bytes] | None:
        return self._process.process if self._process else None

    def kill(self) -> None:
        assert self._process is not None
        self._process.kill()

    def stop(self, grace_s: float = 15.0) -> None:
        if self._process is not None:
            self._process.stop(grace_s)

    def tail(self, lines: int = 60) -> str:
        if self._process is None:
            return f"(worker {self.app_id} never started)"
        return self._process.log_tail(lines)

    # ----- the log as this worker names it

    def read(self, name: str, timeout: float = 30.0) -> list[Record]:
        return read_topic(self.bootstrap, name, timeout)

    def job_states(self) -> dict[str, dict[str, Any]]:
        """The `job-states` topic, latest state per job id."""
        return {k: v for k, v in latest_by_key(self.read(self.topic("job-states")), "job_state").items() if v}

    def jobs_changelog(self) -> dict[str, dict[str, Any]]:
        """The `jobs` table as its changelog holds it: latest value per job id."""
        return {k: v for k, v in latest_by_key(self.read(self.changelog("jobs")), "job_state").items() if v}

    def rejections(self) -> list[dict[str, Any]]:
        return [decode("rejection", r.value) for r in self.read(self.topic("rejected")) if r.value is not None]

    def committed(self, name: str) -> tuple[int | None, int]:
        """(this worker's committed offset on topic ``name``, the topic's end offset); partition 0."""
        return asyncio.run(_committed(self.bootstrap, self.app_id, self.topic(name)))

    def produce(self, name: str, messages: list[tuple[bytes | None, bytes | None]]) -> None:
        produce(self.bootstrap, self.topic(name), messages)


_ids = itertools.count()


def new_worker(broker: EmbeddedBroker, tmp_path: Path, label: str) -> Worker:
    """A worker with a prefix and app id no other worker of this broker uses."""
    unique = f"{re.sub(r'[^a-z0-9]+', '-', label.lower()).strip('-')}-{uuid.uuid4().hex[:8]}-{next(_ids)}"
    tmp_path.mkdir(parents=True, exist_ok=True)
    worker = Worker(
        broker=broker,
        prefix=f"it-{unique}.",
        app_id=f"it-{unique}",
        data_dir=tmp_path / "data",
        log_path=tmp_path / "worker.log",
    )
    _STARTED.append(worker)
    return worker


@contextmanager
def running_worker(broker: EmbeddedBroker, tmp_path_factory: pytest.TempPathFactory, label: str, **env: str) -> Iterator[Worker]:
    """A started worker with more FLOTILLA_* settings (``env``), stopped on leaving."""
    started = new_worker(broker, tmp_path_factory.mktemp(label), label)
    started.extra_env.update(env)
    try:
        yield started.start()
    finally:
        started.stop()


@pytest.fixture(scope="module")
def worker(broker: EmbeddedBroker, tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[Worker]:
    """One worker shared by the tests of a module."""
    with running_worker(broker, tmp_path_factory, request.module.__name__.rsplit(".", 1)[-1]) as started:
        yield started


@pytest.fixture(autouse=True)
def _worker_logs_on_failure(request: pytest.FixtureRequest) -> Iterator[None]:
    yield
    report = getattr(request.node, "rep_call", None)
    if report is not None and report.failed:
        for started in _STARTED:
            print(started.tail())


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()
    if report.when == "call":
        item.rep_call = report  # type: ignore[attr-defined]


def remove_tree(path: Path) -> None:
    shutil.rmtree(path)
    assert not path.exists()
