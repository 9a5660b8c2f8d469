"""Control-plane workers as real subprocesses for integration tests, and waiting on what they do.

Each worker gets its own topic prefix and app id (`new_worker`), so tests sharing one broker never
see each other's topics, consumer groups or changelogs. Every worker made is kept in `STARTED`, so
the fixtures can print the tail of each worker's log when a test fails.
"""

from __future__ import annotations

import itertools
import os
import re
import shutil
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pytest
import yaml

from ops.broker import EmbeddedBroker, free_port
from ops.worker import WorkerProcess
from schemas.codec import decode
from streams.client.rest import Client
from tests.integration.log import Record, committed_offset, latest_by_key, produce, read_topic

ROOT = Path(__file__).resolve().parents[2]
HEALTH_TIMEOUT_S = 90.0
T = TypeVar("T")

STARTED: list[Worker] = []  # every worker of the session, for log tails on failure


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
            from streams.config import Settings
            from streams.plane import build_plane

            plane = build_plane(Settings(broker=self.broker.url, app_id=self.app_id, topic_prefix=self.prefix))
            tables = {"jobs": plane.jobs.table, "client-ids": plane.client_ids, "scheduler-index": plane.scheduler_index}
            found = {**tables, "job-index": plane.job_index.table}[table]
            self._changelogs[table] = found.changelog_topic.get_topic_name()
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
            # Static membership: a restarted worker takes its partitions back at once (unique per data directory).
            FLOTILLA_GROUP_INSTANCE_ID=f"{self.app_id}-{self.data_dir.name}",
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

    def job_specs(self) -> dict[str, dict[str, Any]]:
        """The `job-specs` topic, each job's spec by job id."""
        return {k: v for k, v in latest_by_key(self.read(self.topic("job-specs")), "job_submitted").items() if v}

    def jobs_changelog(self) -> dict[str, dict[str, Any]]:
        """The `jobs` table as its changelog holds it: latest value per job id."""
        return {k: v for k, v in latest_by_key(self.read(self.changelog("jobs")), "job_state").items() if v}

    def rejections(self) -> list[dict[str, Any]]:
        return [decode("rejection", r.value) for r in self.read(self.topic("rejected")) if r.value is not None]

    def committed(self, name: str) -> tuple[int | None, int]:
        """(this worker's committed offset on topic ``name``, the topic's end offset); partition 0."""
        return committed_offset(self.bootstrap, self.app_id, self.topic(name))

    def produce(self, name: str, messages: Sequence[tuple[bytes | None, bytes | None]]) -> None:
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
    STARTED.append(worker)
    return worker


def scheduler_config(directory: Path, document: dict[str, Any]) -> dict[str, str]:
    """The FLOTILLA_* setting that gives a worker ``document`` as its scheduler configuration file."""
    path = directory / "scheduler.yaml"
    path.write_text(yaml.safe_dump(document))
    return {"FLOTILLA_SCHEDULER_CONFIG": str(path)}


def expiring_after(seconds: float, **scheduling: Any) -> dict[str, Any]:
    """A scheduler configuration whose executors are stale, and their leases expire, after ``seconds``."""
    return {"executorTimeout": f"{seconds:g}s", "scheduling": {"executorTimeout": f"{seconds:g}s", **scheduling}}


@contextmanager
def running_worker(
    broker: EmbeddedBroker, tmp_path_factory: pytest.TempPathFactory, label: str, config: dict[str, Any] | None = None, **env: str
) -> Iterator[Worker]:
    """A started worker with a scheduler configuration (``config``) and more FLOTILLA_* settings (``env``), stopped on leaving."""
    directory = tmp_path_factory.mktemp(label)
    started = new_worker(broker, directory, label)
    if config is not None:
        started.extra_env.update(scheduler_config(directory, config))
    started.extra_env.update(env)
    try:
        yield started.start()
    finally:
        started.stop()


def remove_tree(path: Path) -> None:
    shutil.rmtree(path)
    assert not path.exists()
