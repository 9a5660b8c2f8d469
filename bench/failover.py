"""Failover benchmark: the worker that schedules is SIGKILLed under load, several times; how long the takeover takes.

Each run starts a fresh group of `--workers` workers over `--partitions` partitions (one consumer
group; one embedded Tansu serves every run) and a fake executor of 4 nodes x 8 cpu, then runs
`tests.integration.failover.run_failover`: submissions (5 jobs of 1 s, client ids, each request
retried through the next worker until answered) and reads (a REST job, a gRPC job status, the REST
job counts, in turn) flow through the workers that will survive, and after 4 s the worker that
schedules is killed. Per run it prints: the scheduler's takeover (kill -> the cluster view, through
a survivor, names another worker that has run a cycle since), the first lease on the log after
the kill, the longest call of each kind (how long callers waited while the group rebalanced),
the calls not answered 200, and what the log says went wrong (`tests.integration.chaos.examine`:
jobs lost or not succeeded, runs leased twice, leases after success, ...). The workers run with
the default session timeout (10 s): the group notices a killed worker only then.
Needs the test extra (`ops/test` installs it). Every process it starts is stopped at the end.
The last line is one JSON object.

    .venv/bin/python bench/failover.py [--runs 3] [--workers 3] [--partitions 4] [--keep]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.processes import Children, exit_status  # noqa: E402
from ops.broker import EmbeddedBroker  # noqa: E402
from tests.integration.failover import FailoverReport, run_failover  # noqa: E402
from tests.integration.group import Group  # noqa: E402
from tests.integration.pipeline import Executors  # noqa: E402


def log(message: str) -> None:
    print(f"[failover] {message}", file=sys.stderr, flush=True)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3, help="kills, each with a fresh group (default 3)")
    parser.add_argument("--workers", type=int, default=3, help="workers in the group before the kill (default 3)")
    parser.add_argument("--partitions", type=int, default=4, help="partitions of the partitioned topics (default 4)")
    parser.add_argument("--keep", action="store_true", help="keep the logs directory instead of removing it")
    args = parser.parse_args(argv)
    if args.runs < 1 or args.workers < 2 or args.partitions < 1:
        parser.error("give at least one run, two workers and one partition")
    return args


def run(broker: EmbeddedBroker, children: Children, directory: Path, args: argparse.Namespace, number: int) -> FailoverReport:
    group = Group(broker, directory, args.partitions, f"failover-{number}", extra_env={"FLOTILLA_SCHEDULE_PERIOD_S": "0.5"})
    try:
        for index in range(args.workers):
            log(f"run {number}: starting worker {index + 1}/{args.workers} ...")
            children.add(group.add())
        executors = Executors(group.workers[0], directory)
        children.add(executors.fake("failover-c1", nodes=4))
        try:
            return run_failover(group, executors, f"failover-{number}")
        finally:
            executors.stop_all()
    finally:
        group.stop()


def figures(values: list[float]) -> dict[str, float | None]:
    known = [value for value in values if not math.isnan(value)]
    if not known:
        return {"min": None, "median": None, "max": None}
    return {"min": round(min(known), 2), "median": round(statistics.median(known), 2), "max": round(max(known), 2)}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    directory = Path(tempfile.mkdtemp(prefix="flotilla-bench-failover-"))
    log(
        f"{args.runs} run(s): {args.workers} workers, {args.partitions} partitions, the scheduling worker killed; "
        f"{os.cpu_count()} cores, Python {platform.python_version()}"
    )
    reports: list[FailoverReport] = []
    try:
        with Children(log) as children:
            broker = children.add(EmbeddedBroker(log_path=directory / "broker.log", new_session=True))
            broker.start()
            for number in range(1, args.runs + 1):
                report = run(broker, children, directory / f"run-{number}", args, number)
                reports.append(report)
                print(f"run {number}: {report.line()}", flush=True)
    except KeyboardInterrupt:
        log("interrupted")
        return exit_status()
    finally:
        if args.keep:
            log(f"logs kept in {directory}")
        else:
            shutil.rmtree(directory, ignore_errors=True)
    kinds = sorted({call.kind for report in reports for call in report.calls})
    summary = {
        "runs": args.runs,
        "workers": args.workers,
        "partitions": args.partitions,
        "jobs": [report.jobs for report in reports],
        "scheduler_takeover_s": figures([report.scheduler_takeover_s for report in reports]),
        "first_lease_after_kill_s": figures([report.first_lease_s for report in reports]),
        "longest_call_s": {kind: figures([report.longest(kind) for report in reports]) for kind in kinds},
        "calls": sum(len(report.calls) for report in reports),
        "calls_not_answered_200": sum(len(report.refused()) for report in reports),
        "problems": [problem for report in reports for problem in report.problems()],
        "cores": os.cpu_count(),
        "python": platform.python_version(),
    }
    print(json.dumps(summary))
    return 1 if summary["problems"] else 0


if __name__ == "__main__":
    sys.exit(main())
