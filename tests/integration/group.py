"""Several control-plane workers in one consumer group, as real subprocesses: started, grown, killed.

They share the app id and topic prefix (one group, one set of topics) and each has its own data
directory, web port and gRPC port, as replicas of a StatefulSet would.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from ops.broker import EmbeddedBroker
from streams.domain.events import sequence_key
from streams.domain.partitioning import key_hash, partition_for
from tests.integration.helpers import call
from tests.integration.workers import STARTED, Worker, poll

# A rebalance after a join or a kill takes up to the session timeout (10 s) plus table recovery.
SETTLE_TIMEOUT_S = 90.0


@dataclass
class Group:
    broker: EmbeddedBroker
    directory: Path
    partitions: int
    label: str
    extra_env: dict[str, str] = field(default_factory=dict)
    workers: list[Worker] = field(default_factory=list)
    unique: str = field(default_factory=lambda: uuid.uuid4().hex[:8])

    @property
    def app_id(self) -> str:
        return f"it-{re.sub(r'[^a-z0-9]+', '-', self.label.lower())}-{self.unique}"

    def add(self) -> Worker:
        """Start one more worker in the group and wait until every live worker answers for every partition."""
        number = len(self.workers)
        self.directory.mkdir(parents=True, exist_ok=True)
        worker = Worker(
            broker=self.broker,
            prefix=f"{self.app_id}.",
            app_id=self.app_id,
            data_dir=self.directory / f"data-{number}",
            log_path=self.directory / f"worker-{number}.log",
            partitions=self.partitions,
            extra_env=dict(self.extra_env),
        )
        STARTED.append(worker)
        self.workers.append(worker)
        worker.start()
        self.settle()
        return worker

    def live(self) -> list[Worker]:
        return [worker for worker in self.workers if worker.process is not None and worker.process.poll() is None]

    def settle(self, timeout: float = SETTLE_TIMEOUT_S) -> None:
        """Wait until every live worker is healthy and a job listing through each covers every partition."""

        def settled() -> bool:
            for worker in self.live():
                if call(worker.client, "GET", "/health")[0] != 200:
                    return False
                status, page = call(worker.client, "GET", "/api/v1/jobs?limit=1")
                if status != 200 or page["partitions"] != list(range(self.partitions)):
                    return False
            return True

        poll(settled, timeout, f"{len(self.live())} workers answering for {self.partitions} partitions", 0.5)

    def scheduler(self) -> Worker:
        """The worker that schedules, as the cluster view (answered by it, through any worker) names it."""
        status, cluster = call(self.live()[0].client, "GET", "/api/v1/cluster")
        assert status == 200 and cluster["scheduler_here"], cluster
        return next(worker for worker in self.workers if worker.url == cluster["worker"])

    def stop(self) -> None:
        for worker in self.workers:
            worker.stop()


def job_set_per_partition(queue: str, partitions: int, prefix: str = "set") -> dict[int, str]:
    """One job set name of ``queue`` for each partition, so that a test's jobs are spread over every worker."""
    found: dict[int, str] = {}
    number = 0
    while len(found) < partitions:
        name = f"{prefix}-{number}"
        found.setdefault(partition_for(key_hash(sequence_key(queue, name).encode()), partitions), name)
        number += 1
    return dict(sorted(found.items()))
