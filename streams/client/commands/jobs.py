"""`flotilla submit FILE`, `flotilla job status ID` and `flotilla job logs ID`."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from streams.client.commands import CommandError, replays
from streams.client.commands.connection import add_connection_options, client_for
from streams.client.jobfile import load_job_file
from streams.replay.times import show_time


def register(commands: Any) -> None:
    submit = commands.add_parser("submit", help="submit an Armada-style job file (queue, jobSetId, jobs)")
    submit.add_argument("file", type=Path)
    submit.add_argument("--json", action="store_true", help='print {"job_ids": [...]}')
    add_connection_options(submit)
    submit.set_defaults(func=_submit)

    job = commands.add_parser("job", help="inspect jobs")
    actions = job.add_subparsers(dest="action", required=True, metavar="ACTION")
    status = actions.add_parser("status", help="show a job's state and runs")
    status.add_argument("job_id")
    status.add_argument("--json", action="store_true", help="print the job as JSON")
    status.add_argument(
        "--at", type=replays.time_option, metavar="TIME", help="the job as the log said at TIME (ISO 8601 or epoch ms), folded from the log"
    )
    replays.add_log_options(status, broker=False)
    add_connection_options(status)
    status.set_defaults(func=_status)

    logs = actions.add_parser("logs", help="print the output of a job's run on a local executor of this machine")
    logs.add_argument("job_id")
    logs.add_argument("--run", help="run id (default: the job's latest run)")
    logs.add_argument(
        "--state-dir", type=Path, default=Path(".flotilla"), help="the state directory `flotilla up` was given (default .flotilla)"
    )
    add_connection_options(logs)
    logs.set_defaults(func=_logs)


def _submit(args: argparse.Namespace) -> int:
    try:
        text = args.file.read_text()
    except OSError as exc:
        raise CommandError(f"cannot read {args.file}: {exc.strerror}") from exc
    request = load_job_file(text)
    answer = client_for(args).call("POST", "/api/v1/jobs", request, accept=(207, 422))
    errors = [(i, item["error"]) for i, item in enumerate(answer["items"]) if "error" in item]
    if args.json:
        print(json.dumps({"job_ids": answer["job_ids"], **({"errors": dict(errors)} if errors else {})}))
    else:
        accepted = [job_id for job_id in answer["job_ids"] if job_id]
        if accepted:
            print(f"submitted {len(accepted)} job(s) to queue {request['queue']}, job set {request['job_set_id']}:")
            for job_id in accepted:
                print(f"  {job_id}")
    for index, reason in errors:
        print(f"error: jobs[{index}] rejected: {reason}", file=sys.stderr)
    return 1 if errors else 0


def _status(args: argparse.Namespace) -> int:
    if args.at is not None or args.from_archive is not None:
        job = replays.job_status_at(args)
    else:
        job = client_for(args).call("GET", f"/api/v1/jobs/{args.job_id}")
    if args.json:
        print(json.dumps(job, indent=2))
        return 0
    as_of = f"  (as of {show_time(job['as_of'])})" if job.get("as_of") is not None else ""
    print(f"job {job['job_id']}  {job['state'].upper()}{as_of}")
    print(f"  queue {job['queue']}, job set {job['job_set']}, priority {job['priority']:g}, class {job['priority_class']}")
    if job["reason"]:
        print(f"  reason: {job['reason']}")
    for run in job["runs"]:
        exit_code = "" if run["exit_code"] is None else f" exit {run['exit_code']}"
        print(f"  run {run['run_id']} on {run['executor']}/{run['node']}: {run['state']}{exit_code}")
    return 0


def _logs(args: argparse.Namespace) -> int:
    job = client_for(args).call("GET", f"/api/v1/jobs/{args.job_id}")
    log = run_log_path(job, args.state_dir, args.run)
    sys.stdout.buffer.write(log.read_bytes())
    sys.stdout.flush()
    return 0


def run_log_path(job: dict[str, Any], state_dir: Path, run_id: str | None) -> Path:
    """Where a local executor keeps the output of the job's run (the latest one unless ``run_id``).

    The executor named by the run keeps its state under `<state-dir>/executors/<executor>/`, so a
    run of any other executor (Kubernetes, another machine) has no directory here.
    """
    runs = job["runs"]
    if not runs:
        raise CommandError(f"job {job['job_id']} has not run yet (it is {job['state']})")
    if run_id is None:
        run = runs[-1]
    else:
        run = next((r for r in runs if r["run_id"] == run_id), None)
        if run is None:
            known = ", ".join(r["run_id"] for r in runs)
            raise CommandError(f"job {job['job_id']} has no run {run_id} (its runs: {known})")
    executor_dir = state_dir / "executors" / run["executor"]
    if not executor_dir.is_dir():
        raise CommandError(
            f"run {run['run_id']} ran on executor {run['executor']!r}, which keeps no files under {executor_dir}: "
            "logs are kept only by local executors on this machine (is --state-dir the one `flotilla up` used?)"
        )
    log = executor_dir / "runs" / run["run_id"] / "output.log"
    if not log.is_file():
        raise CommandError(f"run {run['run_id']} has no log yet (it is {run['state']}; expected {log})")
    return log
