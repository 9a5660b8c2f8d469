"""UI benchmark: job queries and UI pages of one worker holding N jobs (default 100,000).

Everything runs as the user runs it: an embedded Tansu broker on a free port, one control-plane
worker (`python -m streams.client.cli worker`) and one fake executor whose `--nodes` 32-cpu nodes
run 1-cpu jobs for an hour, so some jobs run and the rest wait.

1. fill: N jobs (1 cpu, labels `shard=<i mod 10>`, and `rare=yes` on one job in 1,000) in submit
   requests of 100 over `--queues` queues and `--job-sets` job sets per queue, produced straight to
   `flotilla.submissions` (bench/ingest.py's way); done when GET /api/v1/job-counts counts them all.
   Meanwhile the counts and the newest 100 jobs are read every half second and timed (reads while
   the fold is busy).
   One job set is then cancelled (REST), so the jobs are queued, running or cancelled. Then the
   worker is asked nothing for 10 s (idle: what the scheduling cycle over the queued jobs costs).
2. queries: each REST query of the list below `--repeat` times in a row from this process (one
   connection per call, as the UI's browser makes them), wall time per call: p50, p95, max. Deep
   pages twice: the walk from the first page to page `--cursor-depth` (20) by each page's cursor,
   and that page alone by its cursor.
3. pages: headless Chromium (Debian's, as the UI tests drive it) opens each UI page; the time from
   navigation to the page's rows on screen (the first load, then `--repeat` more), and of it the
   longest the page waited for one API call (the browser's resource timing: request to last byte).
4. restart: the worker is stopped and started again on its data directory; the time until it is
   healthy, and the first jobs list after it (the index is rebuilt from the job-index table then).

The worker's CPU time is measured during the fill, the idle pause, the queries and the pages
(seconds, and the cores it kept busy).

Progress goes to stderr; the last stdout line is one JSON object.

Usage: .venv/bin/python bench/ui.py [--jobs 100000] [--queues 10] [--job-sets 10] [--nodes 8]
       [--repeat 20] [--no-browser] [--no-restart] [--py-spy BIN [--profile-out PREFIX]] [--keep]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from aiokafka import AIOKafkaProducer  # noqa: E402

from bench.ingest import PRODUCER_OPTIONS, cpu_seconds, produce_all, read_status  # noqa: E402
from bench.processes import Children, exit_status, py_spy_recording  # noqa: E402
from ops.broker import EmbeddedBroker, free_port  # noqa: E402
from ops.executor import ExecutorProcess  # noqa: E402
from ops.worker import WorkerProcess  # noqa: E402
from schemas.codec import encode  # noqa: E402
from streams.client.rest import Client  # noqa: E402
from streams.domain import jobspec  # noqa: E402

SUBMISSIONS = "flotilla.submissions"
BATCH = 100
RARE_EVERY = 1000
FILL_TIMEOUT_S = 900.0
# Seconds the worker is asked nothing once the jobs are in: what it spends on its own (the scheduling
# cycle over the queued jobs, the executor's reports).
IDLE_S = 10.0


def log(message: str) -> None:
    print(f"[ui] {message}", file=sys.stderr, flush=True)


def item(i: int) -> dict[str, Any]:
    resources = {"cpu": "1", "memory": "1Gi"}
    labels = {"shard": str(i % 10), **({"rare": "yes"} if i % RARE_EVERY == 0 else {})}
    return {
        "priority": float(i % 5),
        "labels": labels,
        "annotations": {"flotilla.io/fake-runtime-seconds": "3600"},
        "pod_spec": {"containers": [{"name": "main", "image": "busybox", "resources": {"requests": resources, "limits": resources}}]},
    }


def requests(jobs: int, queues: list[str], job_sets: int) -> list[tuple[bytes, bytes]]:
    records = []
    for index, first in enumerate(range(0, jobs, BATCH)):
        queue = queues[index % len(queues)]
        request = {
            "request_id": f"bench-ui-{index:08d}",
            "queue": queue,
            "job_set_id": f"set-{(index // len(queues)) % job_sets}",
            "user": "anonymous",
            "groups": [],
            "items": [jobspec.job_item(item(i)) for i in range(first, min(jobs, first + BATCH))],
        }
        records.append((queue.encode(), encode("submit_request", request)))
    return records


def timed(call: Callable[[], Any], repeat: int) -> tuple[list[float], Any]:
    times, answer = [], None
    for _ in range(repeat):
        started = time.perf_counter()
        answer = call()
        times.append(time.perf_counter() - started)
    return times, answer


def figures(times: list[float]) -> dict[str, float]:
    ordered = sorted(times)
    return {
        "p50_ms": round(1000 * statistics.median(ordered), 2),
        "p95_ms": round(1000 * ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))], 2),
        "max_ms": round(1000 * ordered[-1], 2),
    }


def wait_counted(client: Client, jobs: int, during: dict[str, list[float]]) -> float:
    """Seconds until ``jobs`` are counted; meanwhile the counts and the newest 100 jobs are read every
    half second, and how long each read took is added to ``during`` (reads while the fold is busy)."""
    started = time.monotonic()
    next_report = started + 10
    while True:
        times, answer = timed(client.job_counts, 1)
        during["counts_by_queue"] += times
        during["newest_100_all_queues"] += timed(client.list_jobs, 1)[0]
        counted = sum(sum(group.counts.values()) for group in answer)
        now = time.monotonic()
        if counted >= jobs:
            return now - started
        if now - started > FILL_TIMEOUT_S:
            raise RuntimeError(f"only {counted:,} of {jobs:,} jobs listed after {FILL_TIMEOUT_S:.0f}s")
        if now >= next_report:
            log(f"  {counted:,}/{jobs:,} jobs in the index after {now - started:.0f}s")
            next_report = now + 10
        time.sleep(0.5)


def states(client: Client) -> dict[str, int]:
    by_state: dict[str, int] = {}
    for group in client.job_counts():
        for state, count in group.counts.items():
            by_state[state] = by_state.get(state, 0) + count
    return by_state


def wait_cancelled(client: Client, jobs: int) -> dict[str, int]:
    """Jobs by state once the cancelled job set's ``jobs`` (at least most of them) show as cancelled."""
    deadline = time.monotonic() + 120
    while (found := states(client))["cancelled"] < jobs * 0.9:
        if time.monotonic() > deadline:
            raise RuntimeError(f"only {found['cancelled']:,} of {jobs:,} jobs cancelled after 120 s")
        time.sleep(0.5)
    return found


