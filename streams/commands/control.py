"""`flotilla cancel|preempt|reprioritize`: ask for a change to one job or to every unfinished job of a job set.

Each prints what was asked and the id of the event it wrote; the change itself happens when the
scheduler acts on it (follow it with `flotilla watch`).
"""

from __future__ import annotations

import argparse
import json
from typing import Any
from urllib.parse import quote

from streams.client import Client


def register(commands: Any) -> None:
    cancel = _targets(commands, "cancel", "cancel a job, or every unfinished job of a job set")
    _job(cancel, "cancel one job", reason=True).set_defaults(func=_cancel_job)
    _job_set(cancel, "cancel every unfinished job of a job set", reason=True).set_defaults(func=_cancel_job_set)

    preempt = _targets(commands, "preempt", "preempt a running job (it is not retried)")
    _job(preempt, "preempt one job", reason=True).set_defaults(func=_preempt_job)

    reprioritize = _targets(commands, "reprioritize", "change the priority of a job, or of every unfinished job of a job set")
    job = _job(reprioritize, "change one job's priority", reason=False)
    job.add_argument("priority", type=float, help="new priority, >= 0 (lower is scheduled earlier)")
    job.set_defaults(func=_reprioritize_job)
    job_set = _job_set(reprioritize, "change the priority of every unfinished job of a job set", reason=False)
    job_set.add_argument("priority", type=float, help="new priority, >= 0 (lower is scheduled earlier)")
    job_set.set_defaults(func=_reprioritize_job_set)


def _targets(commands: Any, name: str, help_text: str) -> Any:
    return commands.add_parser(name, help=help_text).add_subparsers(dest="target", required=True, metavar="TARGET")


def _job(targets: Any, help_text: str, *, reason: bool) -> argparse.ArgumentParser:
    parser = targets.add_parser("job", help=help_text)
    parser.add_argument("job_id")
    return _common(parser, reason=reason)


def _job_set(targets: Any, help_text: str, *, reason: bool) -> argparse.ArgumentParser:
    parser = targets.add_parser("job-set", help=help_text)
    parser.add_argument("queue")
    parser.add_argument("job_set")
    return _common(parser, reason=reason)


def _common(parser: argparse.ArgumentParser, *, reason: bool) -> argparse.ArgumentParser:
    if reason:
        parser.add_argument("--reason", help="why; kept in the job's state and events")
    parser.add_argument("--json", action="store_true", help='print the answer, {"event_ids": [...]}')
    parser.add_argument("--url", help="REST API (default $FLOTILLA_URL or http://127.0.0.1:8080)")
    return parser


def _job_path(args: argparse.Namespace, action: str) -> str:
    return f"/api/v1/jobs/{quote(args.job_id, safe='')}/{action}"


def _job_set_path(args: argparse.Namespace, action: str) -> str:
    return f"/api/v1/queues/{quote(args.queue, safe='')}/jobsets/{quote(args.job_set, safe='')}/{action}"


def _reason(args: argparse.Namespace) -> dict[str, Any]:
    return {} if args.reason is None else {"reason": args.reason}


def _cancel_job(args: argparse.Namespace) -> int:
    return _send(args, _job_path(args, "cancel"), _reason(args), f"cancel requested for job {args.job_id}")


def _cancel_job_set(args: argparse.Namespace) -> int:
    what = f"cancel requested for every unfinished job of job set {args.job_set} in queue {args.queue}"
    return _send(args, _job_set_path(args, "cancel"), _reason(args), what)


def _preempt_job(args: argparse.Namespace) -> int:
    return _send(args, _job_path(args, "preempt"), _reason(args), f"preemption requested for job {args.job_id}")


def _reprioritize_job(args: argparse.Namespace) -> int:
    what = f"priority {args.priority:g} requested for job {args.job_id}"
    return _send(args, _job_path(args, "reprioritize"), {"priority": args.priority}, what)


def _reprioritize_job_set(args: argparse.Namespace) -> int:
    what = f"priority {args.priority:g} requested for every unfinished job of job set {args.job_set} in queue {args.queue}"
    return _send(args, _job_set_path(args, "reprioritize"), {"priority": args.priority}, what)


def _send(args: argparse.Namespace, path: str, body: dict[str, Any], what: str) -> int:
    answer = Client.from_env(args.url).call("POST", path, body)
    print(json.dumps(answer) if args.json else f"{what} (event {', '.join(answer['event_ids'])})")
    return 0
