"""Index memory benchmark: bytes the scheduler's in-memory index holds per queued and per running job.

No broker and no worker: the index is filled as the scheduling agent fills it, from feed rows
(`feed.delta_from_row`, so names and shapes are shared as in a worker), and one cycle runs over it with
one executor whose nodes are all cordoned, so the cycle builds what a cycle keeps per job (the
algorithm's Job of every queued job, the RunningJob of every running one) and leases nothing.
tracemalloc counts what is allocated from before the first row is decoded to after the cycle, with
the rows' text freed; the executor's report and the cycle's outcome are
dropped before the count, so what remains is the index. Two passes, one of queued jobs and one of
running jobs (leased by an earlier cycle and confirmed by the fold), each over `--jobs` jobs of 1 cpu /
1Gi in 10 queues and 100 job sets, ids as ingest makes them (ULIDs).

Usage: .venv/bin/python bench/index_memory.py [--jobs 100000]
"""

from __future__ import annotations

import argparse
import gc
import json
import platform
import random
import tracemalloc
from typing import Any

from streams.domain.ids import new_id, run_id_for
from streams.scheduler import feed
from streams.scheduler.config import CycleConfig
from streams.scheduler.cycle import run_cycle
from streams.scheduler.feed import ExecutorState, NodeState, QueueInfo, Tick
from streams.scheduler.index import SchedulerIndex

QUEUES = 10
JOB_SETS = 100
NODES = 100
SPEC = {"pod_spec": {"containers": [{"resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}]}}


def rows(jobs: int, running: bool) -> list[str]:
    """Feed rows (their JSON text) of ``jobs`` jobs, queued or running on the executor's nodes, as the fold forwards them."""
    rng = random.Random(1)
    out = []
    for i in range(jobs):
        job_id = new_id(1_700_000_000_000 + i, rng)
        job: dict[str, Any] = {
            "job_id": job_id,
            "queue": f"bench-{i % QUEUES}",
            "job_set_id": f"set-{i % JOB_SETS}",
            "state": "running" if running else "queued",
            "priority_class": "armada-default",
            "priority": 0.0,
            "submitted": 1_700_000_000_000 + i,
            "runs": [],
            "cancel_requested": False,
            "preempt_requested": False,
            "spec": SPEC,
        }
        if running:
            job["runs"] = [
                {
                    "run_id": run_id_for(job_id, 1),
                    "executor": "ex",
                    "node": f"node-{i % NODES}",
                    "state": "running",
                    "leased_at": 1_700_000_100_000,
                }
            ]
        out.append(feed.compact_json(feed.job_row(job)))
    return out


def measure(jobs: int, running: bool) -> dict[str, float]:
    batch = rows(jobs, running)
    # The executor holds every running job's run: none is taken back.
    runs_held = {run_id_for(json.loads(row)[0], 1): json.loads(row)[0] for row in batch} if running else {}
    nodes = tuple(NodeState(f"node-{i}", {"cpu": 32_000, "memory": 256 * 2**30}, unschedulable=True) for i in range(NODES))
    report = ExecutorState("ex", "default", 1_700_000_200_000, nodes, runs_held, tuple(runs_held))
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    index = SchedulerIndex()
    for row in batch:
        index.apply(feed.delta_from_row(json.loads(row)))
    del batch
    index.apply(report)
    queues = tuple(QueueInfo(f"bench-{q}", 1.0) for q in range(QUEUES))
    outcome = run_cycle(index, Tick(1_700_000_200_500, queues), 1, CycleConfig())
    assert (outcome.leased, outcome.requeued, outcome.ended, outcome.commands) == (0, 0, 0, []) and len(index.jobs) == jobs
    del outcome, report, runs_held
    index.executors.clear()
    gc.collect()
    held = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    return {"bytes_per_job": held / jobs, "mib": held / 2**20}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=100_000)
    args = parser.parse_args()
    print(
        f"conditions: {args.jobs:,} jobs per pass, {QUEUES} queues, {JOB_SETS} job sets, {NODES} cordoned nodes, "
        f"Python {platform.python_version()}"
    )
    queued = measure(args.jobs, running=False)
    print(f"queued:  {queued['bytes_per_job']:,.0f} bytes per job ({queued['mib']:,.1f} MiB)")
    running = measure(args.jobs, running=True)
    print(f"running: {running['bytes_per_job']:,.0f} bytes per job ({running['mib']:,.1f} MiB)")
    figures = {"queued_bytes_per_job": round(queued["bytes_per_job"]), "running_bytes_per_job": round(running["bytes_per_job"])}
    print(json.dumps({"jobs": args.jobs, **figures}))


if __name__ == "__main__":
    main()
