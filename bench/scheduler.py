"""Scheduler benchmarks: one JSON line per case on stdout (`case`, `nodes`, `jobs`, `queues`,
`seconds`, `peak_mib` and the conditions), a readable summary of each on stderr; not a timed test.

Cases (after Armada's Go benchmarks): a full cycle that evicts and re-schedules 32,000 running
1-cpu jobs on 1,000 32-cpu nodes (10 queues); one 32,000-member gang on 1,000 nodes; one job on
each of 10,000 nearly full nodes; one cycle over 1,000,000 queued jobs (10 queues, 1,000 nodes); a
cycle of `pipeline.py`'s stream (`stream_cycle`: 1,000 32-cpu / 256Gi nodes of two executors, 50,000
running and 20,000 queued 250m / 1Gi jobs of one queue in Armada's default, non-preemptible class, the
worker's default configuration, the running jobs' states kept from the cycle before as the worker keeps them);
and idle cycles (`idle_cycle`: the same nodes and configuration, 600 such jobs running and 10 new ones queued
at each cycle; each cycle runs the jobs the cycle before leased, as the worker's index hands them on, and the
10 that ran longest end): the cycle's fixed cost, which sets the early ticks' gap and so the idle
submit-to-lease latency. Inputs are built outside the timing: once per case, `idle_cycle`'s once per cycle
from the cycle before. `seconds` is the median of `--runs` timed `schedule()` calls, `range` their minimum
and maximum (other processes share the machine, so a single figure is noise); garbage left by building the
inputs or by the previous run is collected before each call so that no run pays for another's.
`cpu_seconds` (median process time of the same calls) is less disturbed by the other processes and helps
compare changes; the targets are wall-clock. `peak_mib` is the peak memory allocated inside one call
(tracemalloc, in a separate run so that tracing does not distort the timing); `process_max_rss_mib` is the
whole process's peak resident memory so far, inputs included (the million-job input alone is ~560 MiB).
Each line also gives the conditions: nodes, jobs, queues, usable cores, Python version.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import resource
import statistics
import sys
import time
import tracemalloc
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

# Runnable as `python bench/scheduler.py` from anywhere: the repository root holds `streams`.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from streams.scheduler.algorithm.model import (
    CycleInput,
    CycleResult,
    Job,
    Node,
    NodeAllocation,
    PriorityClass,
    Queue,
    RunningJob,
    SchedulingConfig,
)
from streams.scheduler.algorithm.preempting import schedule
from streams.scheduler.algorithm.state import RunningStates
from streams.scheduler.config import CycleConfig

CPU = 1000
GI = 2**30 * 1000
CLASSES = {"preemptible": PriorityClass("preemptible", 1000, True), "pinned": PriorityClass("pinned", 2000, False)}
CONFIG = SchedulingConfig(priority_classes=CLASSES, protected_fraction_of_fair_share=0.0, enable_prefer_large_job_ordering=True)
QUEUES = tuple(Queue(f"queue-{i}") for i in range(10))


def _nodes(count: int, cpu: int = 32, held_cpu: int = 0) -> tuple[Node, ...]:
    held = (NodeAllocation(2000, {"cpu": held_cpu * CPU, "memory": held_cpu * 8 * GI}),) if held_cpu else ()
    return tuple(Node(f"node-{i:05d}", {"cpu": cpu * CPU, "memory": cpu * 8 * GI}, allocated=held) for i in range(count))


def _job(i: int, queue: str, **kwargs: object) -> Job:
    return Job(f"job-{i:07d}", queue, "preemptible", {"cpu": CPU, "memory": 4 * GI}, submit_time=float(i), **kwargs)  # type: ignore[arg-type]


def full_cycle() -> CycleInput:
    nodes = _nodes(1000)
    running = tuple(RunningJob(_job(i, QUEUES[i % 10].name), nodes[i // 32].id, 1000) for i in range(32_000))
    return CycleInput(queues=QUEUES, nodes=nodes, running=running, queued=(), now=0.0)


def gang_32k() -> CycleInput:
    annotations = {"armadaproject.io/gangId": "big", "armadaproject.io/gangCardinality": "32000"}
    queued = tuple(_job(i, "queue-0", annotations=annotations) for i in range(32_000))
    return CycleInput(queues=QUEUES[:1], nodes=_nodes(1000), running=(), queued=queued, now=0.0)


def nodes_10k() -> CycleInput:
    queued = tuple(_job(i, QUEUES[i % 10].name) for i in range(10_000))
    return CycleInput(queues=QUEUES, nodes=_nodes(10_000, held_cpu=31), running=(), queued=queued, now=0.0)


def queued_1m() -> CycleInput:
    queued = tuple(_job(i, QUEUES[i % 10].name) for i in range(1_000_000))
    return CycleInput(queues=QUEUES, nodes=_nodes(1000), running=(), queued=queued, now=0.0)


def _stream_nodes() -> tuple[Node, ...]:
    return tuple(Node(f"ex{i % 2}-n{i:04d}", {"cpu": 32 * CPU, "memory": 256 * GI}, executor=f"ex{i % 2}") for i in range(1000))


# One requests mapping for every job, as the worker's jobs share theirs (`streams.domain.shared`).
STREAM_REQUEST = {"cpu": CPU // 4, "memory": GI}


def _stream_job(i: int) -> Job:
    return Job(f"job-{i:07d}", "queue-0", "armada-default", STREAM_REQUEST, submit_time=float(i))


def stream_cycle() -> CycleInput:
    nodes = _stream_nodes()
    running = tuple(RunningJob(_stream_job(i), nodes[i * 7 % 1000].id, 1000) for i in range(50_000))
    queued = tuple(_stream_job(50_000 + i) for i in range(20_000))
    return CycleInput(queues=QUEUES[:1], nodes=nodes, running=running, queued=queued, now=0.0, carried=RunningStates())


# A case's inputs for the next cycle, given the result of the cycle before (None before the first).
Step = Callable[[CycleResult | None], CycleInput]


def idle_cycle() -> Step:
    nodes = _stream_nodes()
    first = CycleInput(
        queues=QUEUES[:1],
        nodes=nodes,
        running=tuple(RunningJob(_stream_job(i), nodes[i * 7 % 1000].id, 1000) for i in range(600)),
        queued=tuple(_stream_job(600 + i) for i in range(10)),
        now=0.0,
        carried=RunningStates(),
    )
    last, made = [first], [610]

    def step(result: CycleResult | None) -> CycleInput:
        before = last[0]
        if result is None:
            return before
        queued = {job.id: job for job in before.queued}
        started = tuple(RunningJob(queued.pop(s.job_id), s.node, s.priority, before.now) for s in result.scheduled)
        fresh = tuple(_stream_job(made[0] + i) for i in range(10))
        made[0] += 10
        last[0] = replace(before, running=before.running[10:] + started, queued=(*queued.values(), *fresh), now=before.now + 0.1)
        return last[0]

    return step


def _same(make: Callable[[], CycleInput]) -> Step:
    inputs = make()
    return lambda _: inputs


CASES: dict[str, Callable[[], Step]] = {
    "full_cycle": lambda: _same(full_cycle),
    "gang_32k": lambda: _same(gang_32k),
    "nodes_10k": lambda: _same(nodes_10k),
    "queued_1m": lambda: _same(queued_1m),
    "stream_cycle": lambda: _same(stream_cycle),
    "idle_cycle": idle_cycle,
}
# The cases scheduled with a configuration of their own.
CONFIGS = {"stream_cycle": CycleConfig().scheduling, "idle_cycle": CycleConfig().scheduling}


def measure(name: str, runs: int) -> dict[str, object]:
    step, config = CASES[name](), CONFIGS.get(name, CONFIG)
    inputs = step(None)
    result = None
    if inputs.carried is not None:
        result = schedule(inputs, config)  # what the cycle before kept, as it kept it
        inputs = step(result)
    times, cpu_times = [], []
    for _ in range(runs):
        gc.collect()
        start, cpu_start = time.perf_counter(), time.process_time()
        result = schedule(inputs, config)
        times.append(time.perf_counter() - start)
        cpu_times.append(time.process_time() - cpu_start)
        inputs = step(result)
    del result
    gc.collect()
    tracemalloc.start()
    schedule(inputs, config)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return {
        "case": name,
        "nodes": len(inputs.nodes),
        "jobs": len(inputs.running) + len(inputs.queued),
        "queues": len(inputs.queues),
        "cores": len(os.sched_getaffinity(0)),
        "python": platform.python_version(),
        "runs": runs,
        "seconds": round(statistics.median(times), 4),
        "range": [round(min(times), 4), round(max(times), 4)],
        "cpu_seconds": round(statistics.median(cpu_times), 4),
        "peak_mib": round(peak / 2**20, 1),
        "process_max_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("cases", nargs="*", metavar="CASE", help=f"any of {', '.join(CASES)} (default: all)")
    parser.add_argument("--runs", type=int, default=5, help="timed calls per case (default: 5)")
    args = parser.parse_args()
    names = args.cases or list(CASES)
    unknown = [n for n in names if n not in CASES]
    if unknown:
        parser.error(f"unknown cases {unknown}")
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    for name in names:
        r = measure(name, args.runs)
        # A readable summary on stderr; stdout carries one JSON line per case, as scripts read it.
        print(
            f"{name}: {r['nodes']} nodes, {r['jobs']} jobs, {r['queues']} queues, {r['cores']} cores, "
            f"Python {r['python']}: {r['seconds']} s median of {r['runs']} {r['range']}, cpu {r['cpu_seconds']} s, "
            f"peak {r['peak_mib']} MiB (process {r['process_max_rss_mib']} MiB)",
            file=sys.stderr,
            flush=True,
        )
        print(json.dumps(r), flush=True)


if __name__ == "__main__":
    main()