def queries(client: Client, queue: str, cursor_depth: int) -> dict[str, Callable[[], Any]]:
    def walk(pages: int = cursor_depth) -> Any:
        page = client.list_jobs(queues=[queue])
        for _ in range(pages - 1):
            page = client.list_jobs(queues=[queue], cursor=page.next_cursor)
        return page

    deep_cursor = walk(cursor_depth - 1).next_cursor if cursor_depth > 1 else None  # where page `cursor_depth` starts

    return {
        "newest_100_all_queues": lambda: client.list_jobs(),
        "newest_100_one_queue": lambda: client.list_jobs(queues=[queue]),
        "one_job_set": lambda: client.list_jobs(queues=[queue], job_set="set-1"),
        "running_one_queue": lambda: client.list_jobs(queues=[queue], states=["running"]),
        "queued_oldest_first": lambda: client.list_jobs(states=["queued"], order="asc"),
        "label_rare": lambda: client.list_jobs(labels={"rare": "yes"}),
        "label_and_state": lambda: client.list_jobs(labels={"shard": "3"}, states=["cancelled"]),
        "sort_last_transition_one_queue": lambda: client.list_jobs(queues=[queue], sort="last_transition"),
        "sort_priority_all": lambda: client.list_jobs(sort="priority"),
        f"walk_{cursor_depth}_pages_one_queue": lambda: walk(cursor_depth),
        f"page_{cursor_depth}_by_cursor_one_queue": lambda: client.list_jobs(queues=[queue], cursor=deep_cursor),
        "counts_by_queue": lambda: client.job_counts(),
        "counts_by_job_set": lambda: client.job_counts(group_by="job_set"),
    }


