"""Chaos runs over several seeds: jobs run to the end while the worker is SIGKILLed three times.

Each seed runs `tests.integration.chaos.run_chaos` (two fake executors of 8 nodes x 16 cpu, jobs of
0.5-1.5 s, the worker killed at 25%, 50% (with its data directory deleted) and 75% of the jobs
succeeded) against one embedded Tansu, with a fresh worker per seed, and prints a line per seed:
what must never happen (each 0 on a good run), the index against the unfinished jobs, and the
takeover times (a kill to the first lease on the log after it). The last line is one JSON object.
Needs the test extra (`ops/test` installs it). Every process it starts is stopped at the end.

    .venv/bin/python bench/chaos.py --seeds 1,2,3,4,5 [--jobs 3000] [--keep]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.processes import Children, exit_status  # noqa: E402
from ops.broker import EmbeddedBroker  # noqa: E402
from tests.integration.chaos import ChaosReport, run_chaos  # noqa: E402
from tests.integration.workers import new_worker  # noqa: E402


def log(message: str) -> None:
    print(f"[chaos] {message}", file=sys.stderr, flush=True)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", default="1,2,3,4,5", help="comma-separated seeds (default 1,2,3,4,5)")
    parser.add_argument("--jobs", type=int, default=3000, help="jobs per seed (default 3000)")
    parser.add_argument("--keep", action="store_true", help="keep the logs directory instead of removing it")
    args = parser.parse_args(argv)
    args.seeds = [int(seed) for seed in args.seeds.split(",") if seed]
    if not args.seeds or args.jobs < 1:
        parser.error("give at least one seed and a positive number of jobs")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    directory = Path(tempfile.mkdtemp(prefix="flotilla-bench-chaos-"))
    log(f"{args.jobs:,} jobs per seed, seeds {args.seeds}; {os.cpu_count()} cores, Python {platform.python_version()}")
    reports: list[ChaosReport] = []
    try:
        with Children(log) as children:
            broker = children.add(EmbeddedBroker(log_path=directory / "broker.log", new_session=True))
            broker.start()
            for seed in args.seeds:
                worker = new_worker(broker, directory / f"seed-{seed}", f"chaos-{seed}")
                worker.extra_env.update(FLOTILLA_EXECUTOR_TIMEOUT_S="6", FLOTILLA_SCHEDULE_PERIOD_S="0.5")
                children.add(worker)
                worker.start()
                try:
                    report = run_chaos(worker, directory / f"seed-{seed}", args.jobs, seed)
                finally:
                    worker.stop()
                reports.append(report)
                print(report.line(), flush=True)
                for problem in report.problems():
                    log(f"seed {seed}: {problem}")
    except KeyboardInterrupt:
        log("interrupted")
        return exit_status()
    finally:
        if args.keep:
            log(f"logs kept in {directory}")
        else:
            shutil.rmtree(directory, ignore_errors=True)
    failed = [report.seed for report in reports if report.problems()]
    summary = {
        "jobs": args.jobs,
        "seeds": [dataclasses.asdict(report) | {"problems": report.problems()} for report in reports],
        "failed_seeds": failed,
        "cores": os.cpu_count(),
    }
    print(json.dumps(summary, default=str))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
