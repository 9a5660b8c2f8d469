"""Job index memory benchmark: bytes the API's job query index holds per queued job, and what its queries cost.

No broker and no worker. `--jobs` queued jobs over 10 queues and 100 job sets, ids as ingest makes them
(ULIDs), submitted in requests of 100 jobs (one `events` record each, so the jobs of a request share
their event's position), ten jobs a millisecond. Two ways in, each measured with tracemalloc from before
the first job is decoded to after the last row is held, with the inputs freed:

- fold: each job state decoded from JSON (its own copy of every string, as the fold has it), its row
  made by `row_of` with its event's position and put into the index, as `JobIndexStore.write_pending`
  does;
- rebuild: every row decoded from its `job-index` table bytes and indexed at once (`JobIndex.of`), as a
  worker does after a rebalance.

"rows" is what the rows alone hold (a dict of job id -> row, as made by `row_of`); "lists" is the
rest: the sorted lists, their keys and the counts. Then, without tracemalloc, CPU µs per job of the
fold's puts and of a rebuild, and the median time of typical list queries (pages of 100) over the
fold's index.

Usage: .venv/bin/python bench/job_index_memory.py [--jobs 100000] [--rounds 25]
"""

from __future__ import annotations

import argparse
import gc
import json
import platform
import random
import statistics
import time
import tracemalloc
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from streams.domain.ids import new_id
from streams.domain.job_index import JobIndex, JobQuery, JobRow, decode_cursor, encode_cursor, merged_events, row_of

QUEUES = 10
JOB_SETS = 100
REQUEST = 100  # jobs per submit request: one `events` record
PER_MS = 10
START_MS = 1_700_000_000_000


def requests(jobs: int) -> list[tuple[int, str]]:
    """(offset on `events`, JSON of the request's job states) per submit request, as the fold has them."""
    rng = random.Random(1)
    out = []
    for offset, first in enumerate(range(0, jobs, REQUEST)):
        states = []
        for i in range(first, min(first + REQUEST, jobs)):
            created = START_MS + i // PER_MS
            states.append(
                {
                    "job_id": new_id(created, rng),
                    "queue": f"bench-{offset % QUEUES}",
                    "job_set_id": f"set-{offset % JOB_SETS}",
                    "state": "queued",
                    "priority": 1.0,
                    "priority_class": "armada-default",
                    "submitted": created,
                    "last_transition": created,
                    "runs": [],
                    "reason": None,
                    "cancel_requested": False,
                    "spec": {"labels": {}},
                }
            )
        out.append((offset, json.dumps(states)))
    return out


def decoded(request: str) -> list[dict[str, Any]]:
    states = json.loads(request)
    for state in states:
        state["last_transition"] = state["submitted"]  # one object in the fold's job state (streams.domain.jobs)
    return states


def traced(build: Callable[[], Any]) -> tuple[Any, int]:
    """What ``build`` returns and the bytes it holds once built."""
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    built = build()
    gc.collect()
    held = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    return built, held


def folded(batches: list[tuple[int, str]], put: bool) -> tuple[JobIndex | dict[str, JobRow], float]:
    """The index the fold's rows build (or, without ``put``, the rows alone by job id), and CPU s of the puts."""
    index = JobIndex()
    rows: dict[str, JobRow] = {}
    cpu = 0.0
    for offset, request in batches:
        position = (0, offset)
        made = [row_of(job, merged_events((), (position,))) for job in decoded(request)]
        if put:
            start = time.process_time()
            for row in made:
                index.put(row)
            cpu += time.process_time() - start
        else:
            rows.update((row.job_id, row) for row in made)
    return (index if put else rows), cpu


def median_us(call: Callable[[], Any], rounds: int) -> float:
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e6


