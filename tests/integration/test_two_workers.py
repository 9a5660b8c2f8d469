"""Two workers in one group share the partitions, and a queue created at run time through one of
them reaches the other: both answer for it and both ingest its submissions."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from aiokafka.partitioner import DefaultPartitioner

from ops.broker import EmbeddedBroker
from tests.integration.helpers import call, create_queue, item, submission, submit_record
from tests.integration.workers import STARTED, Worker, poll

pytestmark = pytest.mark.integration

# Queue names the producer's partitioner (murmur2, as Kafka's) puts on different partitions of two,
# so each worker ingests one of them.
QUEUES = ("q-a", "q-b")


def test_queue_created_at_run_time_reaches_every_worker(broker: EmbeddedBroker, tmp_path: Path) -> None:
    assert {DefaultPartitioner()(q.encode(), [0, 1], [0, 1]) for q in QUEUES} == {0, 1}
    unique = uuid.uuid4().hex[:8]
    workers = [
        Worker(
            broker=broker,
            prefix=f"it-two-{unique}.",
            app_id=f"it-two-{unique}",
            data_dir=tmp_path / f"data-{i}",
            log_path=tmp_path / f"worker-{i}.log",
            partitions=2,
        )
        for i in range(2)
    ]
    STARTED.extend(workers)
    try:
        for worker in workers:
            worker.start()
        # the second worker's join rebalances the first: wait until both serve again
        poll(lambda: all(call(w.client, "GET", "/health")[0] == 200 for w in workers), 90, "both workers healthy")

        for name in QUEUES:
            create_queue(workers[0].client, name)
        for worker in workers:
            for name in QUEUES:
                poll(
                    lambda w=worker, n=name: call(w.client, "GET", f"/api/v1/queues/{n}")[0] == 200,
                    30,
                    f"queue {name} on worker {worker.web_port}",
                )

        records = [submit_record(name, "two", [item(client_id=f"{name}-{i}") for i in range(10)]) for name in QUEUES]
        workers[1].produce("submissions", [submission(record) for record in records])
        states = poll(lambda: s if len(s := workers[0].job_states()) == 20 else None, 60, "20 jobs on job-states")
        assert sorted({s["queue"] for s in states.values()}) == list(QUEUES)
        assert all(s["state"] == "queued" for s in states.values())
        assert workers[0].rejections() == []
    finally:
        for worker in workers:
            worker.stop()