# The longest a page's browser waited for one of its API calls, from sending it to its last byte
# (the browser's resource timing): what of a page's time is the worker's.
SLOWEST_API_CALL = """
return Math.max(0, ...performance.getEntriesByType("resource")
  .filter((e) => e.name.includes("/api/")).map((e) => e.responseEnd - e.requestStart));
"""


def pages(worker_url: str, directory: Path, queue: str, job_id: str, repeat: int) -> dict[str, dict[str, float]]:
    from tests.integration.browser import chromium  # the UI tests' browser: Debian's chromium and chromedriver

    routes = {
        "queues": ("/queues", "tr[data-queue]"),
        "jobs_newest": ("/jobs", "tr[data-job]"),
        "jobs_one_job_set": (f"/jobs?queue={queue}&job_set=set-1", "tr[data-job]"),
        "jobs_running": ("/jobs?state=running", "tr[data-job]"),
        "job_set": (f"/jobset/{queue}/set-1", "tr[data-job]"),
        "job_page": (f"/job/{job_id}", "#job-state .state"),
        # Its events are read from the records of the events topic that hold them, after the rest is shown.
        "job_page_events": (f"/job/{job_id}", "section[aria-label=Events] table tbody tr"),
    }
    found: dict[str, dict[str, float]] = {}
    with chromium(directory / "chromium-profile", directory / "chromedriver.log") as driver:
        driver.get(f"{worker_url}/")
        for name, (route, rows) in routes.items():
            times, waits = [], []
            for n in range(repeat + 1):
                driver.get("about:blank")
                started = time.perf_counter()
                driver.get(f"{worker_url}/#{route}")
                deadline = started + 60
                while not driver.find_elements("css selector", rows):
                    if time.perf_counter() > deadline:
                        raise RuntimeError(f"page {route} showed no {rows} in 60 s")
                    time.sleep(0.005)
                elapsed = time.perf_counter() - started
                if n == 0:
                    first = elapsed
                else:
                    times.append(elapsed)
                    waits.append(driver.execute_script(SLOWEST_API_CALL) / 1000)
            wait = figures(waits)
            found[name] = {"first_ms": round(1000 * first, 1), **figures(times), "api_p50_ms": wait["p50_ms"], "api_p95_ms": wait["p95_ms"]}
            slowest = f"slowest API call {wait['p50_ms']:.0f} ms"
            log(f"  page {name}: first {1000 * first:.0f} ms, p50 {found[name]['p50_ms']:.0f} ms ({slowest})")
    return found


@contextmanager
def measured(
    args: argparse.Namespace, children: Children, worker: WorkerProcess, phase: str, usage: dict[str, dict[str, float]]
) -> Iterator[None]:
    """The worker's CPU during a phase, into ``usage[phase]``: seconds of wall and CPU time and the
    cores it kept busy (the scheduling cycle's thread among them); profiled too when asked for."""
    assert worker.process is not None
    pid = worker.process.pid
    with profiled(args, children, worker, phase):
        started, cpu_before = time.monotonic(), cpu_seconds(pid)
        yield
        wall, cpu = time.monotonic() - started, cpu_seconds(pid) - cpu_before
    usage[phase] = {"wall_s": round(wall, 1), "cpu_s": round(cpu, 1), "cores": round(cpu / wall, 2)}
    log(f"worker CPU during {phase}: {cpu:.1f} s in {wall:.1f} s ({cpu / wall:.2f} cores)")


@contextmanager
def profiled(args: argparse.Namespace, children: Children, worker: WorkerProcess, phase: str) -> Iterator[None]:
    """py-spy on the worker during a phase, when asked for: `--format raw` (folded stacks), every thread."""
    if not args.py_spy:
        yield
        return
    assert worker.process is not None
    with py_spy_recording(children, args.py_spy, worker.process.pid, f"{args.profile_out}-{phase}.txt", threads=True, log=log):
        yield


async def fill(bootstrap: str, records: list[tuple[bytes, bytes]]) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, **PRODUCER_OPTIONS)
    await producer.start()
    try:
        await produce_all(producer, SUBMISSIONS, records)
    finally:
        await producer.stop()


def rss_mib(process: WorkerProcess) -> float:
    assert process.process is not None
    return read_status(process.process.pid).get("VmRSS", 0) / 1024