def query_timings(index: JobIndex, rounds: int) -> dict[str, float]:
    def page(**fields: Any) -> Callable[[], Any]:
        query = JobQuery(limit=100, **fields)
        return lambda: index.query(query, lambda queue: True)

    tenth = JobQuery(queues=("bench-3",), limit=100)  # or the queue's last page, with fewer than 1,000 jobs
    for _ in range(9):
        after = index.query(tenth, lambda queue: True).next_after
        if after is None:
            break
        tenth = replace(tenth, after=decode_cursor(encode_cursor(after)))
    cases = {
        "queue_by_submitted": page(queues=("bench-3",)),
        "queue_tenth_page": lambda: index.query(tenth, lambda queue: True),
        "job_set": page(queues=("bench-3",), job_set="set-3"),
        "state_queued": page(states=("queued",)),
        "queue_by_priority_asc": page(queues=("bench-3",), sort="priority", descending=False),
        "queue_by_last_transition": page(queues=("bench-3",), sort="last_transition"),
        "job_set_by_priority": page(queues=("bench-3",), job_set="set-3", sort="priority"),
        "group_counts": lambda: index.group_counts("job_set", (), lambda queue: True),
    }
    return {name: median_us(call, rounds) for name, call in cases.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=25, help="timed calls per query (the median is printed)")
    args = parser.parse_args()
    print(
        f"conditions: {args.jobs:,} queued jobs, {QUEUES} queues, {JOB_SETS} job sets, requests of {REQUEST} jobs, "
        f"ULID ids, no labels, Python {platform.python_version()}"
    )
    batches = requests(args.jobs)
    (rows, _), rows_bytes = traced(lambda: folded(batches, put=False))
    assert isinstance(rows, dict) and len(rows) == args.jobs
    encoded = [(job_id.encode(), row.encode()) for job_id, row in rows.items()]  # as the table holds them
    del rows
    (index, _), fold_bytes = traced(lambda: folded(batches, put=True))
    rebuilt, rebuild_bytes = traced(lambda: JobIndex.of(JobRow.decode(key.decode(), raw) for key, raw in encoded))
    del index, rebuilt
    # Timed apart from tracemalloc, which slows every allocation.
    index, put_cpu = folded(batches, put=True)
    assert isinstance(index, JobIndex) and len(index.rows) == args.jobs
    start = time.process_time()
    JobIndex.of(JobRow.decode(key.decode(), raw) for key, raw in encoded)
    rebuild_cpu = time.process_time() - start
    per = {
        "rows_bytes_per_job": rows_bytes / args.jobs,
        "fold_bytes_per_job": fold_bytes / args.jobs,
        "fold_lists_bytes_per_job": (fold_bytes - rows_bytes) / args.jobs,
        "rebuild_bytes_per_job": rebuild_bytes / args.jobs,
    }
    print(f"rows alone:     {per['rows_bytes_per_job']:,.0f} bytes per job")
    lists = per["fold_lists_bytes_per_job"]
    print(f"fold's index:   {per['fold_bytes_per_job']:,.0f} bytes per job ({fold_bytes / 2**20:,.1f} MiB), lists {lists:,.0f}")
    print(f"rebuilt index:  {per['rebuild_bytes_per_job']:,.0f} bytes per job ({rebuild_bytes / 2**20:,.1f} MiB)")
    print(f"put: {put_cpu / args.jobs * 1e6:.2f} µs CPU per job; rebuild (decode, index): {rebuild_cpu / args.jobs * 1e6:.2f} µs")
    queries = query_timings(index, args.rounds)
    for name, us in queries.items():
        print(f"query {name:<26} {us:9,.0f} µs (median of {args.rounds})")
    figures = {name: round(value) for name, value in per.items()}
    print(
        json.dumps(
            {
                "jobs": args.jobs,
                **figures,
                "put_us_per_job": round(put_cpu / args.jobs * 1e6, 2),
                "rebuild_us_per_job": round(rebuild_cpu / args.jobs * 1e6, 2),
                "query_us": {name: round(us) for name, us in queries.items()},
            }
        )
    )


if __name__ == "__main__":
    main()
