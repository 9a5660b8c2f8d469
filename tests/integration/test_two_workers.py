"""Two workers in one group share the partitions, and a queue created at run time through one of
them reaches the other: both answer for it and both ingest its submissions. The job query API
stays correct with both: each worker lists and counts the jobs of the partitions it holds, says
which, and their answers together are every job, each once."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from aiokafka.partitioner import DefaultPartitioner

from ops.broker import EmbeddedBroker
from streams.client.rest import JobPage
from tests.integration.helpers import call, create_queue, item, submission, submit_record
from tests.integration.workers import STARTED, Worker, poll

pytestmark = pytest.mark.integration

# Queue names the producer's partitioner (murmur2, as Kafka's) puts on different partitions of two,
# so each worker ingests one of them.
QUEUES = ("q-a", "q-b")


def test_queue_created_at_run_time_reaches_every_worker(broker: EmbeddedBroker, tmp_path: Path) -> None:
    assert {DefaultPartitioner()(q.encode(), [0, 1], [0, 1]) for q in QUEUES} == {0, 1}
    assert {DefaultPartitioner()(f"{q}/two".encode(), [0, 1], [0, 1]) for q in QUEUES} == {0, 1}  # events, jobs
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

                def served(w: Worker = worker, n: str = name) -> bool:
                    return call(w.client, "GET", f"/api/v1/queues/{n}")[0] == 200

                poll(served, 30, f"queue {name} on worker {worker.web_port}")

        records = [submit_record(name, "two", [item(client_id=f"{name}-{i}") for i in range(10)]) for name in QUEUES]
        workers[1].produce("submissions", [submission(record) for record in records])
        states = poll(lambda: s if len(s := workers[0].job_states()) == 20 else None, 60, "20 jobs on job-states")
        assert sorted({s["queue"] for s in states.values()}) == list(QUEUES)
        assert all(s["state"] == "queued" for s in states.values())
        assert workers[0].rejections() == []

        def answers() -> list[JobPage] | None:
            pages = [w.client.list_jobs(queues=QUEUES, limit=1000) for w in workers]
            covered = sorted(p for page in pages for p in page.partitions)
            return pages if covered == [0, 1] and sum(len(page.jobs) for page in pages) == 20 else None

        pages = poll(answers, 60, "the two workers' job lists to cover both partitions and every job")
        assert all(page.partitions_total == 2 and len(page.partitions) == 1 and page.next_cursor is None for page in pages)
        listed = [job.job_id for page in pages for job in page.jobs]
        assert sorted(listed) == sorted(states) and len(set(listed)) == 20
        for page in pages:  # one queue's job set per partition: a worker lists the jobs it holds, not the other's
            assert len({job.queue for job in page.jobs}) == 1 and len(page.jobs) == 10
        counts = [group for w in workers for group in w.client.job_counts(group_by="queue", queues=QUEUES)]
        assert sorted((g.queue, g.counts["queued"]) for g in counts if g.counts["queued"]) == [(q, 10) for q in QUEUES]
    finally:
        for worker in workers:
            worker.stop()