def run(args: argparse.Namespace, directory: Path, children: Children) -> dict[str, Any]:
    queues = [f"ui-{i}" for i in range(args.queues)]
    broker = children.add(EmbeddedBroker(log_path=directory / "broker.log", new_session=True))
    broker.start()
    port = free_port()
    env = {
        **os.environ,
        "FLOTILLA_BROKER": broker.url,
        "FLOTILLA_DATA_DIR": str(directory / "data"),
        "FLOTILLA_WEB_PORT": str(port),
        "FLOTILLA_GRPC_PORT": str(free_port()),
    }
    worker = children.add(WorkerProcess(env=env, log_path=directory / "worker.log", web_port=port, new_session=True))
    log(f"broker {broker.url}; starting the worker (logs in {directory}) ...")
    worker.start(120.0)
    client = Client(worker.url, timeout_s=120.0)
    for queue in queues:
        client.call("POST", "/api/v1/queues", {"name": queue, "priority_factor": 1.0})
    spec = directory / "cluster.yaml"
    spec.write_text(yaml.safe_dump({"nodes": [{"count": args.nodes, "prefix": "node", "cpu": "32", "memory": "256Gi"}]}))
    executor = children.add(
        ExecutorProcess("fake-0", "fake", env, directory / "executor.log", args=("--cluster", str(spec)), new_session=True)
    )
    executor.start(120.0)
    rss_before = rss_mib(worker)
    log(f"encoding {args.jobs:,} jobs ...")
    records = requests(args.jobs, queues, args.job_sets)
    log(f"fill: producing {len(records):,} submit requests ...")
    during: dict[str, list[float]] = {"counts_by_queue": [], "newest_100_all_queues": []}
    usage: dict[str, dict[str, float]] = {}
    with measured(args, children, worker, "fill", usage):
        started = time.monotonic()
        asyncio.run(fill(broker.bootstrap, records))
        fill_s = (time.monotonic() - started) + wait_counted(client, args.jobs, during)
    while_filling = {name: figures(times) for name, times in during.items()}
    log(f"fill: reads meanwhile {while_filling}")
    client.call("POST", f"/api/v1/queues/{queues[0]}/jobsets/set-2/cancel", {"reason": "bench"})
    by_state = wait_cancelled(client, args.jobs // (args.queues * args.job_sets))
    log(f"fill: {args.jobs:,} jobs listed after {fill_s:.1f}s; by state {by_state}")
    rss_full = rss_mib(worker)
    with measured(args, children, worker, "idle", usage):
        time.sleep(IDLE_S)

    results: dict[str, dict[str, float]] = {}
    rows: dict[str, int] = {}
    with measured(args, children, worker, "queries", usage):
        for name, call in queries(client, queues[0], args.cursor_depth).items():
            times, answer = timed(call, args.repeat)
            results[name] = figures(times)
            rows[name] = len(answer.jobs) if hasattr(answer, "jobs") else len(answer)
            log(f"  query {name}: p50 {results[name]['p50_ms']:.1f} ms, p95 {results[name]['p95_ms']:.1f} ms ({rows[name]} rows)")

    one_job = client.list_jobs(queues=[queues[0]], job_set="set-1", limit=1).jobs[0].job_id
    page_times = {}
    if args.browser:
        with measured(args, children, worker, "pages", usage):
            page_times = pages(worker.url, directory, queues[0], one_job, args.repeat)

    restart: dict[str, float] = {}
    if args.restart:
        worker.stop()
        started = time.monotonic()
        worker.start(300.0)
        healthy = time.monotonic() - started
        with profiled(args, children, worker, "first-list"):
            first, answer = timed(lambda: client.list_jobs(), 1)
        assert answer.jobs, "no job listed after the restart"
        restart = {"healthy_s": round(healthy, 2), "first_list_ms": round(1000 * first[0], 1)}
        log(f"restart: healthy after {healthy:.1f}s, first list {1000 * first[0]:.0f} ms (rebuilds the index)")
    return {
        "fill_s": round(fill_s, 1),
        "while_filling": while_filling,
        "states": by_state,
        "worker_rss_before_mib": round(rss_before, 1),
        "worker_rss_full_mib": round(rss_full, 1),
        "worker_cpu": usage,
        "queries": results,
        "rows": rows,
        "pages": page_times,
        "restart": restart,
    }


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=100_000, help="jobs (default 100000)")
    parser.add_argument("--queues", type=int, default=10, help="queues (default 10)")
    parser.add_argument("--job-sets", type=int, default=10, help="job sets per queue (default 10)")
    parser.add_argument("--nodes", type=int, default=8, help="fake 32-cpu nodes: 32 running jobs each (default 8)")
    parser.add_argument("--repeat", type=int, default=20, help="timed repetitions of each query and page (default 20)")
    parser.add_argument("--cursor-depth", type=int, default=20, help="the deep page, walked to and read alone by cursor (default 20)")
    parser.add_argument("--no-browser", dest="browser", action="store_false", help="skip the page times (no Chromium)")
    parser.add_argument("--no-restart", dest="restart", action="store_false", help="skip the restart")
    parser.add_argument(
        "--py-spy",
        metavar="BIN",
        help="profile the worker with this py-spy during the fill, the queries, the pages and the first list after the restart",
    )
    parser.add_argument(
        "--profile-out",
        default="/tmp/ui-profile",
        help="py-spy output prefix; -fill.txt, -idle.txt, -queries.txt, -pages.txt, -first-list.txt are appended",
    )
    parser.add_argument("--keep", action="store_true", help="keep the logs directory instead of removing it")
    args = parser.parse_args(argv)
    if min(args.jobs, args.queues, args.job_sets, args.nodes, args.repeat, args.cursor_depth) < 1:
        parser.error("counts must be positive")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    directory = Path(tempfile.mkdtemp(prefix="flotilla-bench-ui-"))
    conditions = (
        f"{args.jobs:,} jobs over {args.queues} queues x {args.job_sets} job sets; fake executor {args.nodes} x 32 cpu; "
        f"{os.cpu_count()} cores shared by the broker, the worker, the executor, Chromium and this client; "
        f"Python {platform.python_version()}; embedded Tansu, 1 partition; {args.repeat} repetitions"
    )
    log(conditions)
    try:
        with Children(log) as children:
            result = run(args, directory, children)
    except KeyboardInterrupt:
        log("interrupted")
        return exit_status()
    except Exception as exc:  # noqa: BLE001 - report and clean up
        log(f"error: {exc!r}")
        for name in ("worker.log", "executor.log"):
            path = directory / name
            if path.exists():
                log("\n".join(path.read_text(errors="replace").splitlines()[-30:]))
        return 1
    finally:
        if args.keep:
            log(f"logs kept in {directory}")
        else:
            shutil.rmtree(directory, ignore_errors=True)
    print(f"conditions: {conditions}")
    print(f"fill: {result['fill_s']}s until every job was listed; states {result['states']}")
    for name, times in result["while_filling"].items():
        print(f"  query {name} while the fold was busy: p50 {times['p50_ms']} ms, p95 {times['p95_ms']} ms, max {times['max_ms']} ms")
    print(f"worker RSS: {result['worker_rss_before_mib']} MiB before the jobs, {result['worker_rss_full_mib']} MiB with them")
    for phase, used in result["worker_cpu"].items():
        print(f"worker CPU during {phase}: {used['cpu_s']} s in {used['wall_s']} s ({used['cores']} cores)")
    for name, times in result["queries"].items():
        print(f"  query {name}: p50 {times['p50_ms']} ms, p95 {times['p95_ms']} ms, max {times['max_ms']} ms ({result['rows'][name]} rows)")
    for name, times in result["pages"].items():
        print(
            f"  page {name}: first {times['first_ms']} ms, then p50 {times['p50_ms']} ms, p95 {times['p95_ms']} ms;"
            f" its slowest API call p50 {times['api_p50_ms']} ms, p95 {times['api_p95_ms']} ms"
        )
    if result["restart"]:
        print(f"restart: healthy after {result['restart']['healthy_s']}s; first list {result['restart']['first_list_ms']} ms")
    print(json.dumps({"jobs": args.jobs, "queues": args.queues, "job_sets": args.job_sets, "repeat": args.repeat, **result}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
